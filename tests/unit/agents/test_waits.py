"""Durable waits in the SDK (``ares.agents.waits``), in-process: a wait ends the run and
holds nothing, a signal or a deadline lets the re-run go on, and every branch is recorded so
that a re-run (after a crash, on another worker) takes the same one without waiting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import ares
from ares.agents import LocalRuntime, OutcomeStatus
from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.host_api import AgentServices
from ares.lifecycle.state import AgentLifecycle
from ares.views.agents import agent_view
from tests.unit.agents.support import Counter, FakeClock


class Approver(Agent):
    """Waits for a decision, then acts on it; counts what really ran."""

    kind = "test.approver"
    before = Counter("prepared")
    after = Counter("done")

    async def handle(self, task: Task, ctx: Context) -> Any:
        await ctx.step("prepare", self.before)
        try:
            decision = await ctx.wait_for("decision", timeout=timedelta(hours=1))
        except ares.WaitTimeout:
            return {"decision": "timed out"}
        await ctx.step("act", self.after)
        return {"decision": decision}


def runtime(kind: type[Agent], clock: FakeClock) -> LocalRuntime:
    kind.before = Counter("prepared")  # type: ignore[attr-defined]
    kind.after = Counter("done")  # type: ignore[attr-defined]
    return LocalRuntime(kind, "waiter-1", services=AgentServices(clock=clock))


async def types_of(rt: LocalRuntime) -> list[str]:
    return [e.type for e in await rt.events()]


async def test_a_wait_ends_the_run_and_the_signal_resumes_it() -> None:
    clock = FakeClock()
    rt = runtime(Approver, clock)
    first = await rt.submit({}, task_id="t1")
    assert first.status is OutcomeStatus.WAITING
    [waiting] = first.waiting
    assert (waiting.kind, waiting.names, waiting.deadline) == ("signal", ("decision",),
                                                               clock.now + 3600)
    assert rt.lifecycle.waiting is not None
    assert rt.lifecycle.waiting.names == ("decision",)
    assert await rt.signal("decision", {"ok": True}, signal_id="s-1") is True
    [done] = await rt.run_open_tasks()
    assert done.status is OutcomeStatus.COMPLETED
    assert done.output == {"decision": {"ok": True}}
    assert Approver.before.calls == 1  # replayed, not run again
    assert Approver.after.calls == 1
    assert rt.lifecycle.waiting is None
    assert rt.lifecycle.signals == ()
    assert rt.lifecycle.consumed_signals == frozenset({"s-1"})
    assert await types_of(rt) == [
        "agent.started", "task.assigned", "step.completed", "wait.started",  # first run
        "signal.received",  # while no handler ran
        "task.resumed", "wait.completed", "step.completed", "task.completed",  # the re-run
    ]


async def test_a_signal_that_came_first_is_kept_for_the_first_wait() -> None:
    clock = FakeClock()
    rt = runtime(Approver, clock)
    await rt.start()
    await rt.signal("decision", "early", signal_id="s-early")
    outcome = await rt.submit({}, task_id="t1")
    assert outcome.status is OutcomeStatus.COMPLETED
    assert outcome.output == {"decision": "early"}


async def test_a_redelivered_signal_is_applied_once() -> None:
    clock = FakeClock()
    rt = runtime(Approver, clock)
    await rt.start()
    assert await rt.signal("decision", 1, signal_id="same") is True
    assert await rt.signal("decision", 2, signal_id="same") is False
    assert [g.payload for g in rt.lifecycle.signals] == [1]
    await rt.submit({}, task_id="t1")
    assert await rt.signal("decision", 3, signal_id="same") is False  # consumed: still once
    assert (await types_of(rt)).count("signal.received") == 1


async def test_the_timeout_is_recorded_and_replayed() -> None:
    clock = FakeClock()
    rt = runtime(Approver, clock)
    assert (await rt.submit({}, task_id="t1")).status is OutcomeStatus.WAITING
    clock.now += 3599
    [still] = await rt.run_open_tasks()
    assert still.status is OutcomeStatus.WAITING  # one second early: waits on
    clock.now += 1
    [timed_out] = await rt.run_open_tasks()
    assert timed_out.output == {"decision": "timed out"}
    completed = [e for e in await rt.events() if e.type == "wait.completed"]
    assert [e.payload["outcome"] for e in completed] == ["timeout"]
    # A signal after the timeout does not change the recorded branch: it waits for the next.
    await rt.signal("decision", "late", signal_id="late")
    assert [g.signal_id for g in rt.lifecycle.signals] == ["late"]


async def test_the_deadline_is_fixed_once_even_across_resurrections() -> None:
    clock = FakeClock()
    rt = runtime(Approver, clock)
    first = await rt.submit({}, task_id="t1")
    deadline = first.waiting[0].deadline
    clock.now += 1800
    await rt.resurrect()
    [again] = await rt.run_open_tasks()
    assert again.waiting[0].deadline == deadline
    assert (await types_of(rt)).count("wait.started") == 1


class Sleeper(Agent):
    kind = "test.durable_sleeper"
    before = Counter()
    after = Counter()

    async def handle(self, task: Task, ctx: Context) -> Any:
        await ctx.step("before", self.before)
        await ctx.sleep(timedelta(seconds=20))
        await ctx.sleep_until(datetime.fromtimestamp(task.input["until"], UTC), name="until")
        await ctx.step("after", self.after)
        return "woke"


async def test_sleep_and_sleep_until_wake_at_their_recorded_times() -> None:
    clock = FakeClock()
    rt = runtime(Sleeper, clock)
    start = clock.now
    first = await rt.submit({"until": start + 60}, task_id="t1")
    assert first.status is OutcomeStatus.WAITING
    assert first.waiting[0].deadline == start + 20
    assert first.waiting[0].names == ()
    clock.now = start + 20
    [second] = await rt.run_open_tasks()
    assert second.waiting[0].deadline == start + 60
    clock.now = start + 61
    [done] = await rt.run_open_tasks()
    assert done.output == "woke"
    assert (Sleeper.before.calls, Sleeper.after.calls) == (1, 1)
    outcomes = [e.payload["outcome"] for e in await rt.events() if e.type == "wait.completed"]
    assert outcomes == ["elapsed", "elapsed"]


class Refunder(Agent):
    kind = "test.refunder"
    refunds: list[float] = []  # noqa: RUF012 - counts real calls across instances

    async def handle(self, task: Task, ctx: Context) -> Any:
        def refund(amount: float) -> dict[str, float]:
            self.refunds.append(amount)
            return {"refunded": amount}

        try:
            return await ctx.tool("refund", refund, task.input["amount"], approval=True)
        except ares.Rejected as rejected:
            return {"rejected": rejected.payload}


@pytest.mark.parametrize(("signal", "expected", "calls"), [
    ("approved", {"refunded": 42.0}, [42.0]),
    ("rejected", {"rejected": {"why": "fraud"}}, []),
])
async def test_a_tool_that_needs_approval_runs_only_once_approved(
        signal: str, expected: Any, calls: list[float]) -> None:
    Refunder.refunds = []
    rt = LocalRuntime(Refunder, "refunder-1", services=AgentServices(clock=FakeClock()))
    waiting = await rt.submit({"amount": 42.0}, task_id="t1")
    assert waiting.status is OutcomeStatus.WAITING
    [wait] = waiting.waiting
    assert wait.kind == "approval"
    assert wait.names == ("approved", "rejected")
    assert wait.details["tool"] == "refund"
    assert wait.details["args_json"] == '{"args":[42.0],"kwargs":{}}'
    assert Refunder.refunds == []  # nothing runs before the decision
    [alert] = rt.sink.alerts  # with the recorded request, in its append
    assert (alert.kind, alert.details["tool"]) == ("approval.requested", "refund")
    assert alert.details["args_json"] == wait.details["args_json"]
    await rt.resurrect()  # a re-run while it waits announces nothing again
    assert [o.status for o in await rt.run_open_tasks()] == [OutcomeStatus.WAITING]
    assert len(rt.sink.alerts) == 1
    await rt.signal(signal, {"why": "fraud"} if signal == "rejected" else None)
    [done] = await rt.run_open_tasks()
    assert done.output == expected
    assert Refunder.refunds == calls
    await rt.resurrect()  # a re-run after the fact decides the same, calls nothing more
    assert [o.status for o in await rt.run_open_tasks()] == []
    assert Refunder.refunds == calls
    assert len(rt.sink.alerts) == 1


async def test_a_negative_duration_is_refused() -> None:
    async def handler(task: Task, ctx: Context) -> None:
        await ctx.sleep(-1)

    class Bad(Agent):
        kind = "test.bad_sleep"

        async def handle(self, task: Task, ctx: Context) -> Any:
            return await handler(task, ctx)

    rt = LocalRuntime(Bad, "bad-1", services=AgentServices(clock=FakeClock()))
    with pytest.raises(ValueError, match="must not be negative"):
        await rt.submit({}, task_id="t1")


async def test_the_views_and_the_snapshot_carry_the_wait() -> None:
    clock = FakeClock()
    rt = runtime(Approver, clock)
    await rt.start()
    await rt.signal("unrelated", "x", signal_id="u-1")
    await rt.submit({}, task_id="t1")
    view = agent_view(await rt.events())
    assert view.task_state == "suspended"
    doc = view.to_json()["waiting_for"]
    assert doc == {"task_id": "t1", "kind": "signal", "names": ["decision"],
                   "deadline": datetime.fromtimestamp(clock.now + 3600, UTC).isoformat(),
                   "since": doc["since"]}
    # Recovery from a snapshot keeps the wait and the signal nobody consumed yet.
    restored = AgentLifecycle.from_json(json.loads(json.dumps(rt.lifecycle.to_json())))
    assert restored == rt.lifecycle
    assert [g.signal_id for g in restored.signals] == ["u-1"]
    assert restored.waiting is not None
    # A snapshot written before durable waits (no such keys) reads as waiting for nothing.
    old = {k: v for k, v in rt.lifecycle.to_json().items()
           if k not in ("signals", "consumed_signals", "waiting")}
    assert AgentLifecycle.from_json(old).waiting is None
