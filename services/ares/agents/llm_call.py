"""One ``ctx.llm`` call with ``validate`` and/or ``retries``: the sub-agent executor.

Each attempt calls the provider (with its own ``retry`` policy for transient errors) and
hands the completion to ``validate``; the first output it accepts is the call's value (what
``validate`` returned; ``None``: the completion text itself). When
no attempt passes, the call ends with its declared ``fallback`` or a ``StepFailed`` naming
the last attempt's error: never an implicit empty result.

Recording: the call takes ``retries + 1`` consecutive positions, and as many occurrences of
its name, when it is *requested* (like every call: concurrent calls keep their positions,
and what follows the call sits where it sits whatever the attempts' verdicts). Attempt
``i`` (1-based) is a recorded llm call of its own, at the call's first position + ``i - 1``
and occurrence + ``i - 1``; one append holds

* ``llm.call`` when the provider answered — its tokens are spent, valid or not, and the
  token ledger counts them (distinct occurrences: never "spent twice");
* ``llm.validation`` {verdict: valid | invalid | provider_failed, value, error...}: the
  verdict, and the validated value (so ``validate`` never runs again on replay);
* after the last failed attempt, the call's ``step.failed`` (fallback or error).

All carry metadata ``ares.position`` and ``ares.attempt``. Positions of attempts that were
not needed stay empty. A re-run replays the recorded attempts without calling the provider
nor ``validate`` and resumes at the first attempt not recorded, so a crash between two
attempts pays for neither again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ares.agents import records as r
from ares.agents.context import MISSING, _Exhausted, _step_failed, call_maybe_async
from ares.agents.errors import ContextClosedError, NonDeterminismError, StepResultError
from ares.agents.llm_spend import Spend, budget_failure, provider_name
from ares.agents.retry import RetryPolicy
from ares.events.model import NewEvent
from ares.llm.base import LlmProvider, LlmResult, prompt_hash

if TYPE_CHECKING:
    from ares.agents.context import Context
    from ares.agents.journal import RecordedCall

log = logging.getLogger("ares.agents")

VALID = "valid"
INVALID = "invalid"  # validate rejected the completion
PROVIDER_FAILED = "provider_failed"  # no completion: the provider gave up (after its retries)


@dataclass(frozen=True, slots=True)
class _Verdict:
    verdict: str
    value: Any = None
    error_type: str | None = None
    error: str = ""
    retriable: bool = False
    cause: BaseException | None = None  # judged in this run (chained to the StepFailed)

    @property
    def ok(self) -> bool:
        return self.verdict == VALID

    @property
    def final(self) -> bool:
        """No further attempt can help: the provider refused for good (not retriable)."""
        return self.verdict == PROVIDER_FAILED and not self.retriable

    @classmethod
    def recorded(cls, payload: Mapping[str, Any], output: Any) -> _Verdict:
        value = output if payload.get("value_is_output") else payload.get("value")
        error_type = payload.get("error_type")
        return cls(str(payload.get("verdict")), value,
                   error_type if isinstance(error_type, str) else None,
                   str(payload.get("error") or ""), bool(payload.get("retriable")))


class ValidatedLlmCall:
    def __init__(self, ctx: Context, name: str, prompt: str, model: str | None,
                 provider: LlmProvider, policy: RetryPolicy,
                 validate: Callable[[str], Any] | None, retries: int,
                 params: dict[str, Any], budget_policy: str | None = None) -> None:
        self.ctx = ctx
        self.name = name
        self.prompt = prompt
        self.model = model
        self.provider = provider
        self.policy = policy
        self.validate = validate
        self.attempts = retries + 1
        self.params = params
        self.budget_policy = budget_policy
        self.digest = prompt_hash(prompt)

    async def run(self, fallback: Any) -> Any:
        ctx = self.ctx
        if fallback is not MISSING:  # checked up front: never after tokens were spent
            fallback = ctx._json(f"llm {self.name!r} fallback", fallback)[0]
        position, occurrence, recorded = ctx._begin(r.LLM, self.name, self.attempts)
        for index in range(self.attempts):
            if index:
                recorded = ctx._expect(r.LLM, self.name, position + index, occurrence + index)
            at = _At(position + index, occurrence + index, index + 1)
            last = at.attempt == self.attempts
            events: list[NewEvent] = []
            result: LlmResult | None = None
            if recorded is not None:
                ctx._check_prompt(recorded, at.position, self.digest)
                if recorded.llm is None and recorded.validation is None:
                    return ctx._replay_failure(recorded)  # a step.failed alone
                verdict = await self._replayed(recorded)
                if verdict.ok:
                    return verdict.value
                if recorded.failure is not None:
                    return ctx._replay_failure(recorded)
            else:
                events, verdict, result = await self._execute(at)
                if verdict.ok:
                    await self._record(events, result)
                    return verdict.value
            log.info("task %s: llm %r attempt %d/%d %s (%s: %s)", ctx.task_id, self.name,
                     at.attempt, self.attempts, verdict.verdict, verdict.error_type,
                     verdict.error)
            if last or verdict.final:
                return await self._give_up(at, verdict, events, result, fallback)
            if events:
                await self._record(events, result)
        raise AssertionError("unreachable: the last attempt returns or raises")

    # -- one attempt ---------------------------------------------------------------------

    async def _execute(self, at: _At) -> tuple[list[NewEvent], _Verdict, LlmResult | None]:
        ctx = self.ctx
        spend = Spend(ctx, self.name, at.occurrence, provider_name=provider_name(self.provider),
                      model=self.model or self.provider.default_model, policy=self.budget_policy)

        async def once() -> LlmResult:
            return await spend.request(
                lambda _: self.provider.complete(self.prompt, self.model, **self.params),
                lambda a: (a.prompt_tokens, a.completion_tokens, a.model))

        try:
            result = await ctx._attempt(self.name, self.policy, once, (), {})
        except _Exhausted as failure:
            verdict = _Verdict(PROVIDER_FAILED, None, r.qualified_name(failure.error),
                               str(failure.error), failure.retriable, failure.error)
            return [self._verdict_event(at, verdict, None)], verdict, None
        if not isinstance(result, LlmResult):
            raise TypeError(f"{type(self.provider).__name__}.complete returned "
                            f"{type(result).__name__}, not an LlmResult")
        call = NewEvent(r.LLM_CALL, ctx.module, {
            "name": self.name, "model": result.model, "prompt_hash": self.digest,
            "output": result.text, "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens, "occurrence": at.occurrence,
            "task_id": ctx.task_id}, self._metadata(at))
        try:
            verdict = await self._judge(result.text)
        except StepResultError:  # validate returned what JSON cannot hold: a bug, not a verdict
            await self._record([call], result)  # the tokens were spent all the same
            raise
        return [call, self._verdict_event(at, verdict, result.text)], verdict, result

    async def _judge(self, text: str) -> _Verdict:
        if self.validate is None:
            return _Verdict(VALID, text)
        try:
            value = await call_maybe_async(self.validate, text)
        except Exception as error:
            if isinstance(error, NonDeterminismError | ContextClosedError):
                raise
            return _Verdict(INVALID, None, r.qualified_name(error), str(error), False, error)
        if value is None:  # a checker that returns nothing accepts the text as it is
            return _Verdict(VALID, text)
        return _Verdict(VALID, self.ctx._json(f"llm {self.name!r} validate", value)[0])

    async def _replayed(self, recorded: RecordedCall) -> _Verdict:
        stats = self.ctx.stats
        if recorded.llm is not None:
            stats.reused_llm_calls += 1
            stats.reused_prompt_tokens += r.int_field(recorded.llm, "prompt_tokens")
            stats.reused_completion_tokens += r.int_field(recorded.llm, "completion_tokens")
        if recorded.validation is not None:
            return _Verdict.recorded(recorded.validation, recorded.result)
        # Recorded by a ctx.llm without validate (same name and position): judge that text.
        return await self._judge(str(recorded.result))

    # -- records -------------------------------------------------------------------------

    def _metadata(self, at: _At) -> dict[str, str]:
        return {**r.position_metadata(at.position), r.ATTEMPT_KEY: str(at.attempt)}

    def _verdict_event(self, at: _At, verdict: _Verdict, output: str | None) -> NewEvent:
        same = verdict.ok and output is not None and verdict.value == output
        return NewEvent(r.LLM_VALIDATION, self.ctx.module, {
            "task_id": self.ctx.task_id, "name": self.name, "occurrence": at.occurrence,
            "attempt": at.attempt, "attempts": self.attempts, "prompt_hash": self.digest,
            "verdict": verdict.verdict, "value": None if same else verdict.value,
            "value_is_output": same, "error_type": verdict.error_type,
            "error": verdict.error or None, "retriable": verdict.retriable},
            self._metadata(at))

    async def _record(self, events: list[NewEvent], result: LlmResult | None) -> None:
        await self.ctx._append(events)
        if result is not None:
            stats = self.ctx.stats
            stats.llm_calls += 1
            stats.prompt_tokens += result.prompt_tokens
            stats.completion_tokens += result.completion_tokens

    async def _give_up(self, at: _At, verdict: _Verdict, events: list[NewEvent],
                       result: LlmResult | None, fallback: Any) -> Any:
        """No attempt passed: the attempt's records and the call's ``step.failed`` in one
        append; the fallback, or ``StepFailed``."""
        ctx = self.ctx
        has_fallback = fallback is not MISSING
        value = fallback if has_fallback else None
        payload = {"task_id": ctx.task_id, "kind": r.LLM, "step_name": self.name,
                   "occurrence": at.occurrence, "error_type": verdict.error_type,
                   "error": verdict.error, "attempts": at.attempt,
                   "retriable": verdict.retriable, "has_fallback": has_fallback,
                   "fallback": value, "model": self.model or self.provider.default_model,
                   "prompt_hash": self.digest,
                   **(budget_failure(verdict.cause) if isinstance(verdict.cause, Exception)
                      else {})}
        await self._record([*events, NewEvent(r.STEP_FAILED, ctx.module, payload,
                                              self._metadata(at))], result)
        if has_fallback:
            log.warning("task %s: llm %r: no valid output in %d attempt(s) (%s); using its "
                        "fallback", ctx.task_id, self.name, at.attempt, verdict.error)
            return value
        raise _step_failed(payload) from verdict.cause


@dataclass(frozen=True, slots=True)
class _At:
    """Where one attempt is recorded."""

    position: int
    occurrence: int
    attempt: int  # 1-based


async def validated_llm(ctx: Context, name: str, prompt: str, model: str | None, *,
                        provider: LlmProvider, policy: RetryPolicy,
                        validate: Callable[[str], Any] | None, retries: int,
                        fallback: Any, params: dict[str, Any],
                        budget_policy: str | None = None) -> Any:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"ctx.llm({name!r}): retries must be an int >= 0 (got {retries!r})")
    if validate is not None and not callable(validate):
        raise TypeError(f"ctx.llm({name!r}): validate must be callable (got "
                        f"{type(validate).__name__})")
    call = ValidatedLlmCall(ctx, name, prompt, model, provider, policy, validate, retries,
                            params, budget_policy)
    return await call.run(fallback)
