"""ctx.step and ctx.llm: recorded once, replayed without executing; retries; fallbacks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ares.agents import OutcomeStatus, RetryPolicy, StepFailed, StepResultError, Task
from ares.agents.context import Context
from ares.errors import TransientError
from ares.llm import LlmResult, LlmUnavailableError, OfflineProvider
from tests.unit.agents.support import Counter, FnAgent, Harness, Killed


class CountingProvider(OfflineProvider):
    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[str] = []

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        self.prompts.append(prompt)
        return await super().complete(prompt, model, **params)


async def test_completed_steps_are_not_executed_again_on_a_rerun() -> None:
    fetch, parse = Counter({"rows": [1, 2]}), Counter("parsed")
    llm = CountingProvider()

    async def handler(task: Task, ctx: Context) -> Any:
        rows = await ctx.step("fetch", fetch)
        summary = await ctx.llm("summarise", prompt=f"rows: {rows}")
        parsed = await ctx.step("parse", parse, summary)
        return {"rows": rows, "summary": summary, "parsed": parsed}

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    # Killed before the 3rd append (parse's record): fetch and summarise are durable.
    with pytest.raises(Killed):
        await h.run(task, kill_at=3)
    assert (fetch.calls, len(llm.prompts), parse.calls) == (1, 1, 1)

    outcome = await h.rerun(task)

    assert outcome.status is OutcomeStatus.COMPLETED
    assert (fetch.calls, len(llm.prompts), parse.calls) == (1, 1, 2)
    assert outcome.output["rows"] == {"rows": [1, 2]}
    assert outcome.stats.reused_steps == 1
    assert outcome.stats.reused_llm_calls == 1
    assert outcome.stats.executed_steps == 1
    assert outcome.stats.llm_calls == 0
    types = await h.sink.types()
    assert types == ["task.assigned", "step.completed", "llm.call", "task.resumed",
                     "step.completed", "task.completed"]


async def test_a_completed_task_is_not_run_again() -> None:
    step = Counter(1)

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("one", step)

    h = Harness(FnAgent(handler))
    task = await h.assign()
    first = await h.run(task)
    again = await h.rerun(task)
    assert step.calls == 1
    assert again.from_journal
    assert again.output == first.output == 1


async def test_step_result_is_what_replay_returns() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("pair", lambda: (1, 2))

    h = Harness(FnAgent(handler))
    outcome = await h.run(await h.assign())
    assert outcome.output == [1, 2]  # a tuple goes through JSON: both runs see a list


async def test_async_step_functions_are_awaited() -> None:
    async def fetch(x: int, *, y: int) -> int:
        await asyncio.sleep(0)
        return x + y

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("fetch", fetch, 1, y=2)

    h = Harness(FnAgent(handler))
    assert (await h.run(await h.assign())).output == 3


async def test_a_non_json_result_fails_the_task_naming_the_step() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("load", lambda: {1, 2})

    h = Harness(FnAgent(handler))
    outcome = await h.run(await h.assign())
    assert outcome.status is OutcomeStatus.FAILED
    assert outcome.error_type == "ares.agents.errors.StepResultError"
    assert "step 'load' returned a set" in (outcome.error or "")
    failed = await h.sink.of_type("task.failed")
    assert "step 'load'" in failed[0].payload["error_message"]


async def test_a_non_json_task_output_fails_the_task() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        return object()

    h = Harness(FnAgent(handler))
    outcome = await h.run(await h.assign())
    assert outcome.status is OutcomeStatus.FAILED
    with pytest.raises(StepResultError):
        raise StepResultError("t1", "x", object(), "r")


async def test_transient_errors_are_retried_with_exponential_backoff() -> None:
    attempts = 0

    def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 4:
            raise TransientError("broker busy")
        return "done"

    policy = RetryPolicy(attempts=5, initial_backoff_s=0.5, max_backoff_s=1.5)

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("flaky", flaky, retry=policy)

    h = Harness(FnAgent(handler))
    outcome = await h.run(await h.assign())
    assert outcome.output == "done"
    assert attempts == 4
    assert h.clock.sleeps == [0.5, 1.0, 1.5]  # doubled, capped
    assert "retrying flaky (attempt 2)" in h.sink.heartbeats


async def test_retry_after_hint_is_honoured_up_to_the_cap() -> None:
    calls = 0

    def limited() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise LlmUnavailableError("429", retry_after_s=7)
        return "ok"

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("limited", limited,
                              retry=RetryPolicy(attempts=2, initial_backoff_s=1,
                                                max_backoff_s=5))

    h = Harness(FnAgent(handler))
    assert (await h.run(await h.assign())).output == "ok"
    assert h.clock.sleeps == [5]


async def test_non_retriable_errors_fail_at_once_and_are_recorded() -> None:
    calls = 0

    def broken() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("missing")

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("broken", broken, retry=RetryPolicy(attempts=5))

    h = Harness(FnAgent(handler))
    task = await h.assign()
    outcome = await h.run(task)
    assert outcome.status is OutcomeStatus.FAILED
    assert calls == 1
    assert h.clock.sleeps == []
    assert outcome.error_type == "ares.agents.errors.StepFailed"
    [failed] = await h.sink.of_type("step.failed")
    assert failed.payload["step_name"] == "broken"
    assert failed.payload["error_type"] == "KeyError"
    assert failed.payload["attempts"] == 1
    assert failed.payload["has_fallback"] is False


async def test_exhausted_retries_raise_step_failed_which_replays_without_executing() -> None:
    calls = 0
    caught: list[StepFailed] = []

    def down() -> None:
        nonlocal calls
        calls += 1
        raise TransientError("down")

    async def handler(task: Task, ctx: Context) -> Any:
        try:
            await ctx.step("down", down, retry=RetryPolicy(attempts=3, initial_backoff_s=1))
        except StepFailed as e:
            caught.append(e)
        if ctx.incarnation == 0:
            raise Killed  # die after the failure was recorded
        return "handled"

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)
    assert outcome.output == "handled"
    assert calls == 3
    assert h.clock.sleeps == [1, 2]
    assert caught[0].attempts == 3
    assert caught[0].retriable
    assert caught[1].name == "down"
    assert "failed after 3 attempt(s)" in str(caught[1])


async def test_fallback_is_recorded_and_returned_explicitly() -> None:
    llm = CountingProvider()

    async def failing(prompt: str, model: str | None = None, **params: Any) -> LlmResult:
        raise LlmUnavailableError("overloaded")

    llm.complete = failing  # type: ignore[method-assign]

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("draft", prompt="p", fallback="(no draft)",
                             retry=RetryPolicy(attempts=2, initial_backoff_s=0))

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    outcome = await h.run(task)
    assert outcome.output == "(no draft)"
    [failed] = await h.sink.of_type("step.failed")
    assert failed.payload["kind"] == "llm"
    assert failed.payload["has_fallback"] is True
    assert failed.payload["fallback"] == "(no draft)"
    assert failed.payload["error_type"] == "ares.llm.base.LlmUnavailableError"


async def test_a_recorded_fallback_is_replayed() -> None:
    calls = 0

    def fails() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("bad")

    async def handler(task: Task, ctx: Context) -> Any:
        value = await ctx.step("guess", fails, fallback={"guess": None})
        await ctx.step("after", lambda: 1)
        return value

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task, kill_at=2)
    outcome = await h.rerun(task)
    assert outcome.output == {"guess": None}
    assert calls == 1


async def test_llm_records_tokens_model_and_prompt_hash() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("hello", prompt="Say hello, world!", max_tokens=5)

    h = Harness(FnAgent(handler))
    outcome = await h.run(await h.assign())
    [call] = await h.sink.of_type("llm.call")
    p = call.payload
    assert p["output"] == outcome.output
    assert p["model"] == "offline-1"
    assert len(p["prompt_hash"]) == 64
    assert p["prompt_tokens"] == 5  # Say / hello / , / world / ! (as cl100k splits it)
    assert p["completion_tokens"] > 0
    assert p["task_id"] == "t1"
    assert p["occurrence"] == 0
    assert call.metadata["ares.position"] == "0"


async def test_occurrences_count_per_name() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        return [await ctx.step("tick", lambda i=i: i) for i in range(3)]

    h = Harness(FnAgent(handler))
    await h.run(await h.assign())
    steps = await h.sink.of_type("step.completed")
    assert [s.payload["occurrence"] for s in steps] == [0, 1, 2]
    assert [json.loads(s.payload["result_json"]) for s in steps] == [0, 1, 2]


async def test_concurrent_steps_keep_their_positions_when_recorded_out_of_order() -> None:
    gate = asyncio.Event()
    calls = {"slow": 0, "fast": 0}

    async def slow() -> str:
        calls["slow"] += 1
        await gate.wait()
        return "slow"

    async def fast() -> str:
        calls["fast"] += 1
        gate.set()
        return "fast"

    async def handler(task: Task, ctx: Context) -> Any:
        async with asyncio.TaskGroup() as tg:
            a = tg.create_task(ctx.step("slow", slow))
            b = tg.create_task(ctx.step("fast", fast))
        return [a.result(), b.result()]

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task, kill_at=3)  # both steps recorded (fast first), then killed
    steps = await h.sink.of_type("step.completed")
    assert [s.payload["step_name"] for s in steps] == ["fast", "slow"]
    gate.clear()
    outcome = await h.rerun(task)
    assert outcome.output == ["slow", "fast"]
    assert calls == {"slow": 1, "fast": 1}


async def test_logs_ride_with_the_next_record_and_are_not_repeated_on_replay() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        ctx.log("starting", size=3)
        await ctx.step("a", lambda: 1)
        ctx.log("between", level="warning", obj=object())
        await ctx.step("b", lambda: 2)
        ctx.heartbeat("almost done")
        return "ok"

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task, kill_at=2)  # "starting" + a are durable; "between" + b are not
    await h.rerun(task)
    logs = await h.sink.of_type("agent.log")
    assert [e.payload["message"] for e in logs] == ["starting", "between"]
    assert logs[0].module == "agent.test"
    assert logs[0].payload["fields"] == {"size": 3}
    assert logs[1].payload["level"] == "warning"
    assert logs[1].payload["fields"]["obj"].startswith("<object object")
    assert h.sink.batches[0] == ["agent.log", "step.completed"]
    assert "almost done" in h.sink.heartbeats
    assert "step a" in h.sink.heartbeats
