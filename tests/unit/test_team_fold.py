"""The lifecycle's side of teams: what a parent's and a child's streams fold into (open
children, the parent link of a delegated task, outcomes owed to the parent, stops owed to
children), all from events, and kept by snapshots."""

from __future__ import annotations

from ares.lifecycle import events as ev
from ares.lifecycle import state as lc
from ares.lifecycle import transitions as tr
from ares.runtime_manager import delegations
from tests.unit.runtime.streams import Stream

DISPATCH = {"task_id": "t1", "name": "r", "occurrence": 0, "child_id": "lead.r-0",
            "child_kind": "k", "child_task_id": "lead/t1/0", "input_json": "{}",
            "config_json": "{}", "on_parent_stop": "stop", "deadline": None,
            "signal": "child:t1/0"}


def parent_stream(policy: str = "stop") -> Stream:
    s = Stream("lead")
    s.add(ev.AGENT_STARTED, {"kind": "team", "config_json": "{}", "incarnation": 1})
    s.add(ev.TASK_ASSIGNED, {"task_id": "t1", "input_json": "{}"})
    s.add(ev.DELEGATION_DISPATCHED, {**DISPATCH, "on_parent_stop": policy})
    s.add(ev.DELEGATION_DISPATCHED, {**DISPATCH, "child_id": "lead.r-1",
                                     "child_task_id": "lead/t1/1", "signal": "child:t1/1",
                                     "on_parent_stop": "detach"})
    return s


def child_stream() -> Stream:
    s = Stream("lead.r-0")
    s.add(ev.AGENT_STARTED, {"kind": "k", "config_json": "{}", "incarnation": 1})
    s.add(ev.TASK_ASSIGNED, {"task_id": "lead/t1/0", "input_json": "{}"})
    s.add(ev.TASK_DELEGATED, {"task_id": "lead/t1/0", "parent_id": "lead",
                              "parent_task_id": "t1", "signal": "child:t1/0",
                              "on_parent_stop": "stop"})
    return s


def test_dispatches_open_children_and_their_outcomes_close_them() -> None:
    s = parent_stream()
    life = lc.from_events(s.events)
    assert [c.child_id for c in life.children] == ["lead.r-0", "lead.r-1"]
    assert life.stops_owed == ()  # running: nothing to stop
    s.add(ev.SIGNAL_RECEIVED, {"signal_id": "lead.r-0/lead/t1/0", "name": "child:t1/0",
                               "payload_json": "{}"})
    assert [c.child_id for c in lc.from_events(s.events).children] == ["lead.r-1"]


def test_a_stopped_parent_owes_a_stop_to_its_stop_policy_children_until_recorded() -> None:
    s = parent_stream()
    assert delegations.stop_summary(lc.from_events(s.events)) == (
        "stopping 1 child(ren): lead.r-0; 1 detached child(ren) left to finish: lead.r-1")
    s.add(ev.AGENT_STOPPED, {"reason": "operator"})
    life = lc.from_events(s.events)
    assert [c.child_id for c in life.stops_owed] == ["lead.r-0"]  # r-1 is detached
    command = delegations.stop_command("lead", life.stops_owed[0])
    assert (command.type, command.stream_id) == ("agent.stop", "lead.r-0")
    assert command.id == delegations.stop_command("lead", life.stops_owed[0]).id  # stable
    s.add(ev.DELEGATION_STOPPED, {"children": ["lead.r-0"], "reason": "parent stopped"})
    assert lc.from_events(s.events).stops_owed == ()


def test_a_quarantined_parent_owes_the_same_stops() -> None:
    s = parent_stream()
    s.add(ev.AGENT_QUARANTINED, {"reason": "death loop", "deaths": 5})
    assert [c.child_id for c in lc.from_events(s.events).stops_owed] == ["lead.r-0"]


def test_a_delegated_task_carries_its_parent_and_its_outcome_is_owed_once() -> None:
    s = child_stream()
    life = lc.from_events(s.events)
    assert life.parent_id == "lead"
    assert life.pending_tasks[0].parent == lc.ParentLink("lead", "t1", "child:t1/0", "stop")
    assert life.reports == ()
    s.add(ev.TASK_COMPLETED, {"task_id": "lead/t1/0", "output_json": '{"x":1}'})
    [owed] = lc.from_events(s.events).reports
    assert (owed.status, owed.output_json, owed.parent.agent_id) == ("completed", '{"x":1}',
                                                                     "lead")
    command = delegations.report_command("lead.r-0", owed)
    assert (command.type, command.stream_id) == ("agent.signal", "lead")
    assert command.payload["name"] == "child:t1/0"
    assert command.payload["signal_id"] == "lead.r-0/lead/t1/0"
    s.add(ev.DELEGATION_REPORTED, {"task_id": "lead/t1/0"})
    assert lc.from_events(s.events).reports == ()


def test_a_failed_task_and_a_quarantined_child_are_reported_with_their_cause() -> None:
    failed = child_stream()
    failed.add(ev.TASK_FAILED, {"task_id": "lead/t1/0", "error_type": "E",
                                "error_message": "no data", "retriable": False})
    [owed] = lc.from_events(failed.events).reports
    assert (owed.status, owed.error_type, owed.error) == ("failed", "E", "no data")
    quarantined = child_stream()
    quarantined.add(ev.AGENT_QUARANTINED, {"reason": "death loop", "deaths": 5})
    [owed] = lc.from_events(quarantined.events).reports
    assert owed.status == "quarantined"
    assert "death loop" in str(owed.error)


def test_an_oversized_output_is_reported_as_a_clear_failure() -> None:
    s = child_stream()
    s.add(ev.TASK_COMPLETED, {"task_id": "lead/t1/0",
                              "output_json": '"' + "x" * 70_000 + '"'})
    [owed] = lc.from_events(s.events).reports
    command = delegations.report_command("lead.r-0", owed)
    assert '"status":"failed"' in command.payload["payload_json"]
    assert "output_too_large" in command.payload["payload_json"]


def test_snapshots_keep_links_children_and_owed_reports() -> None:
    parent = parent_stream()
    child = child_stream()
    child.add(ev.TASK_COMPLETED, {"task_id": "lead/t1/0", "output_json": "1"})
    for events in (parent.events, child.events, child.events[:3]):
        life = lc.from_events(events)
        assert lc.AgentLifecycle.from_json(life.to_json()) == life


def test_delegation_events_read_as_transitions() -> None:
    s = parent_stream()
    assert tr.read(s.events[2]) == tr.DelegationDispatched(
        "t1", "lead.r-0", "k", "lead/t1/0", "child:t1/0", "stop")
    c = child_stream()
    assert tr.read(c.events[2]) == tr.TaskDelegated("lead/t1/0", "lead", "t1", "child:t1/0",
                                                    "stop")
