"""The one fold of an agent's lifecycle: what each event means (``transitions.read``), the
state it leads to (``state.Folder``), and the readers that consume both agreeing with it."""

from __future__ import annotations

from dataclasses import astuple, replace
from typing import Any

import pytest

from ares.compactor.summariser import summarise_events
from ares.demo.fleet import AgentProgress, FleetState
from ares.events.model import Event
from ares.lifecycle import events as ev
from ares.lifecycle import state as lc
from ares.lifecycle import transitions as tr
from ares.replay_reader.projection import Located, project
from ares.views.agents import agent_view
from ares.views.tally import AgentTally
from tests.unit.runtime.streams import Stream

READS = [
    (ev.AGENT_STARTED, {"kind": "k", "config_json": "{}", "incarnation": 1, "worker": "w"},
     tr.Started("k", "{}", 1, "w"), lc.Status.RUNNING),
    (ev.AGENT_STOPPED, {"reason": "bye"}, tr.Stopped("bye"), lc.Status.STOPPED),
    (ev.AGENT_DEAD, {"cause": "crashed", "incarnation": 2, "error_type": "E",
                     "last_event_type": "llm.call", "last_version": 7},
     tr.Died("crashed", 2, "E", None, None, "llm.call", 7), lc.Status.DEAD),
    (ev.AGENT_RESURRECTING, {"attempt": 2}, tr.Resurrecting(2), lc.Status.RESURRECTING),
    (ev.AGENT_RESURRECTED, {"incarnation": 3, "worker": "w2"}, tr.Resurrected(3, "w2"),
     lc.Status.RUNNING),
    (ev.AGENT_QUARANTINED, {"reason": "budget", "deaths": 5}, tr.Quarantined("budget", 5),
     lc.Status.QUARANTINED),
    (ev.AGENT_RESUMED, {"reason": "fixed"}, tr.Resumed("fixed"), lc.Status.STARTING),
    (ev.AGENT_HANDED_OFF, {}, tr.HandedOff(), None),
    (ev.TASK_ASSIGNED, {"task_id": "t1", "input_json": "1"}, tr.TaskAssigned("t1", "1"),
     None),
    (ev.TASK_COMPLETED, {"task_id": "t1"}, tr.TaskCompleted("t1"), None),
    (ev.TASK_FAILED, {"task_id": "t1", "retriable": True}, tr.TaskFailed("t1", True), None),
    (ev.SNAPSHOT_TAKEN, {"snapshot_version": 4}, tr.SnapshotTaken(4), None),
]


def _one(event_type: str, payload: dict[str, Any]) -> Event:
    """An unsealed event (the reads are checked on payloads the schema would refuse)."""
    return replace(Stream("a-1").add("note", {}), type=event_type, payload=payload)


@pytest.mark.parametrize(("event_type", "payload", "expected", "status"), READS)
def test_each_lifecycle_event_reads_as_one_transition_and_the_status_it_leads_to(
        event_type: str, payload: dict[str, Any], expected: tr.Transition,
        status: lc.Status | None) -> None:
    event = _one(event_type, payload)
    assert tr.read(event) == expected
    assert expected.status is status
    after, reported = lc.step(lc.AgentLifecycle("a-1"), event)
    assert reported == expected
    assert after.status is (status or lc.Status.STARTING)  # no status: unchanged


def test_every_lifecycle_type_has_a_transition_and_other_events_have_none() -> None:
    lifecycle_types = {*ev.LIFECYCLE_TYPES, *ev.TASK_TYPES, ev.AGENT_HANDED_OFF,
                       ev.SNAPSHOT_TAKEN}
    assert {t for t, *_ in READS} == lifecycle_types
    assert tr.read(_one("llm.call", {"prompt_tokens": 1})) is None
    assert lc.step(lc.AgentLifecycle("a-1"), _one("note", {}))[1] is None


def test_malformed_fields_read_as_none_field_by_field() -> None:
    event = _one(ev.AGENT_STARTED, {"kind": 3, "incarnation": True, "worker": "w"})
    assert tr.read(event) == tr.Started(None, None, None, "w")
    assert tr.read(_one(ev.TASK_FAILED, {"task_id": "t", "retriable": "yes"})) == \
        tr.TaskFailed("t", False)


def test_a_fresh_start_is_a_first_start_or_one_after_a_stop_quarantine_or_resume() -> None:
    assert [s for s in (None, *lc.Status) if tr.starts_afresh(s)] == [
        None, lc.Status.STARTING, lc.Status.STOPPED, lc.Status.QUARANTINED]


def life_stream() -> Stream:
    s = Stream("a-1")
    s.add(ev.AGENT_STARTED, {"kind": "example.pipeline", "config_json": "{}",
                             "incarnation": 1, "worker": "w1"})
    s.add(ev.TASK_ASSIGNED, {"task_id": "t1", "input_json": "{}"}, at_s=1)
    s.add("llm.call", {"task_id": "t1", "name": "n", "occurrence": 0, "model": "m",
                       "prompt_hash": "h", "output": "x", "prompt_tokens": 2,
                       "completion_tokens": 3}, at_s=2)
    s.add(ev.AGENT_DEAD, {"cause": "crashed", "incarnation": 1}, at_s=3)
    s.add(ev.AGENT_RESURRECTING, {"incarnation": 2, "parent_incarnation": 1, "attempt": 1,
                                  "backoff_ms": 10}, at_s=4)
    s.add(ev.AGENT_RESURRECTED, {"incarnation": 2, "parent_incarnation": 1, "worker": "w2",
                                 "replayed_events": 4, "recovery_ms": 5}, at_s=5)
    s.add(ev.AGENT_HANDED_OFF, {}, at_s=6)
    s.add(ev.TASK_COMPLETED, {"task_id": "t1"}, at_s=7)
    s.add(ev.AGENT_DEAD, {"cause": "crashed", "incarnation": 2}, at_s=8)
    return s


def test_the_folder_reports_each_transition_it_applies_and_folds_like_fold_all() -> None:
    events = life_stream().events
    folder = lc.Folder(lc.AgentLifecycle("a-1"))
    kinds = [type(t).__name__ if (t := folder.step(e)) else None for e in events]
    assert kinds == ["Started", "TaskAssigned", None, "Died", "Resurrecting", "Resurrected",
                     "HandedOff", "TaskCompleted", "Died"]
    assert folder.freeze() == lc.fold_all(lc.AgentLifecycle("a-1"), events)


def test_every_reader_of_the_life_agrees_with_the_one_fold() -> None:
    events = life_stream().events
    life = lc.from_events(events)
    assert (life.status, life.incarnation, life.worker) == (lc.Status.DEAD, 2, "w2")
    tally = AgentTally(lc.AgentLifecycle("a-1")).fold(events)
    assert (tally.lifecycle, tally.deaths, tally.resurrections) == (life, 2, 1)
    row = project([Located(0, i, e) for i, e in enumerate(events)], {}).agents["a-1"]
    assert isinstance(row, AgentTally)  # the projection stores the shared read model
    assert astuple(row) == astuple(tally)
    view = agent_view(events)
    assert (view.status, view.deaths, view.restarts, view.incarnation) == (
        life.status.value, tally.deaths, tally.resurrections, life.incarnation)
    facts = summarise_events("a-1", events).facts
    assert (facts.deaths, facts.resurrections, facts.outcome) == (2, 1, "dead")
    fleet = FleetState({"a-1": AgentProgress("a-1")})
    for event in events:
        fleet.observe(event)
    progress = fleet.agents["a-1"]
    assert (progress.status, progress.incarnation, progress.worker) == ("dead", 2, "w2")


def test_step_and_fold_of_the_tally_are_the_same() -> None:
    events = life_stream().events
    tally = AgentTally(lc.AgentLifecycle("a-1"))
    for event in events:
        tally, _ = tally.step(event)
    assert tally == AgentTally(lc.AgentLifecycle("a-1")).fold(events)
