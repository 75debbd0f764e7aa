"""The chaos invariants on hand-made logs: each promise, kept and broken."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ares.chaos.invariants import check
from ares.chaos.load import AckedAppend, Acks
from ares.events.memory import MemoryEventStore
from ares.events.model import Event, NewEvent

AGENT = "chaos-agent-01"
PROBE = "chaos-probe-1"


def _e(event_type: str, **payload: Any) -> NewEvent:
    return NewEvent(event_type, "chaos-test", payload)


def _agent_events(*extra: NewEvent, task: str = "task-0001") -> list[NewEvent]:
    return [
        _e("agent.started", kind="example.pipeline", incarnation=1, worker="w1"),
        _e("task.assigned", task_id=task, input_json="{}"),
        _e("llm.call", name="step-0", model="m", prompt_hash="h", output="o",
           prompt_tokens=1, completion_tokens=1, occurrence=0, task_id=task),
        *extra,
    ]


async def _log(**streams: list[NewEvent]) -> dict[str, list[Event]]:
    store = MemoryEventStore()
    for stream_id, events in streams.items():
        await store.append(stream_id.replace("_", "-"), events)
    return {s.replace("_", "-"): await store.read(s.replace("_", "-")) for s in streams}


def _acks(appends: list[AckedAppend] | None = None) -> Acks:
    return Acks(agents=[AGENT], tasks={AGENT: ["task-0001"]}, appends=appends or [])


LLM = [{"agent_id": AGENT, "task_id": "task-0001", "step": 0, "incarnation": 1}]
MAIL = [{"agent_id": AGENT, "task_id": "task-0001", "key": "k", "incarnation": 1}]


async def test_a_clean_run_has_no_violation() -> None:
    probe = _e("chaos.probe", n=1)
    streams = await _log(chaos_agent_01=_agent_events(_e("task.completed", task_id="task-0001")),
                         chaos_probe_1=[probe])
    found = check(streams, _acks([AckedAppend(PROBE, probe.id, 1)]), LLM, MAIL)
    assert found.violations == []
    assert (found.tasks_completed, found.emails_sent) == (1, 1)


async def test_an_acknowledged_append_missing_from_the_log_is_a_violation() -> None:
    streams = await _log(chaos_agent_01=_agent_events(_e("task.completed", task_id="task-0001")))
    found = check(streams, _acks([AckedAppend(PROBE, "no-such-id", 1)]), LLM, MAIL)
    assert [v.split(":")[0] for v in found.violations] == ["acked_event_lost"]


async def test_gaps_duplicates_and_broken_chains_are_violations() -> None:
    streams = await _log(chaos_agent_01=_agent_events(_e("task.completed", task_id="task-0001")))
    events = streams[AGENT]
    gap = {AGENT: [*events[:2], *events[3:]]}
    assert any(v.startswith("versions") for v in check(gap, _acks(), LLM, MAIL).violations)
    twice = {AGENT: events, "other": [events[0]]}
    assert any(v.startswith("appended_twice")
               for v in check(twice, _acks(), LLM, MAIL).violations)
    forged = {AGENT: [events[0], replace(events[1], payload={"task_id": "forged"}),
                      *events[2:]]}
    assert any(v.startswith("chain") for v in check(forged, _acks(), LLM, MAIL).violations)


async def test_work_done_twice_is_a_violation() -> None:
    streams = await _log(chaos_agent_01=_agent_events(_e("task.completed", task_id="task-0001")))
    again = [*LLM, {**LLM[0], "incarnation": 2}]  # a later incarnation re-ran a durable step
    kinds = {v.split(":")[0] for v in check(streams, _acks(), again, MAIL + MAIL).violations}
    assert kinds == {"step_executed_twice", "email_sent_twice"}


async def test_an_unfinished_task_needs_an_in_doubt_verdict() -> None:
    streams = await _log(chaos_agent_01=_agent_events())
    assert [v.split(":")[0] for v in check(streams, _acks(), LLM, []).violations] == [
        "task_not_finished"]
    doubted = await _log(chaos_agent_01=_agent_events(
        _e("tool.call.intent", call_id="c1", tool="send_email", effect="at_most_once",
           occurrence=0, task_id="task-0001"),
        _e("tool.in_doubt", call_id="c1", tool="send_email", reason="no outcome")))
    found = check(doubted, _acks(), LLM, [])
    assert found.violations == []
    assert found.tasks_in_doubt == 1


async def test_a_dead_agent_needs_a_verdict() -> None:
    dead = _e("agent.dead", cause="worker_lost", incarnation=1)
    streams = await _log(chaos_agent_01=_agent_events(
        _e("task.completed", task_id="task-0001"), dead))
    assert [v.split(":")[0] for v in check(streams, _acks(), LLM, MAIL).violations] == [
        "dead_without_verdict"]
    quarantined = await _log(chaos_agent_01=_agent_events(
        dead, _e("agent.quarantined", reason="budget", deaths=5)))
    found = check(quarantined, _acks(), LLM, [])
    assert found.violations == []  # the verdict: quarantined, its task waits for an operator
    assert found.quarantined == [AGENT]
    assert found.quarantine_reasons == {AGENT: "budget"}
    assert (found.tasks_completed, found.tasks_awaiting_operator) == (0, 1)


async def test_a_completed_task_without_its_email_and_lost_acks_are_violations() -> None:
    streams = await _log(chaos_agent_01=_agent_events(_e("task.completed", task_id="task-0001")))
    acks = Acks(agents=[AGENT, "chaos-agent-02"], tasks={AGENT: ["task-0001", "task-0002"]})
    kinds = sorted(v.split(":")[0] for v in check(streams, acks, LLM, []).violations)
    assert kinds == ["acked_task_lost", "agent_lost", "email_missing"]


async def test_audit_findings_are_violations() -> None:
    found = check({}, Acks(), [], [], audit_failures=["FAIL stream x: gap at 3"])
    assert found.violations == ["audit: FAIL stream x: gap at 3"]


async def test_a_task_completed_twice_is_a_violation() -> None:
    done = _e("task.completed", task_id="task-0001")
    again = _e("task.completed", task_id="task-0001")
    streams = await _log(chaos_agent_01=_agent_events(done, again))
    assert [v.split(":")[0] for v in check(streams, _acks(), LLM, MAIL).violations] == [
        "task_finished_twice"]
