"""Schedules: a task assigned to an agent on every tick of a cron expression (pure domain;
the runtime manager's ``runtime_manager.schedules`` owns and fires them)."""

from ares.schedules.model import (
    CATCHUPS,
    COMMAND_TYPES,
    KEY_PREFIX,
    ONCE,
    SKIP,
    Cron,
    Decision,
    Schedule,
    ScheduleError,
    decide,
    key_of,
    name_of,
    plan_after,
    task_id_for,
)

__all__ = [
    "CATCHUPS",
    "COMMAND_TYPES",
    "KEY_PREFIX",
    "ONCE",
    "SKIP",
    "Cron",
    "Decision",
    "Schedule",
    "ScheduleError",
    "decide",
    "key_of",
    "name_of",
    "plan_after",
    "task_id_for",
]
