"""Teams in the SDK (``ares.agents.delegation``), in-process: a dispatch is recorded once and
never repeated by a re-run, a child's outcome arrives as a signal and is consumed by a durable
wait, ``delegate_many`` keeps at most ``max_parallel`` children running, and failures and
timeouts surface as ``ChildFailed``. The children themselves are the runtime's (tested on
the broker in tests/integration/runtime/test_teams.py); here their outcomes are delivered by
hand, as the child's owner would."""

from __future__ import annotations

from typing import Any

import pytest

import ares
from ares.agents import LocalRuntime, OutcomeStatus
from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.delegation import Delegation, outcome_payload
from ares.agents.host_api import AgentServices
from ares.events.model import Event
from ares.events.wire.canonical import parse_json
from ares.lifecycle import events as ev
from tests.unit.agents.support import FakeClock


class Leader(Agent):
    kind = "test.leader"

    async def handle(self, task: Task, ctx: Context) -> Any:
        spec = task.input
        if spec.get("many"):
            results = await ctx.delegate_many(
                [Delegation(f"part-{i}", "test.worker", {"i": i}) for i in range(spec["many"])],
                max_parallel=spec.get("max_parallel", 2),
                return_exceptions=spec.get("return_exceptions", False))
            return [{"failed": r.cause} if isinstance(r, ares.ChildFailed) else r
                    for r in results]
        if spec.get("policy"):
            await ctx.delegate("odd", "test.worker", on_parent_stop=spec["policy"])
        child = await ctx.delegate("solo", "test.worker", {"q": 1},
                                   timeout=spec.get("timeout"))
        try:
            return {"answer": await child.result()}
        except ares.ChildFailed as failure:
            return {"fallback": failure.cause, "child": failure.child_id}


def leader(clock: FakeClock | None = None) -> LocalRuntime:
    return LocalRuntime(Leader, "lead-1", services=AgentServices(clock=clock or FakeClock()))


async def dispatches(rt: LocalRuntime) -> list[dict[str, Any]]:
    return [dict(e.payload) for e in await rt.events() if e.type == ev.DELEGATION_DISPATCHED]


async def report(rt: LocalRuntime, dispatched: dict[str, Any], status: str = "completed",
                 output: Any = None, error: str | None = None) -> None:
    """The child's owner's report, as the runtime sends it (ares.runtime_manager.delegations)."""
    from ares.events.wire.canonical import canonical_json

    payload = outcome_payload(dispatched["child_id"], dispatched["child_task_id"], status,
                              canonical_json(output), None if error is None else "Boom",
                              error)
    assert await rt.signal(dispatched["signal"], parse_json(payload),
                           signal_id=f"{dispatched['child_id']}/{dispatched['child_task_id']}")


async def test_a_dispatch_is_recorded_once_and_the_outcome_resumes_the_parent() -> None:
    rt = leader()
    first = await rt.submit({}, task_id="t1")
    assert first.status is OutcomeStatus.WAITING
    [waiting] = first.waiting
    assert waiting.kind == "child"
    [d] = await dispatches(rt)
    assert d["child_id"] == "lead-1.solo-0"
    assert d["child_task_id"] == "lead-1/t1/0"
    assert d["signal"] == "child:t1/0"
    assert waiting.names == (d["signal"],)
    assert parse_json(d["input_json"]) == {"q": 1}
    assert d["on_parent_stop"] == "stop"
    assert rt.lifecycle.children[0].child_id == "lead-1.solo-0"

    # A re-run before the outcome (a resurrection) dispatches nothing new.
    again = await rt.run_open_tasks()
    assert [o.status for o in again] == [OutcomeStatus.WAITING]
    assert len(await dispatches(rt)) == 1

    await report(rt, d, output={"found": 42})
    assert rt.lifecycle.children == ()  # its outcome came back
    [done] = await rt.run_open_tasks()
    assert done.status is OutcomeStatus.COMPLETED
    assert done.output == {"answer": {"found": 42}}
    assert len(await dispatches(rt)) == 1


async def test_a_failed_child_is_a_child_failed_the_parent_can_catch() -> None:
    rt = leader()
    await rt.submit({}, task_id="t1")
    [d] = await dispatches(rt)
    await report(rt, d, status="quarantined", error="the child agent was quarantined")
    [done] = await rt.run_open_tasks()
    assert done.output == {"fallback": "quarantined", "child": "lead-1.solo-0"}


async def test_an_uncaught_child_failure_fails_the_task_with_the_cause() -> None:
    rt = leader()
    await rt.submit({"many": 1}, task_id="t1")
    [d] = await dispatches(rt)
    await report(rt, d, status="failed", error="no data")
    [done] = await rt.run_open_tasks()
    assert done.status is OutcomeStatus.FAILED
    assert done.error_type == "ares.agents.errors.ChildFailed"
    assert "lead-1.part-0-0" in str(done.error)
    assert "no data" in str(done.error)


async def test_a_timeout_is_fixed_at_the_dispatch_and_surfaces_as_child_failed() -> None:
    clock = FakeClock()
    rt = leader(clock)
    first = await rt.submit({"timeout": 30}, task_id="t1")
    [d] = await dispatches(rt)
    assert d["deadline"] == clock.now + 30
    assert first.waiting[0].deadline == clock.now + 30
    clock.now += 31
    [done] = await rt.run_open_tasks()
    assert done.output == {"fallback": "timeout", "child": "lead-1.solo-0"}
    # Replayed from the journal: the same branch, without waiting again.
    events = await rt.events()
    completed = [e for e in events if e.type == ev.WAIT_COMPLETED]
    assert [e.payload["outcome"] for e in completed] == ["timeout"]


async def test_delegate_many_keeps_at_most_max_parallel_children_running() -> None:
    rt = leader()
    outcome = await rt.submit({"many": 5, "max_parallel": 2}, task_id="t1")
    running = await dispatches(rt)
    assert [d["name"] for d in running] == ["part-0", "part-1"]
    assert outcome.waiting[0].names == tuple(d["signal"] for d in running)
    reported: set[str] = set()
    while outcome.status is OutcomeStatus.WAITING:
        sent = await dispatches(rt)
        unsettled = [d for d in sent if d["signal"] not in reported]
        assert len(unsettled) <= 2
        # finish the newest first: outcomes in another order than the dispatches
        latest = unsettled[-1]
        await report(rt, latest, output=parse_json(latest["input_json"])["i"] * 10)
        reported.add(latest["signal"])
        [outcome] = await rt.run_open_tasks()
    assert outcome.status is OutcomeStatus.COMPLETED
    assert outcome.output == [0, 10, 20, 30, 40]  # in dispatch order, whatever the arrival
    sent = await dispatches(rt)
    assert [d["name"] for d in sent] == [f"part-{i}" for i in range(5)]
    assert len({d["child_id"] for d in sent}) == 5  # each dispatched exactly once


async def test_return_exceptions_puts_the_failure_in_place() -> None:
    rt = leader()
    await rt.submit({"many": 2, "max_parallel": 2, "return_exceptions": True}, task_id="t1")
    first, second = await dispatches(rt)
    await report(rt, first, status="failed", error="bad input")
    await rt.run_open_tasks()
    await report(rt, second, output="ok")
    [done] = await rt.run_open_tasks()
    assert done.output == [{"failed": "failed"}, "ok"]


async def test_a_full_replay_sends_no_dispatch_and_returns_the_same_outputs() -> None:
    rt = leader()
    await rt.submit({"many": 3, "max_parallel": 3}, task_id="t1")
    for d in await dispatches(rt):
        await report(rt, d, output=d["name"])
    [done] = await rt.run_open_tasks()
    assert done.output == ["part-0", "part-1", "part-2"]
    events: list[Event] = await rt.events()
    from ares.agents.host_api import TaskJournal, run_task
    from tests.unit.agents.support import MemorySink

    journal = TaskJournal.from_events("t1", [e for e in events if e.type != ev.TASK_COMPLETED])
    sink = MemorySink(stream_id="lead-1")
    replayed = await run_task(Leader("lead-1"), Task("t1", {"many": 3, "max_parallel": 3}),
                              journal, sink, AgentServices(clock=FakeClock()), 2)
    assert replayed.output == ["part-0", "part-1", "part-2"]
    assert ev.DELEGATION_DISPATCHED not in [t for batch in sink.batches for t in batch]


async def test_a_bad_policy_is_refused_before_anything_is_recorded() -> None:
    rt = leader()
    with pytest.raises(ValueError, match="on_parent_stop must be one of"):
        await rt.submit({"policy": "ignore"}, task_id="t1")
    assert await dispatches(rt) == []
