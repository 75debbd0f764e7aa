"""ctx.tool: effects, durable intents, in-doubt calls, reconcile and operator resolution."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from ares.agents import (
    ContextClosedError,
    Effect,
    OutcomeStatus,
    Reconciled,
    ReconcileRegistry,
    RetryPolicy,
    Task,
    ToolCallFailed,
    ToolSkipped,
)
from ares.agents.context import Context
from ares.agents.errors import TaskPaused
from ares.agents.host_api import resolution_event
from ares.errors import TransientError
from tests.unit.agents.support import FnAgent, Harness, Killed


class Mailer:
    """A non-idempotent side effect; ``die_after`` kills the process right after sending."""

    def __init__(self, die_after: bool = False) -> None:
        self.sent: list[tuple[str, str | None]] = []
        self.die_after = die_after
        self.harness: Harness | None = None
        self.intent_durable_when_called: list[bool] = []

    async def __call__(self, to: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        if self.harness is not None:
            types = await self.harness.sink.types()
            self.intent_durable_when_called.append(types[-1] == "tool.call.intent")
        self.sent.append((to, idempotency_key))
        if self.die_after:
            self.die_after = False
            raise Killed("SIGKILL between the e-mail and its outcome record")
        return {"sent": to}


def _email_handler(mailer: Mailer, **tool_kwargs: Any) -> Any:
    async def handler(task: Task, ctx: Context) -> Any:
        await ctx.step("draft", lambda: "body")
        result = await ctx.tool("send_email", mailer, "ann@example.com", **tool_kwargs)
        return {"email": result}

    return handler


async def _in_doubt(**tool_kwargs: Any) -> tuple[Harness, Mailer, Task]:
    """A task killed after its e-mail went out but before the outcome was recorded."""
    mailer = Mailer(die_after=True)
    h = Harness(FnAgent(_email_handler(mailer, **tool_kwargs)))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    assert len(mailer.sent) == 1
    return h, mailer, task


async def test_at_most_once_intent_is_durable_before_the_call() -> None:
    mailer = Mailer()
    h = Harness(FnAgent(_email_handler(mailer)))
    mailer.harness = h
    outcome = await h.run(await h.assign())
    assert outcome.output == {"email": {"sent": "ann@example.com"}}
    assert mailer.intent_durable_when_called == [True]
    [intent] = await h.sink.of_type("tool.call.intent")
    assert intent.payload["effect"] == "at_most_once"
    assert intent.payload["call_id"] == "t1:send_email:0:0"
    assert json.loads(intent.payload["args_json"]) == {"args": ["ann@example.com"],
                                                       "kwargs": {}}
    assert intent.metadata["ares.position"] == "1"
    [done] = await h.sink.of_type("tool.call.completed")
    assert done.payload["call_id"] == intent.payload["call_id"]
    assert mailer.sent == [("ann@example.com", None)]  # no reconcile: no key passed


async def test_a_kill_before_the_intent_is_durable_just_runs_the_call() -> None:
    mailer = Mailer()
    h = Harness(FnAgent(_email_handler(mailer)))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task, kill_at=2)  # the intent's append never happened
    assert mailer.sent == []
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.COMPLETED
    assert len(mailer.sent) == 1


async def test_intent_without_outcome_and_no_reconcile_pauses_in_doubt() -> None:
    h, mailer, task = await _in_doubt()
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.PAUSED_IN_DOUBT
    assert len(mailer.sent) == 1  # never re-executed blindly
    [call] = outcome.in_doubt
    assert (call.task_id, call.call_id, call.tool) == ("t1", "t1:send_email:0:0",
                                                       "send_email")
    assert "no reconcile hook" in call.reason
    [doubt] = await h.sink.of_type("tool.in_doubt")
    assert doubt.payload["call_id"] == call.call_id
    assert doubt.payload["idempotency_key"] == call.idempotency_key

    again = await h.rerun(task)  # e.g. the agent resurrected again: still paused, quietly
    assert again.status is OutcomeStatus.PAUSED_IN_DOUBT
    assert len(mailer.sent) == 1
    assert len(await h.sink.of_type("tool.in_doubt")) == 1
    assert "task.completed" not in await h.sink.types()


async def test_reconcile_done_records_the_result_without_executing() -> None:
    keys: list[str] = []

    def reconcile(key: str) -> Reconciled:
        keys.append(key)
        return Reconciled.DONE({"sent": "ann@example.com", "via": "reconcile"})

    h, mailer, task = await _in_doubt(reconcile=reconcile)
    outcome = await h.rerun(task)
    assert outcome.output == {"email": {"sent": "ann@example.com", "via": "reconcile"}}
    assert len(mailer.sent) == 1
    assert keys == [mailer.sent[0][1]]  # the key the call carried is the key reconcile gets
    completed = await h.sink.of_type("tool.call.completed")
    assert completed[0].payload["call_id"] == "t1:send_email:0:0"
    [resolved] = await h.sink.of_type("tool.call.resolved")  # the verdict stays visible
    assert resolved.payload["by"] == "reconcile"
    assert resolved.payload["as"] == "done"
    assert resolved.payload["result"] == outcome.output["email"]


async def test_reconcile_not_done_executes_under_a_new_durable_intent() -> None:
    h, mailer, task = await _in_doubt(reconcile=lambda key: Reconciled.NOT_DONE)
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.COMPLETED
    assert len(mailer.sent) == 2
    assert mailer.sent[0][1] == mailer.sent[1][1]  # same key on both attempts
    [resolved] = await h.sink.of_type("tool.call.resolved")
    assert resolved.payload["call_id"] == "t1:send_email:0:0"
    assert resolved.payload["as"] == "retry"
    assert resolved.payload["by"] == "reconcile"
    intents = await h.sink.of_type("tool.call.intent")
    assert [i.payload["call_id"] for i in intents] == ["t1:send_email:0:0",
                                                       "t1:send_email:0:1"]
    assert h.sink.batches[-3] == ["task.resumed", "tool.call.resolved", "tool.call.intent"]


@pytest.mark.parametrize("verdict", [
    lambda key: Reconciled.UNKNOWN,
    lambda key: Reconciled.unknown("mail server unreachable"),
    lambda key: 1 / 0,
    lambda key: "yes",
])
async def test_reconcile_unknown_or_broken_pauses(verdict: Any) -> None:
    h, mailer, task = await _in_doubt(reconcile=verdict)
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.PAUSED_IN_DOUBT
    assert len(mailer.sent) == 1
    assert outcome.in_doubt[0].reason


async def test_a_registry_reconcile_hook_is_used_when_the_call_has_none() -> None:
    mailer = Mailer(die_after=True)
    registry = ReconcileRegistry({"send_email": lambda key: Reconciled.DONE("from registry")})
    h = Harness(FnAgent(_email_handler(mailer)), reconcilers=registry)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    assert (await h.rerun(task)).output == {"email": "from registry"}


async def test_retry_after_not_done_that_dies_again_is_in_doubt_again() -> None:
    verdicts = iter([Reconciled.NOT_DONE, Reconciled.UNKNOWN])
    h, mailer, task = await _in_doubt(reconcile=lambda key: next(verdicts))
    mailer.die_after = True
    with pytest.raises(Killed):
        await h.rerun(task)  # NOT_DONE -> attempt 1 sent, killed again before its outcome
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.PAUSED_IN_DOUBT
    assert outcome.in_doubt[0].call_id == "t1:send_email:0:1"
    assert len(mailer.sent) == 2


async def test_operator_resolution_done() -> None:
    h, mailer, task = await _in_doubt()
    paused = await h.rerun(task)
    await h.sink.append([resolution_event(paused.in_doubt[0].call_id, "done",
                                          result={"sent": "checked by hand"}, note="ok")])
    outcome = await h.rerun(task)
    assert outcome.output == {"email": {"sent": "checked by hand"}}
    assert len(mailer.sent) == 1


async def test_operator_resolution_retry_executes_again_under_a_new_intent() -> None:
    h, mailer, task = await _in_doubt()
    paused = await h.rerun(task)
    await h.sink.append([resolution_event(paused.in_doubt[0].call_id, "retry")])
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.COMPLETED
    assert len(mailer.sent) == 2
    intents = await h.sink.of_type("tool.call.intent")
    assert len(intents) == 2


async def test_operator_resolution_skip_raises_tool_skipped() -> None:
    h, mailer, task = await _in_doubt()
    paused = await h.rerun(task)
    await h.sink.append([resolution_event(paused.in_doubt[0].call_id, "skip",
                                          note="customer called")])
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.FAILED
    assert outcome.error_type == "ares.agents.errors.ToolSkipped"
    assert "customer called" in (outcome.error or "")
    assert len(mailer.sent) == 1


async def test_a_skipped_call_can_be_handled() -> None:
    mailer = Mailer(die_after=True)

    async def handler(task: Task, ctx: Context) -> Any:
        try:
            return await ctx.tool("send_email", mailer, "ann@example.com")
        except ToolSkipped as e:
            return f"skipped {e.call_id}"

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    await h.rerun(task)
    await h.sink.append([resolution_event("t1:send_email:0:0", "skip")])
    assert (await h.rerun(task)).output == "skipped t1:send_email:0:0"


def test_resolution_event_validates() -> None:
    with pytest.raises(ValueError, match="done, retry, skip"):
        resolution_event("c", "maybe")
    event = resolution_event("c", "done", result=[1], task_id="t", tool="x")
    assert event.type == "tool.call.resolved"
    assert event.module == "operator"
    assert event.payload == {"call_id": "c", "as": "done", "result": [1], "note": None,
                             "task_id": "t", "tool": "x", "by": "operator"}


async def test_keyed_tools_get_a_stable_key_and_are_re_executed_with_it() -> None:
    mailer = Mailer(die_after=True)
    h = Harness(FnAgent(_email_handler(mailer, effect=Effect.KEYED)))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.COMPLETED
    expected = hashlib.sha256(b"agent-1/t1/send_email/0").hexdigest()
    assert [key for _, key in mailer.sent] == [expected, expected]
    [intent] = await h.sink.of_type("tool.call.intent")  # same call, no new intent
    assert intent.payload["effect"] == "keyed"
    assert intent.payload["idempotency_key"] == expected
    assert "tool.in_doubt" not in await h.sink.types()


async def test_keyed_tools_may_retry_transient_errors_with_the_same_key() -> None:
    keys: list[str] = []

    def flaky(*, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if len(keys) < 3:
            raise TransientError("503")
        return "charged"

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.tool("charge", flaky, effect="keyed",
                              retry=RetryPolicy(attempts=3, initial_backoff_s=0.1))

    h = Harness(FnAgent(handler))
    assert (await h.run(await h.assign())).output == "charged"
    assert len(set(keys)) == 1
    assert len(keys) == 3


async def test_idempotent_tools_record_intent_and_outcome_together() -> None:
    calls = 0

    def lookup(city: str) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Killed
        return {"city": city, "temp": 21}

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.tool("weather", lookup, "Lyon", effect=Effect.IDEMPOTENT)

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    assert "tool.call.intent" not in await h.sink.types()
    outcome = await h.rerun(task)
    assert outcome.output == {"city": "Lyon", "temp": 21}
    assert calls == 2
    assert h.sink.batches[-2] == ["tool.call.intent", "tool.call.completed"]


async def test_a_failing_tool_records_its_failure_and_replays_it() -> None:
    calls = 0
    errors: list[ToolCallFailed] = []

    def refuse(to: str) -> None:
        nonlocal calls
        calls += 1
        raise PermissionError("relay denied")

    async def handler(task: Task, ctx: Context) -> Any:
        try:
            await ctx.tool("send_email", refuse, "ann@example.com")
        except ToolCallFailed as e:
            errors.append(e)
        if ctx.incarnation == 0:
            raise Killed
        return "reported"

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    assert (await h.rerun(task)).output == "reported"
    assert calls == 1
    assert len(errors) == 2
    assert errors[1].error_type == "PermissionError"
    assert "relay denied" in str(errors[1])
    [failed] = await h.sink.of_type("tool.call.failed")
    assert failed.payload["tool"] == "send_email"
    assert failed.payload["retriable"] is False


async def test_an_unhandled_tool_failure_fails_the_task() -> None:
    def refuse() -> None:
        raise PermissionError("no")

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.tool("send_email", refuse)

    h = Harness(FnAgent(handler))
    outcome = await h.run(await h.assign())
    assert outcome.status is OutcomeStatus.FAILED
    assert outcome.error_type == "ares.agents.errors.ToolCallFailed"


async def test_invalid_tool_options_are_refused() -> None:
    async def keyed_with_reconcile(task: Task, ctx: Context) -> Any:
        return await ctx.tool("x", lambda: 1, effect=Effect.KEYED,
                              reconcile=lambda k: Reconciled.NOT_DONE)

    async def retried_at_most_once(task: Task, ctx: Context) -> Any:
        return await ctx.tool("x", lambda: 1, retry=RetryPolicy(attempts=2))

    for handler, message in ((keyed_with_reconcile, "reconcile applies to at_most_once"),
                             (retried_at_most_once, "never retried automatically")):
        h = Harness(FnAgent(handler))
        with pytest.raises(ValueError, match=message):
            await h.run(await h.assign())


async def test_a_swallowed_pause_still_pauses_the_task() -> None:
    mailer = Mailer(die_after=True)

    async def handler(task: Task, ctx: Context) -> Any:
        try:
            await ctx.tool("send_email", mailer, "ann@example.com")
        except Killed:
            raise
        except BaseException:  # the point of the test: a handler swallowing the pause
            pass
        return "pretend all is well"

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.PAUSED_IN_DOUBT
    assert "task.completed" not in await h.sink.types()


async def test_a_context_is_closed_after_its_run() -> None:
    kept: list[Context] = []

    async def handler(task: Task, ctx: Context) -> Any:
        kept.append(ctx)
        return 1

    h = Harness(FnAgent(handler))
    await h.run(await h.assign())
    with pytest.raises(ContextClosedError, match="after the task run ended"):
        await kept[0].step("late", lambda: 2)
    assert issubclass(TaskPaused, BaseException)
    assert not issubclass(TaskPaused, Exception)
