"""Genealogy: incarnations derived from a stream's lifecycle events, and their JSON."""

from __future__ import annotations

import json

from ares.lifecycle.genealogy import DEAD, REPLACED, STOPPED, genealogy, genealogy_json
from ares.lifecycle.recovery import RecoveryRecord
from tests.unit.runtime.streams import Stream, at


def realistic() -> Stream:
    """Start, work, crash, resurrection from a snapshot, crash again, quarantine."""
    s = Stream("researcher-1")
    s.add("agent.started", {"kind": "Researcher", "incarnation": 0, "worker": "w1"}, at_s=0)
    s.add("task.assigned", {"task_id": "t1", "input_json": '"q"'}, at_s=1)
    s.add("llm.call", {"name": "plan", "model": "m", "prompt_hash": "p", "output": "o",
                       "task_id": "t1"}, at_s=2)
    s.add("snapshot.taken", {"snapshot_version": 3, "snapshot_hash": s.head.hash}, at_s=2)
    s.add("agent.dead", {"cause": "crash", "error_type": "builtins.TimeoutError",
                         "error_message": "search timed out", "incarnation": 0}, at_s=10)
    s.add("agent.resurrecting", {"incarnation": 1, "parent_incarnation": 0, "attempt": 1,
                                 "backoff_ms": 0, "cause": "crash"}, at_s=10)
    record = RecoveryRecord("researcher-1", snapshot_version=3, snapshot_offset=41,
                            events_replayed=3, load_s=0.004, replay_s=0.010, resume_s=0.001,
                            verified=True, resulting_version=6, state_hash="a" * 64)
    s.add("agent.resurrected", record.to_payload(incarnation=1, parent_incarnation=0,
                                                 worker="w2"),
          at_s=10.5, metadata=record.to_metadata())
    s.add("step.completed", {"step_name": "search", "task_id": "t1"}, at_s=11)
    s.add("agent.dead", {"cause": "crash", "incarnation": 1}, at_s=12)
    s.add("agent.quarantined", {"reason": "budget_exhausted", "deaths": 2}, at_s=12)
    return s


def test_two_incarnations_a_death_a_resurrection_a_quarantine() -> None:
    first, second = genealogy(realistic().events)
    assert (first.number, first.parent, first.worker) == (0, None, "w1")
    assert (first.started_at, first.ended_at, first.end) == (at(0), at(10), DEAD)
    assert first.cause_of_death == "crash (builtins.TimeoutError: search timed out)"
    assert first.recovery_record is None
    assert first.quarantined is None
    assert (first.first_version, first.last_version, first.lifetime_s) == (1, 5, 10.0)

    assert (second.number, second.parent, second.worker) == (1, 0, "w2")
    assert (second.started_at, second.ended_at, second.end) == (at(10.5), at(12), DEAD)
    assert (second.cause_of_death, second.quarantined) == ("crash", "budget_exhausted")
    assert (second.attempts, second.backoff_ms) == (1, (0,))
    rec = second.recovery_record
    assert rec is not None
    assert (rec.snapshot_version, rec.snapshot_offset, rec.events_replayed, rec.verified,
            rec.resulting_version) == (3, 41, 3, True, 6)
    assert (second.first_version, second.last_version) == (7, 9)


def test_failed_attempts_are_counted_on_the_incarnation_that_ran() -> None:
    s = Stream("a")
    s.add("agent.started", {"kind": "K"}, at_s=0)
    s.add("agent.dead", {"cause": "crash"}, at_s=1)
    s.add("agent.resurrecting", {"incarnation": 1, "parent_incarnation": 0, "attempt": 1},
          at_s=1)
    s.add("agent.dead", {"cause": "recovery_failed"}, at_s=1.2)
    s.add("agent.resurrecting", {"incarnation": 1, "parent_incarnation": 0, "attempt": 2,
                                 "backoff_ms": 740}, at_s=2)
    s.add("agent.resurrected", {"incarnation": 1, "parent_incarnation": 0}, at_s=2.5)
    first, second = genealogy(s.events)
    assert (first.end, first.cause_of_death) == (DEAD, "crash")
    assert (second.number, second.parent, second.attempts, second.backoff_ms) == (
        1, 0, 2, (0, 740))
    assert second.end is None
    assert second.ended_at is None
    assert second.lifetime_s is None
    assert second.recovery_record is not None
    assert second.recovery_record.verified is None  # not recorded by this writer


def test_stop_and_restart_and_a_start_that_replaces_a_lost_incarnation() -> None:
    s = Stream("a")
    s.add("agent.started", {"kind": "K", "incarnation": 0, "worker": "w1"}, at_s=0)
    s.add("agent.stopped", {"reason": "requested"}, at_s=5)
    s.add("agent.started", {"kind": "K", "incarnation": 1, "worker": "w1"}, at_s=6)
    s.add("agent.started", {"kind": "K", "incarnation": 2, "worker": "w3"}, at_s=9)
    first, second, third = genealogy(s.events)
    assert (first.end, first.stop_reason, first.ended_at) == (STOPPED, "requested", at(5))
    assert (second.parent, second.end, second.ended_at) == (0, REPLACED, at(9))
    assert (second.first_version, second.last_version, third.first_version) == (3, 3, 4)
    assert (first.first_version, first.last_version) == (1, 2)
    assert (third.number, third.parent, third.worker, third.end) == (2, 1, "w3", None)


def test_a_stop_during_the_backoff_abandons_the_announced_incarnation() -> None:
    s = Stream("a")
    s.add("agent.started", {"kind": "K"}, at_s=0)
    s.add("agent.dead", {"cause": "crash"}, at_s=1)
    s.add("agent.resurrecting", {"incarnation": 1, "parent_incarnation": 0}, at_s=1)
    s.add("agent.stopped", {"reason": "requested"}, at_s=2)
    s.add("agent.started", {"kind": "K", "incarnation": 1}, at_s=9)
    first, second = genealogy(s.events)
    assert (first.end, first.stop_reason) == (DEAD, None)
    assert (second.number, second.parent, second.attempts) == (1, 0, 1)


def test_no_lifecycle_events_no_incarnations() -> None:
    s = Stream("a")
    s.add("user.note", {"x": 1})
    assert genealogy(s.events) == []


def test_json_rendering() -> None:
    doc = genealogy_json("researcher-1", genealogy(realistic().events))
    text = json.dumps(doc, sort_keys=True)
    back = json.loads(text)
    assert back["agent_id"] == "researcher-1"
    first, second = back["incarnations"]
    assert first == {
        "incarnation": 0, "parent": None, "started_at": at(0).isoformat(),
        "ended_at": at(10).isoformat(), "lifetime_s": 10.0, "end": "dead",
        "cause_of_death": "crash (builtins.TimeoutError: search timed out)",
        "stop_reason": None, "quarantined": None, "worker": "w1", "attempts": 1,
        "backoff_ms": [], "recovery": None, "first_version": 1, "last_version": 5,
    }
    assert second["recovery"] == {
        "snapshot_version": 3, "snapshot_offset": 41, "snapshot_discarded": None,
        "events_replayed": 3, "load_ms": 4.0, "replay_ms": 10.0, "resume_ms": 1.0,
        "recovery_ms": 15.0, "verified": True, "checks": None, "resulting_version": 6,
        "state_hash": "a" * 64,
    }
    assert second["quarantined"] == "budget_exhausted"
