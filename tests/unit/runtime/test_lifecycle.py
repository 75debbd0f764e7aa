"""The lifecycle fold: statuses, restarts, tasks; deterministic, total, JSON round trips."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ares.events.model import Event
from ares.lifecycle.recovery import state_hash
from ares.lifecycle.state import (
    AgentLifecycle,
    PendingTask,
    Status,
    clear_resurrecting,
    fold,
    fold_all,
    from_events,
    mark_resurrecting,
    mark_stop_requested,
)
from tests.unit.runtime.streams import EPOCH0, Stream


def crash_loop() -> Stream:
    s = Stream("agent-7")
    s.add("agent.started", {"kind": "Researcher", "config_json": '{"model":"m"}',
                            "incarnation": 0, "worker": "w1"}, at_s=0)
    s.add("task.assigned", {"task_id": "t1", "input_json": '{"q":1}'}, at_s=1)
    s.add("step.completed", {"step_name": "plan", "task_id": "t1"}, at_s=2)
    s.add("agent.dead", {"cause": "crash", "error_type": "builtins.RuntimeError"}, at_s=3)
    s.add("agent.resurrecting", {"incarnation": 1, "parent_incarnation": 0, "attempt": 1},
          at_s=3)
    s.add("agent.resurrected", {"incarnation": 1, "parent_incarnation": 0, "worker": "w2"},
          at_s=4)
    return s


def test_a_crash_and_a_resurrection() -> None:
    state = from_events(crash_loop().events)
    assert state.agent_id == "agent-7"
    assert state.kind == "Researcher"
    assert state.config == {"model": "m"}
    assert state.status is Status.RUNNING
    assert (state.incarnation, state.worker) == (1, "w2")
    assert state.restarts == (EPOCH0 + 3,)
    assert state.last_death_cause == "crash"
    assert state.started_at == EPOCH0 + 4
    assert (state.version, state.last_event_type) == (6, "agent.resurrected")
    assert state.last_event_time == EPOCH0 + 4
    assert state.current_task == PendingTask("t1", '{"q":1}')
    assert state.current_task.input == {"q": 1}
    assert state.is_live


def test_statuses_along_the_way() -> None:
    statuses = []
    state = AgentLifecycle("agent-7")
    for event in crash_loop().events:
        state = fold(state, event)
        statuses.append(state.status.value)
    assert statuses == ["running", "running", "running", "dead", "resurrecting", "running"]


def test_resurrecting_keeps_only_the_deaths_the_guard_counted() -> None:
    s = crash_loop()
    s.add("agent.dead", {"cause": "crash"}, at_s=10)
    s.add("agent.dead", {"cause": "crash"}, at_s=11)  # a failed recovery
    assert from_events(s.events).restarts == (EPOCH0 + 3, EPOCH0 + 10, EPOCH0 + 11)
    s.add("agent.resurrecting", {"incarnation": 2, "parent_incarnation": 1, "attempt": 2},
          at_s=12)
    state = from_events(s.events)
    assert state.restarts == (EPOCH0 + 10, EPOCH0 + 11)
    assert state.started_at is None  # nothing runs: no incarnation to be healthy from


def test_quarantine_and_resume() -> None:
    s = crash_loop()
    s.add("agent.dead", {"cause": "crash"}, at_s=5)
    s.add("agent.quarantined", {"reason": "budget_exhausted", "deaths": 2}, at_s=5)
    state = from_events(s.events)
    assert (state.status, state.quarantine_reason) == (Status.QUARANTINED, "budget_exhausted")
    assert len(state.restarts) == 2
    assert not state.is_live
    s.add("agent.resumed", {"reason": "fixed the prompt"}, at_s=100)
    resumed = from_events(s.events)
    assert (resumed.status, resumed.restarts, resumed.quarantine_reason) == (
        Status.STARTING, (), None)
    s.add("agent.started", {"kind": "Researcher", "incarnation": 2, "worker": "w1"}, at_s=101)
    assert from_events(s.events).status is Status.RUNNING


def test_a_start_after_a_quarantine_is_a_resume_even_without_agent_resumed() -> None:
    s = crash_loop()
    s.add("agent.dead", {"cause": "crash"}, at_s=5)
    s.add("agent.quarantined", {"reason": "death_loop", "deaths": 2}, at_s=5)
    s.add("agent.started", {"kind": "Researcher", "incarnation": 2}, at_s=50)
    state = from_events(s.events)
    assert (state.status, state.restarts, state.quarantine_reason) == (Status.RUNNING, (), None)


def test_a_restart_after_a_stop_starts_a_new_budget() -> None:
    s = crash_loop()
    s.add("agent.stopped", {"reason": "requested"}, at_s=5)
    stopped = from_events(s.events)
    assert stopped.status is Status.STOPPED
    assert not stopped.is_live
    assert stopped.restarts  # the history stays until the next start
    s.add("agent.started", {"kind": "Researcher", "incarnation": 2}, at_s=6)
    assert from_events(s.events).restarts == ()


def test_a_start_during_a_resurrection_keeps_the_death_count() -> None:
    s = crash_loop()
    s.add("agent.dead", {"cause": "crash"}, at_s=5)
    s.add("agent.resurrecting", {"incarnation": 2, "parent_incarnation": 1, "attempt": 2},
          at_s=5)
    s.add("agent.started", {"kind": "Researcher", "incarnation": 2}, at_s=6)
    state = from_events(s.events)
    assert (state.status, state.incarnation, len(state.restarts)) == (Status.RUNNING, 2, 2)


def test_tasks_in_assignment_order_duplicates_ignored() -> None:
    s = Stream("a")
    s.add("agent.started", {"kind": "K"})
    for task_id in ("t1", "t2", "t3", "t2"):
        s.add("task.assigned", {"task_id": task_id, "input_json": f'"{task_id}"'})
    s.add("task.completed", {"task_id": "t1", "output_json": "1"})
    s.add("task.failed", {"task_id": "t2", "error_message": "boom"})
    s.add("task.assigned", {"task_id": "t1"})  # finished: a duplicate
    s.add("task.assigned", {"task_id": "t4"})
    s.add("task.completed", {"task_id": "t1"})  # a second outcome: not counted again
    state = from_events(s.events)
    assert [t.task_id for t in state.pending_tasks] == ["t3", "t4"]
    assert state.current_task is not None
    assert state.current_task.task_id == "t3"
    assert (state.tasks_assigned, state.tasks_completed, state.tasks_failed) == (4, 1, 1)
    assert state.finished_tasks == {"t1", "t2"}


def test_a_retriable_failure_may_be_assigned_again() -> None:
    s = Stream("a")
    s.add("task.assigned", {"task_id": "t1"})
    s.add("task.failed", {"task_id": "t1", "retriable": True})
    s.add("task.assigned", {"task_id": "t1"})
    state = from_events(s.events)
    assert [t.task_id for t in state.pending_tasks] == ["t1"]
    assert (state.tasks_assigned, state.tasks_failed) == (2, 1)


def test_snapshot_taken_is_remembered() -> None:
    s = crash_loop()
    s.add("snapshot.taken", {"snapshot_version": 6, "snapshot_hash": s.head.hash})
    assert from_events(s.events).snapshot_version == 6


def test_unknown_types_only_advance_the_version() -> None:
    s = crash_loop()
    before = from_events(s.events)
    s.add("user.note", {"text": "hello"}, at_s=9)
    after = from_events(s.events)
    assert replace(after, version=before.version, last_event_time=before.last_event_time,
                   last_event_type=before.last_event_type) == before
    assert (after.version, after.last_event_type) == (7, "user.note")


def _raw(version: int, type_: str, payload: object) -> Event:
    base = crash_loop().events[0]
    return replace(base, version=version, type=type_, payload=payload)  # type: ignore[arg-type]


@pytest.mark.parametrize("payload", [
    {}, {"kind": 3, "incarnation": "1", "worker": 7}, {"incarnation": True}, "not a mapping",
])
def test_the_fold_is_total_malformed_fields_are_ignored(payload: object) -> None:
    start = from_events(crash_loop().events)
    for type_ in ("agent.started", "agent.dead", "agent.resurrecting", "agent.resurrected",
                  "agent.quarantined", "task.assigned", "task.completed", "task.failed",
                  "snapshot.taken", "agent.resumed", "agent.stopped"):
        state = fold(start, _raw(7, type_, payload))
        assert state.version == 7
        assert state.kind == "Researcher"
        assert state.incarnation in (0, 1)


def test_fold_all_equals_event_by_event_folding_and_is_deterministic() -> None:
    events = crash_loop().events
    one_by_one = AgentLifecycle("agent-7")
    for event in events:
        one_by_one = fold(one_by_one, event)
    assert fold_all(AgentLifecycle("agent-7"), events) == one_by_one == from_events(events)
    assert state_hash(from_events(events).to_json()) == state_hash(one_by_one.to_json())


def test_fold_does_not_touch_the_state_it_was_given() -> None:
    events = crash_loop().events
    state = from_events(events[:2])
    snapshot = state.to_json()
    fold_all(state, events[2:])
    assert state.to_json() == snapshot


def test_from_events_needs_an_id_for_an_empty_stream() -> None:
    assert from_events([], "x") == AgentLifecycle("x")
    with pytest.raises(ValueError, match="agent_id"):
        from_events([])


def test_in_process_flags_are_transitions_and_stay_out_of_json() -> None:
    state = from_events(crash_loop().events)
    stopping = mark_stop_requested(state)
    assert stopping.stop_requested
    assert not state.stop_requested
    flying = mark_resurrecting(state)
    assert flying.resurrecting
    assert not clear_resurrecting(flying).resurrecting
    assert stopping.to_json() == flying.to_json() == state.to_json()


def test_json_round_trip() -> None:
    s = crash_loop()
    s.add("task.assigned", {"task_id": "t2"})
    s.add("task.completed", {"task_id": "t1"})
    state = from_events(s.events)
    assert AgentLifecycle.from_json(state.to_json()) == state


@pytest.mark.parametrize("damage", [
    {"status": "zombie"}, {"version": "7"}, {"restarts": "x"}, {"pending_tasks": [["t"]]},
    {"incarnation": True}, {"worker": 3},
])
def test_from_json_refuses_malformed_state(damage: dict[str, object]) -> None:
    data = {**from_events(crash_loop().events).to_json(), **damage}
    with pytest.raises(ValueError, match="not a lifecycle state"):
        AgentLifecycle.from_json(data)


def test_from_json_refuses_a_missing_field() -> None:
    data = from_events(crash_loop().events).to_json()
    del data["kind"]
    with pytest.raises(ValueError, match="kind"):
        AgentLifecycle.from_json(data)
