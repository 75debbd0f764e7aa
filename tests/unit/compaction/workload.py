"""Agent streams for the compaction tests: realistic event mixes of a chosen length.

``agent_events(n)`` is what a ``test.counter`` agent (tests.support.agents) records over
its life: started, then tasks (assigned, an LLM call, a tool call, a step, completed), then
heartbeats to reach exactly ``n`` events. Every task is finished, so a recovered agent has
nothing to run and its state depends on the events alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ares.events.model import Event, NewEvent
from ares.events.wire.canonical import canonical_json
from ares.lifecycle.state import from_events

KIND = "test.counter"
EVENTS_PER_TASK = 6
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def agent_events(agent_id: str, count: int, *, kind: str = KIND,
                 start: datetime = T0) -> list[NewEvent]:
    """``count`` events (>= 1) of one agent, one second apart from ``start``."""
    events: list[NewEvent] = []

    def add(type_: str, payload: dict[str, Any]) -> None:
        events.append(NewEvent(type_, "tests", payload,
                               timestamp=start + timedelta(seconds=len(events))))

    add("agent.started", {"kind": kind, "config_json": "{}", "incarnation": 1,
                          "worker": "worker-a"})
    task = 0
    while count - len(events) >= EVENTS_PER_TASK:
        task_id = f"{agent_id}-task-{task}"
        add("task.assigned", {"task_id": task_id, "input_json": canonical_json(
            {"request": f"Plan trip {task} for {agent_id}"})})
        add("llm.call", {"name": "plan", "model": "offline-1", "prompt_hash": "0" * 64,
                         "output": "a plan", "prompt_tokens": 100, "completion_tokens": 20,
                         "task_id": task_id})
        add("tool.call.intent", {"call_id": f"{task_id}-c", "tool": "search" if task % 3
                                 else "send_email", "effect": "idempotent",
                                 "task_id": task_id})
        add("tool.call.completed", {"call_id": f"{task_id}-c", "result_json": "[]",
                                    "tool": "search" if task % 3 else "send_email"})
        add("step.completed", {"step_name": "count", "result_json": str(task),
                               "task_id": task_id})
        add("task.completed", {"task_id": task_id, "output_json": canonical_json(
            {"seen": task + 1})})
        task += 1
    while len(events) < count:
        add("heartbeat", {"worker": "worker-a", "progress": f"idle {len(events)}"})
    return events


def counter_state(events: Sequence[Event]) -> dict[str, Any]:
    """What ``test.counter`` snapshots after ``events`` (its ``apply`` folds task ids)."""
    return {"seen": [str(e.payload["task_id"]) for e in events if e.type == "task.assigned"]}


def snapshot_state(events: Sequence[Event], journal_from: int | None = None) -> dict[str, Any]:
    """The host's snapshot state (ares.runtime_manager.replay.snapshot_state) after
    ``events``."""
    return {"lifecycle": from_events(events).to_json(), "agent": counter_state(events),
            "journal_from": journal_from}
