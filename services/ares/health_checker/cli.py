"""The flags of ``ares run health-checker`` (each overrides its ``ARES_HEALTH_*`` setting)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ares.health_checker.config import HealthConfig, parse_step_timeouts

F = TypeVar("F", bound=Callable[..., Any])
_SECONDS = click.FloatRange(min=0, min_open=True)

_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("--silence", "silence_s", _SECONDS,
     "seconds of heartbeat silence before a verdict (ARES_HEALTH_SILENCE_S)  "
     "[default: 3 x each worker's interval]"),
    ("--silence-factor", "silence_factor", _SECONDS,
     "silence as a multiple of the worker's interval (ARES_HEALTH_SILENCE_FACTOR)  "
     "[default: 3]"),
    ("--step-timeout", "step_timeout_s", _SECONDS,
     "no-progress limit of agents that declare no step_timeout_s in their config "
     "(ARES_HEALTH_STEP_TIMEOUT_S)  [default: 600]"),
    ("--step-timeouts", "step_timeouts", str,
     "per kind, kind=seconds[,kind=seconds] (ARES_HEALTH_STEP_TIMEOUTS)"),
    ("--grace", "grace_s", _SECONDS,
     "no verdict this long after a (re)start or owner change (ARES_HEALTH_GRACE_S)  "
     "[default: the silence]"),
    ("--resurrection-deadline", "resurrection_deadline_s", _SECONDS,
     "a death not resurrected and heard from within this is late "
     "(ARES_HEALTH_RESURRECTION_DEADLINE_S)  [default: 60]"),
    ("--healthy-after", "healthy_after_s", _SECONDS,
     "an incarnation alive this long forgives earlier deaths "
     "(ARES_HEALTH_HEALTHY_AFTER_S)  [default: 300]"),
    ("--loop-deaths", "loop_deaths", click.IntRange(min=2),
     "deaths in the window that make a death loop (ARES_HEALTH_LOOP_DEATHS)  [default: 5]"),
    ("--loop-window", "loop_window_s", _SECONDS,
     "the death-loop window in seconds (ARES_HEALTH_LOOP_WINDOW_S)  [default: 600]"),
    ("--lookback", "lookback_s", _SECONDS,
     "how far back the state is rebuilt on start (ARES_HEALTH_LOOKBACK_S)  "
     "[default: twice the longest window]"),
    ("--tick", "tick_s", _SECONDS,
     "seconds between two looks at the clock (ARES_HEALTH_TICK_S)  [default: 0.1]"),
    ("--remove-lost-workers", "remove_lost_workers", click.BOOL,
     "a worker_lost verdict also removes the worker from the runtime's consumer group, so "
     "its partitions move at once (false: after the session timeout) "
     "(ARES_HEALTH_REMOVE_LOST_WORKERS)  [default: true]"),
)


def health_checker_options(command: F) -> F:
    for flag, name, kind, help_text in reversed(_OPTIONS):
        command = click.option(flag, name, type=kind, default=None, help=help_text)(command)
    return command


def health_config(**flags: Any) -> HealthConfig:
    """Settings from the environment, flags over them."""
    timeouts = flags.pop("step_timeouts", None)
    if timeouts is not None:
        flags["step_timeouts"] = parse_step_timeouts(timeouts, "--step-timeouts")
    return HealthConfig.from_env(**{k: v for k, v in flags.items() if k in _NAMES})


_NAMES = frozenset(name for _, name, _, _ in _OPTIONS)
