"""The demo's proof that a fault hit busy work, read from sealed streams: mid-task at the
death the fault caused, that death's cause, and a later incarnation finishing the task."""

from __future__ import annotations

import pytest

from ares.demo.faults import AGENT_KILL, WORKER_SIGKILL, Fault, fault_evidence
from ares.demo.report import build_report
from ares.lifecycle import events as ev
from tests.unit.runtime.streams import Stream, at

FAULT_S = 10.0
RESURRECTED = {"incarnation": 2, "parent_incarnation": 1, "worker": "w2",
               "snapshot_version": None, "replayed_events": 4, "recovery_ms": 12}
COMPLETED = {"task_id": "t1", "output_json": "{}"}


def llm_call(name: str) -> dict[str, object]:
    return {"task_id": "t1", "name": name, "occurrence": 0, "prompt_tokens": 3,
            "completion_tokens": 4, "model": "m", "prompt_hash": "h", "output": "x"}


def started(agent: str) -> Stream:
    stream = Stream(agent)
    stream.add(ev.AGENT_STARTED, {"kind": "example.pipeline", "config_json": "{}",
                                  "incarnation": 1, "worker": "w1"}, 1)
    return stream


def working(agent: str, steps: int) -> Stream:
    """Started, task t1 assigned, ``steps`` of it recorded, all before the fault."""
    stream = started(agent)
    stream.add(ev.TASK_ASSIGNED, {"task_id": "t1", "input_json": "{}"}, 2)
    for n in range(1, steps + 1):
        stream.add("llm.call", llm_call(f"step-{n}"), 2 + n)
    return stream


def killed_and_resumed(stream: Stream, cause: str = "killed", steps_after: int = 1) -> None:
    stream.add(ev.AGENT_DEAD, {"cause": cause, "incarnation": 1}, FAULT_S + 0.1)
    stream.add(ev.AGENT_RESURRECTED, RESURRECTED, FAULT_S + 0.2)
    for n in range(steps_after):
        stream.add("llm.call", llm_call(f"late-{n}"), FAULT_S + 1 + n)
    stream.add(ev.TASK_COMPLETED, COMPLETED, FAULT_S + 5)


def kill(*victims: str, refused: str | None = None) -> Fault:
    return Fault(AGENT_KILL, "agent killed", at(FAULT_S), "killed", victims, refused)


def test_a_kill_mid_task_that_a_later_incarnation_recovered_is_a_hit() -> None:
    stream = working("a", steps=2)
    killed_and_resumed(stream)
    proof = fault_evidence(kill("a"), {"a": stream.events})
    assert proof.missed is None
    [victim] = proof.victims
    assert (victim.task_id, victim.steps_before, victim.steps_total) == ("t1", 2, 3)
    assert (victim.dead_version, victim.dead_cause) == (5, "killed")
    assert (victim.finished_by, victim.completed_version) == (2, 8)
    assert "a mid-task (step 2 of 3 recorded), agent.dead v5, incarnation 2" in proof.line


def test_a_kill_that_landed_after_the_task_finished_missed() -> None:
    stream = working("a", steps=2)
    stream.add(ev.TASK_COMPLETED, COMPLETED, FAULT_S + 0.05)  # before the kill
    stream.add(ev.AGENT_DEAD, {"cause": "killed", "incarnation": 1}, FAULT_S + 0.1)
    stream.add(ev.AGENT_RESURRECTED, RESURRECTED, FAULT_S + 0.2)
    proof = fault_evidence(kill("a"), {"a": stream.events})
    assert proof.victims[0].mid_task is False
    assert proof.missed == "a was idle at its agent.dead v6"
    assert proof.line.endswith("MISSED: a was idle at its agent.dead v6")


@pytest.mark.parametrize(("tail", "missed"), [
    ("nothing", "no agent.dead of a after the fault"),
    ("other cause", "a's agent.dead v5 has cause worker_lost, not killed"),
    ("no recovery", "no later incarnation of a finished task t1"),
])
def test_a_fault_without_its_death_or_recovery_missed(tail: str, missed: str) -> None:
    stream = working("a", steps=2)
    if tail == "other cause":
        killed_and_resumed(stream, cause="worker_lost")
    elif tail == "no recovery":
        stream.add(ev.AGENT_DEAD, {"cause": "killed", "incarnation": 1}, FAULT_S + 0.1)
    assert fault_evidence(kill("a"), {"a": stream.events}).missed == missed


def test_a_refused_kill_missed_whatever_the_log_says() -> None:
    stream = working("a", steps=1)
    killed_and_resumed(stream)
    proof = fault_evidence(kill("a", refused="agent.kill for 'a' refused: no agent a"),
                           {"a": stream.events})
    assert proof.missed == "the kill was refused: agent.kill for 'a' refused: no agent a"


def test_a_death_before_the_fault_is_not_the_faults() -> None:
    stream = working("a", steps=1)
    stream.add(ev.AGENT_DEAD, {"cause": "killed", "incarnation": 1}, FAULT_S - 1)
    stream.add(ev.AGENT_RESURRECTED, RESURRECTED, FAULT_S - 0.5)
    stream.add(ev.TASK_COMPLETED, COMPLETED, FAULT_S - 0.2)
    assert fault_evidence(kill("a"), {"a": stream.events}).missed == (
        "no agent.dead of a after the fault")


def test_a_worker_kill_is_proven_by_its_named_victim_and_counts_the_others() -> None:
    named, busy, idle = working("lead", 1), working("b", 3), started("c")
    killed_and_resumed(named, cause="worker_lost")
    killed_and_resumed(busy, cause="worker_lost")
    idle.add(ev.AGENT_DEAD, {"cause": "worker_lost", "incarnation": 1}, FAULT_S + 0.1)
    fault = Fault(WORKER_SIGKILL, "SIGKILL w1", at(FAULT_S), "worker_lost",
                  ("lead", "b", "c"))
    proof = fault_evidence(fault, {s.stream_id: s.events for s in (named, busy, idle)})
    assert proof.missed is None
    assert [v.hit for v in proof.victims] == [True, True, False]
    assert proof.line.endswith("1 of 2 more victims killed mid-task and finished by a "
                               "later incarnation")


def test_the_report_breaks_a_promise_for_each_fault_that_missed() -> None:
    hit, idle = working("a", 1), working("b", 1)
    killed_and_resumed(hit)
    idle.add(ev.TASK_COMPLETED, COMPLETED, FAULT_S - 1)
    streams = {"a": hit.events, "b": idle.events}
    report = build_report(streams, [], [], emails_expected=0, fault_times={},
                          faults=[kill("a"), kill("b")])
    assert [f["hit"] for f in report.to_json()["fault_evidence"]] == [True, False]
    assert report.broken_promises == [
        "a fault missed busy work (agent killed): no agent.dead of b after the fault"]
    assert report.faults == [f.line for f in report.fault_evidence]


def test_a_fault_with_no_busy_agent_to_hit_claims_nothing_and_breaks_nothing() -> None:
    skipped = Fault(AGENT_KILL, "no busy pipeline agent found: none killed", at(FAULT_S),
                    "killed", (), injected=False)
    report = build_report({}, [], [], emails_expected=0, fault_times={}, faults=[skipped])
    [proof] = report.fault_evidence
    assert (proof.hit, proof.missed, proof.line) == (False, None, skipped.text)
    assert report.to_json()["fault_evidence"][0]["injected"] is False
    assert report.broken_promises == []


def test_a_worker_kill_that_hit_no_busy_agent_missed() -> None:
    fault = Fault(WORKER_SIGKILL, "SIGKILL w1", at(FAULT_S), "worker_lost", ())
    assert fault_evidence(fault, {}).missed == "no busy agent was hit"


def test_an_agent_unseen_on_the_killed_worker_is_timed_from_the_kill() -> None:
    """A sub-agent dispatched just before the SIGKILL: the demo had not seen its worker,
    so it has no fault time of its own; its worker_lost resurrection counts from the kill."""
    stream = working("child", 1)
    killed_and_resumed(stream, cause="worker_lost")
    fault = Fault(WORKER_SIGKILL, "SIGKILL w1", at(FAULT_S), "worker_lost", ("child",))
    report = build_report({"child": stream.events}, [], [], emails_expected=0,
                          fault_times={}, faults=[fault])
    [back] = report.resurrections
    assert (back.cause, back.detection_s, back.total_s) == ("worker_lost", 0.1, 0.2)
