"""ctx.llm with validate/retries (the sub-agent executor): every attempt recorded and paid
once, the verdicts recorded, a fallback or a StepFailed when nothing passes, and replay that
re-executes nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import ares
from ares.agents import (
    OutcomeStatus,
    RetryPolicy,
    StepFailed,
    Task,
    ValidationFailed,
    token_ledger,
)
from ares.agents.context import Context
from ares.events.model import Event
from ares.llm import LlmRequestError, LlmResult, LlmUnavailableError
from tests.unit.agents.support import FnAgent, Harness, Killed

PROMPT_TOKENS = 10
NO_BACKOFF = RetryPolicy(attempts=2, initial_backoff_s=0)


class Scripted:
    """An LlmProvider that answers from a script (a text, or an exception to raise), per
    prompt; counts its real calls. Completion tokens: the length of the text."""

    default_model = "scripted-1"

    def __init__(self, *script: str | Exception, **by_prompt: list[str | Exception]) -> None:
        self.scripts: dict[str, list[str | Exception]] = {"": list(script), **by_prompt}
        self.calls: list[str] = []

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        script = self.scripts[prompt if prompt in self.scripts else ""]
        self.calls.append(prompt)
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return LlmResult(item, PROMPT_TOKENS, len(item), model or self.default_model)


class Validator:
    """Accepts a JSON object with a "total": returns it with the total doubled (a value
    that is not the completion text); counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> dict[str, Any]:
        self.calls += 1
        data = json.loads(text)  # JSONDecodeError (a ValueError) rejects it too
        if not isinstance(data, dict) or "total" not in data:
            raise ValidationFailed(f"no 'total' in {text!r}")
        return {**data, "total": data["total"] * 2}


def payloads(events: list[Event], event_type: str) -> list[Any]:
    return [e.payload for e in events if e.type == event_type]


def spent(*texts: str) -> tuple[int, int]:
    return PROMPT_TOKENS * len(texts), sum(len(t) for t in texts)


async def test_a_valid_first_completion_is_one_attempt_and_its_validated_value() -> None:
    llm, check = Scripted('{"total": 3}'), Validator()

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("extract", "p", validate=check, retries=2)

    h = Harness(FnAgent(handler), llm=llm)
    outcome = await h.run(await h.assign())

    assert outcome.output == {"total": 6}
    assert (len(llm.calls), check.calls) == (1, 1)
    events = await h.sink.events()
    [call] = [e for e in events if e.type == "llm.call"]
    assert call.metadata == {"ares.position": "0", "ares.attempt": "1"}
    [verdict] = payloads(events, "llm.validation")
    assert verdict["verdict"] == "valid"
    assert verdict["value"] == {"total": 6}
    assert (verdict["attempt"], verdict["attempts"], verdict["occurrence"]) == (1, 3, 0)
    assert verdict["prompt_hash"] == call.payload["prompt_hash"]
    assert h.sink.batches[0] == ["llm.call", "llm.validation"]  # one append per attempt
    assert payloads(events, "step.failed") == []
    assert (outcome.stats.llm_calls, outcome.stats.prompt_tokens,
            outcome.stats.completion_tokens) == (1, *spent('{"total": 3}'))


async def test_a_rejected_completion_is_retried_and_both_attempts_are_paid() -> None:
    first, second = "Sure! Here it is: total=4", '{"total": 4}'
    llm, check = Scripted(first, second), Validator()

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("extract", "p", validate=check, retries=2)

    h = Harness(FnAgent(handler), llm=llm)
    outcome = await h.run(await h.assign())

    assert outcome.output == {"total": 8}
    events = await h.sink.events()
    calls = payloads(events, "llm.call")
    assert [c["output"] for c in calls] == [first, second]
    assert [c["occurrence"] for c in calls] == [0, 1]
    verdicts = payloads(events, "llm.validation")
    assert [v["verdict"] for v in verdicts] == ["invalid", "valid"]
    assert verdicts[0]["error_type"] == "json.decoder.JSONDecodeError"
    assert verdicts[0]["value"] is None
    stats = outcome.stats
    assert (stats.llm_calls, stats.prompt_tokens, stats.completion_tokens) == (
        2, *spent(first, second))
    book = token_ledger(events)
    assert (book.calls, book.spent_prompt, book.spent_completion, book.spent_twice) == (
        2, *spent(first, second), 0)


async def test_no_valid_completion_returns_the_declared_fallback_recorded() -> None:
    llm = Scripted("no", '{"sum": 1}')

    async def handler(task: Task, ctx: Context) -> Any:
        value = await ctx.llm("extract", "p", validate=Validator(), retries=1,
                              fallback={"total": None})
        if ctx.incarnation == 0:
            raise Killed  # the decision is durable: the re-run replays it
        return value

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)

    assert outcome.output == {"total": None}
    assert len(llm.calls) == 2
    events = await h.sink.events()
    [failed] = payloads(events, "step.failed")
    assert failed["kind"] == "llm"
    assert (failed["has_fallback"], failed["fallback"]) == (True, {"total": None})
    assert failed["error_type"] == "ares.agents.errors.ValidationFailed"
    assert "no 'total'" in failed["error"]
    assert failed["attempts"] == 2
    # the last attempt and the call's decision went out in one append
    assert h.sink.batches[1] == ["llm.call", "llm.validation", "step.failed"]
    assert outcome.stats.reused_llm_calls == 2
    assert outcome.stats.llm_calls == 0


async def test_no_valid_completion_without_fallback_is_step_failed_with_the_cause() -> None:
    llm = Scripted("a", "b", "[1, 2]")
    caught: list[StepFailed] = []

    async def handler(task: Task, ctx: Context) -> Any:
        try:
            await ctx.llm("extract", "p", validate=Validator(), retries=2)
        except StepFailed as e:
            caught.append(e)
        if ctx.incarnation == 0:
            raise Killed
        raise caught[-1]

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)

    assert outcome.status is OutcomeStatus.FAILED
    assert outcome.error_type == "ares.agents.errors.StepFailed"
    assert len(caught) == 2  # raised by the attempts, then again from the journal
    for error in caught:
        assert (error.kind, error.name, error.attempts) == ("llm", "extract", 3)
        assert error.error_type == "ares.agents.errors.ValidationFailed"
        assert "no 'total' in '[1, 2]'" in error.error
        assert "failed after 3 attempt(s)" in str(error)
    assert isinstance(caught[0].__cause__, ValidationFailed)
    assert len(llm.calls) == 3  # the re-run raised it from the journal
    [failed] = payloads(await h.sink.events(), "step.failed")
    assert failed["has_fallback"] is False


async def test_a_transient_provider_error_is_retried_within_the_attempt() -> None:
    llm = Scripted(LlmUnavailableError("overloaded"), '{"total": 1}')

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("extract", "p", validate=Validator(), retries=1)

    h = Harness(FnAgent(handler), llm=llm)
    outcome = await h.run(await h.assign())

    assert outcome.output == {"total": 2}
    assert len(llm.calls) == 2
    assert len(h.clock.sleeps) == 1  # the default retry policy's backoff
    events = await h.sink.events()
    [verdict] = payloads(events, "llm.validation")
    assert (verdict["attempt"], verdict["verdict"]) == (1, "valid")
    assert len(payloads(events, "llm.call")) == 1


async def test_a_provider_giving_up_is_a_failed_attempt_that_retries_may_repeat() -> None:
    llm = Scripted(LlmUnavailableError("down"), LlmUnavailableError("down"), '{"total": 5}')

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("extract", "p", validate=Validator(), retries=1,
                             retry=NO_BACKOFF)

    h = Harness(FnAgent(handler), llm=llm)
    outcome = await h.run(await h.assign())

    assert outcome.output == {"total": 10}
    events = await h.sink.events()
    verdicts = payloads(events, "llm.validation")
    assert [v["verdict"] for v in verdicts] == ["provider_failed", "valid"]
    assert verdicts[0]["error_type"] == "ares.llm.base.LlmUnavailableError"
    assert verdicts[0]["retriable"] is True
    [call] = [e for e in events if e.type == "llm.call"]  # no completion, no llm.call
    assert call.metadata == {"ares.position": "1", "ares.attempt": "2"}
    assert outcome.stats.llm_calls == 1


async def test_a_refused_request_fails_at_once_whatever_the_retries() -> None:
    llm = Scripted(LlmRequestError("bad key", status=401), '{"total": 5}')

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("extract", "p", validate=Validator(), retries=3)

    h = Harness(FnAgent(handler), llm=llm)
    outcome = await h.run(await h.assign())

    assert outcome.status is OutcomeStatus.FAILED
    assert len(llm.calls) == 1
    [failed] = payloads(await h.sink.events(), "step.failed")
    assert (failed["error_type"], failed["attempts"]) == ("ares.llm.base.LlmRequestError", 1)
    assert failed["retriable"] is False


async def test_a_crash_between_attempts_resumes_at_the_next_attempt() -> None:
    rejected, accepted = "total: 2", '{"total": 2}'
    # the first run's second attempt is paid, then the process dies before recording it
    llm, check = Scripted(rejected, accepted, accepted), Validator()

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("extract", "p", validate=check, retries=2)

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task, kill_at=2)  # attempt 1 recorded; attempt 2's append never lands
    assert len(llm.calls) == 2

    outcome = await h.rerun(task)

    assert outcome.output == {"total": 4}
    assert len(llm.calls) == 3  # attempt 1 was not paid again
    assert check.calls == 3  # nor validated again: its verdict is recorded
    stats = outcome.stats
    assert (stats.reused_llm_calls, stats.reused_prompt_tokens,
            stats.reused_completion_tokens) == (1, *spent(rejected))
    assert (stats.llm_calls, stats.prompt_tokens, stats.completion_tokens) == (
        1, *spent(accepted))
    events = await h.sink.events()
    assert [c["occurrence"] for c in payloads(events, "llm.call")] == [0, 1]
    [resumed] = payloads(events, "task.resumed")
    assert resumed["reused_llm_calls"] == 1
    assert token_ledger(events).spent_twice == 0


async def test_a_full_replay_spends_nothing_and_returns_the_same_value() -> None:
    llm, check = Scripted("{}", '{"total": 7}'), Validator()

    async def handler(task: Task, ctx: Context) -> Any:
        value = await ctx.llm("extract", "p", validate=check, retries=3)
        await ctx.step("after", lambda: "done")
        return value

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task, kill_at=3)  # both attempts recorded, killed before "after"

    outcome = await h.rerun(task)

    assert outcome.output == {"total": 14}
    assert (len(llm.calls), check.calls) == (2, 2)
    stats = outcome.stats
    assert (stats.llm_calls, stats.prompt_tokens, stats.completion_tokens) == (0, 0, 0)
    assert (stats.reused_llm_calls, stats.reused_prompt_tokens,
            stats.reused_completion_tokens) == (2, *spent("{}", '{"total": 7}'))
    book = token_ledger(await h.sink.events())
    assert (book.calls, book.reused_calls, book.spent_twice) == (2, 2, 0)
    # the step after the call sits past all the call's attempts (retries + 1 positions)
    [after] = [e for e in await h.sink.events() if e.type == "step.completed"]
    assert after.metadata["ares.position"] == "4"


async def test_the_transformed_value_is_what_both_runs_return() -> None:
    llm = Scripted("  hello  ")
    seen: list[Any] = []
    validated: list[str] = []

    async def shout(text: str) -> str:  # async validators are awaited
        validated.append(text)
        await asyncio.sleep(0)
        return text.strip().upper()

    async def handler(task: Task, ctx: Context) -> Any:
        seen.append(await ctx.llm("greet", "p", validate=shout))
        if ctx.incarnation == 0:
            raise Killed
        return seen[-1]

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)

    assert seen == ["HELLO", "HELLO"]
    assert outcome.output == "HELLO"
    assert validated == ["  hello  "]
    [verdict] = payloads(await h.sink.events(), "llm.validation")
    assert (verdict["value"], verdict["value_is_output"]) == ("HELLO", False)


async def test_returning_the_text_itself_records_no_copy_of_it() -> None:
    llm = Scripted("fine")

    async def handler(task: Task, ctx: Context) -> Any:
        value = await ctx.llm("check", "p", validate=lambda text: text)
        if ctx.incarnation == 0:
            raise Killed
        return value

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    assert (await h.rerun(task)).output == "fine"
    [verdict] = payloads(await h.sink.events(), "llm.validation")
    assert (verdict["value"], verdict["value_is_output"]) == (None, True)


async def test_a_checker_that_returns_nothing_accepts_the_text_not_none() -> None:
    def check(text: str) -> None:
        if not text.endswith("."):
            raise ValidationFailed("not a sentence")

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("say", "p", validate=check, retries=1)

    h = Harness(FnAgent(handler), llm=Scripted("half", "Done."))
    assert (await h.run(await h.assign())).output == "Done."
    verdicts = payloads(await h.sink.events(), "llm.validation")
    assert [(v["verdict"], v["value_is_output"]) for v in verdicts] == [
        ("invalid", False), ("valid", True)]
    assert verdicts[0]["error"] == "not a sentence"


async def test_concurrent_validated_calls_replay_from_their_own_positions() -> None:
    """Positions are taken when the call is requested: a retry of one call never lands
    where a concurrent call was recorded."""
    llm = Scripted(a=["{}", '{"total": 1}'], b=['{"total": 2}'])

    async def handler(task: Task, ctx: Context) -> Any:
        async with asyncio.TaskGroup() as tg:
            a = tg.create_task(ctx.llm("one", "a", validate=Validator(), retries=1))
            b = tg.create_task(ctx.llm("two", "b", validate=Validator(), retries=1))
        if ctx.incarnation == 0:
            raise Killed
        return [a.result(), b.result()]

    h = Harness(FnAgent(handler), llm=llm)
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)

    assert outcome.status is OutcomeStatus.COMPLETED
    assert outcome.output == [{"total": 2}, {"total": 4}]
    assert len(llm.calls) == 3
    assert outcome.stats.reused_llm_calls == 3


async def test_without_validate_nor_retries_the_records_are_unchanged() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("plain", "p")

    h = Harness(FnAgent(handler), llm=Scripted("text"))
    assert (await h.run(await h.assign())).output == "text"
    events = await h.sink.events()
    assert [e.type for e in events] == ["task.assigned", "llm.call", "task.completed"]
    [call] = [e for e in events if e.type == "llm.call"]
    assert call.metadata == {"ares.position": "0"}


async def test_retries_must_be_a_non_negative_int() -> None:
    errors: list[BaseException] = []

    async def handler(task: Task, ctx: Context) -> Any:
        for retries in (-1, "2"):  # a str: what a config file might hand over
            try:
                await ctx.llm("x", "p", retries=retries)  # type: ignore[arg-type]
            except ValueError as e:
                errors.append(e)
        return len(errors)

    h = Harness(FnAgent(handler), llm=Scripted())
    assert (await h.run(await h.assign())).output == 2
    assert "retries must be an int >= 0" in str(errors[0])


def test_validation_failed_is_exported() -> None:
    assert ares.ValidationFailed is ValidationFailed
    assert issubclass(ValidationFailed, ValueError)
