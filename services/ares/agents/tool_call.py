"""One ``ctx.tool`` call: record the intent, run, record the outcome — or, on a re-run,
return the recorded outcome, re-execute what is safe to, and pause what is in doubt."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ares.agents import records as r
from ares.agents.context import _Exhausted, call_maybe_async
from ares.agents.errors import ToolCallFailed, ToolSkipped
from ares.agents.journal import RecordedCall, ToolAttempt
from ares.agents.retry import RetryPolicy
from ares.agents.tools import Effect, InDoubtCall, Reconciled, Reconciler, ReconcileStatus
from ares.events.model import NewEvent
from ares.events.wire.canonical import canonical_json

if TYPE_CHECKING:
    from ares.agents.context import Context


@dataclass(frozen=True, slots=True)
class _Outcome:
    event: NewEvent
    value: Any = None
    error: ToolCallFailed | None = None

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class ToolCall:
    def __init__(self, ctx: Context, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], effect: Effect, hook: Reconciler | None,
                 policy: RetryPolicy, pass_key: bool, position: int, occurrence: int) -> None:
        self.ctx = ctx
        self.name = name
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.effect = effect
        self.hook = hook
        self.policy = policy
        self.pass_key = pass_key
        self.position = position
        self.occurrence = occurrence
        self.key = r.idempotency_key(ctx.agent_id, ctx.task_id, name, occurrence)

    # -- first run -----------------------------------------------------------------------

    async def first(self) -> Any:
        if self.effect is Effect.IDEMPOTENT:
            # Safe to repeat: no durable intent first; intent and outcome land together.
            outcome = await self._execute(self._call_id(0), self.key)
            await self.ctx._append([self._intent(0), outcome.event])
            self.ctx.stats.tool_calls += 1
            return outcome.unwrap()
        await self.ctx._append([self._intent(0)])  # durable BEFORE the call
        return await self._run(self._call_id(0), self.key)

    # -- re-run --------------------------------------------------------------------------

    async def replay(self, recorded: RecordedCall) -> Any:
        attempt = recorded.last_attempt
        if attempt.outcome == "completed":
            self.ctx.stats.reused_tool_calls += 1
            return attempt.result
        if attempt.outcome == "failed":
            raise _failed(self.name, attempt)
        key = attempt.idempotency_key or self.key
        resolution = attempt.resolution
        if resolution is not None:
            if resolution.as_ == "done":
                self.ctx.stats.reused_tool_calls += 1
                return resolution.result
            if resolution.as_ == "skip":
                raise ToolSkipped(self.name, attempt.call_id, resolution.note)
            return await self._retry(len(recorded.attempts), key, [])  # "retry"
        if Effect.AT_MOST_ONCE in (_effect(attempt.effect), self.effect):
            return await self._in_doubt(attempt, len(recorded.attempts), key)
        # idempotent or keyed, interrupted: running it again is safe (keyed: same key).
        return await self._run(attempt.call_id, key)

    async def _in_doubt(self, attempt: ToolAttempt, attempts: int, key: str) -> Any:
        verdict = await self._reconcile(key)
        if verdict.status is ReconcileStatus.DONE:
            # The verdict is kept (who decided, what it said) next to the outcome it implies.
            value, text = self.ctx._json(f"reconcile of tool {self.name!r}", verdict.result)
            settle = r.resolution_event(attempt.call_id, "done", result=value,
                                        note="reconcile: done", task_id=self.ctx.task_id,
                                        tool=self.name, module=self.ctx.module,
                                        by="reconcile")
            await self.ctx._append([settle, NewEvent(r.TOOL_COMPLETED, self.ctx.module, {
                "call_id": attempt.call_id, "result_json": text, "tool": self.name})])
            self.ctx.stats.reused_tool_calls += 1
            return value
        if verdict.status is ReconcileStatus.NOT_DONE:
            settle = r.resolution_event(attempt.call_id, "retry", note="reconcile: not done",
                                        task_id=self.ctx.task_id, tool=self.name,
                                        module=self.ctx.module, by="reconcile")
            return await self._retry(attempts, key, [settle])
        if attempt.in_doubt is None:  # a re-run of a paused task does not repeat it
            await self.ctx._append([NewEvent(r.TOOL_IN_DOUBT, self.ctx.module, {
                "call_id": attempt.call_id, "tool": self.name, "idempotency_key": key,
                "reason": verdict.reason})])
        return self.ctx._pause(InDoubtCall(self.ctx.task_id, attempt.call_id, self.name, key,
                                    verdict.reason))

    async def _reconcile(self, key: str) -> Reconciled:
        if self.hook is None:
            return Reconciled.unknown("intent recorded, outcome not; the tool has no "
                                      "reconcile hook")
        try:
            verdict = await call_maybe_async(self.hook, key)
        except Exception as e:
            return Reconciled.unknown(f"reconcile raised {type(e).__name__}: {e}")
        if not isinstance(verdict, Reconciled):
            return Reconciled.unknown(f"reconcile returned {type(verdict).__name__}, not a "
                                      "Reconciled")
        if verdict.status is ReconcileStatus.UNKNOWN and not verdict.reason:
            return Reconciled.unknown("reconcile could not tell whether the call happened")
        return verdict

    async def _retry(self, attempt: int, key: str, before: list[NewEvent]) -> Any:
        """A new attempt of an unsettled call: a new intent, durable before the call."""
        await self.ctx._append([*before, self._intent(attempt)])
        return await self._run(self._call_id(attempt), key)

    # -- execution -----------------------------------------------------------------------

    async def _run(self, call_id: str, key: str) -> Any:
        outcome = await self._execute(call_id, key)
        await self.ctx._append([outcome.event])
        self.ctx.stats.tool_calls += 1
        return outcome.unwrap()

    async def _execute(self, call_id: str, key: str) -> _Outcome:
        kwargs = dict(self.kwargs)
        if self.pass_key:
            kwargs["idempotency_key"] = key
        try:
            result = await self.ctx._attempt(self.name, self.policy, self.fn, self.args, kwargs)
        except _Exhausted as failure:
            error_type = r.qualified_name(failure.error)
            payload = {"call_id": call_id, "error": str(failure.error),
                       "error_type": error_type, "tool": self.name,
                       "retriable": failure.retriable}
            error = ToolCallFailed(self.name, call_id, error_type, str(failure.error),
                                   failure.retriable)
            error.__cause__ = failure.error
            return _Outcome(NewEvent(r.TOOL_FAILED, self.ctx.module, payload), error=error)
        value, text = self.ctx._json(f"tool {self.name!r}", result)
        return _Outcome(NewEvent(r.TOOL_COMPLETED, self.ctx.module, {
            "call_id": call_id, "result_json": text, "tool": self.name}), value)

    def _call_id(self, attempt: int) -> str:
        return r.call_id(self.ctx.task_id, self.name, self.occurrence, attempt)

    def _intent(self, attempt: int) -> NewEvent:
        arguments = r.lenient_json({"args": list(self.args), "kwargs": self.kwargs})
        return NewEvent(r.TOOL_INTENT, self.ctx.module, {
            "call_id": self._call_id(attempt), "tool": self.name, "effect": str(self.effect),
            "idempotency_key": self.key, "args_json": canonical_json(arguments),
            "occurrence": self.occurrence, "task_id": self.ctx.task_id},
            r.position_metadata(self.position))


def _effect(recorded: str) -> Effect:
    try:
        return Effect(recorded)
    except ValueError:
        return Effect.AT_MOST_ONCE  # unknown (e.g. "non_idempotent"): the safe reading


def _failed(tool: str, attempt: ToolAttempt) -> ToolCallFailed:
    failure: Mapping[str, Any] = attempt.failure or {}
    return ToolCallFailed(tool, attempt.call_id, failure.get("error_type"),
                          str(failure.get("error", "")), bool(failure.get("retriable")))
