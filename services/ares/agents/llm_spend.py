"""Around every provider request of ``ctx.llm`` / ``ctx.chat``: the fleet budget before it,
the token stream during it, the usage record after it.

Usage is published as soon as the provider answers (or fails), before the step is recorded:
what was paid is paid, whether or not the step's transaction commits. Nothing here is
recorded in the agent's stream; the call's own records say what the budget made it do
(``budget_wait_s``) or why it failed (``BudgetExceeded``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ares.agents import records as r
from ares.events.model import NewEvent
from ares.llm.base import LlmError
from ares.llm.chat import DeltaSink
from ares.llm.telemetry import (
    DEFAULT_TENANT,
    ERROR,
    OK,
    POLICIES,
    WAIT,
    BudgetExceeded,
    StreamId,
    UsageRecord,
)

if TYPE_CHECKING:
    from ares.agents.context import Context

log = logging.getLogger("ares.agents")

T = TypeVar("T")
TENANT_KEY = "tenant"  # agent config: whose budget the agent spends
POLICY_KEY = "budget_policy"  # agent config: wait | fail when over budget


def budget_policy(ctx: Context, policy: str | None) -> str:
    chosen = policy if policy is not None else ctx.config.get(POLICY_KEY, WAIT)
    if chosen not in POLICIES:
        raise ValueError(f"budget_policy must be one of {', '.join(POLICIES)} "
                         f"(got {chosen!r})")
    return str(chosen)


def tenant_of(ctx: Context) -> str:
    tenant = ctx.config.get(TENANT_KEY)
    return tenant if isinstance(tenant, str) and tenant else DEFAULT_TENANT


class Spend:
    """One recorded llm call's requests (several when retried): each admitted by the budget,
    each reported to ``ares.usage``, streamed when asked."""

    def __init__(self, ctx: Context, name: str, occurrence: int, *, provider_name: str,
                 model: str, policy: str | None, stream: bool = False) -> None:
        self.ctx = ctx
        self.name = name
        self.occurrence = occurrence
        self.provider_name = provider_name
        self.model = model
        self.policy = budget_policy(ctx, policy)
        self.tenant = tenant_of(ctx)
        self.stream = stream
        self.waited_s = 0.0
        self.requests = 0

    async def request(self, send: Callable[[DeltaSink | None], Awaitable[T]],
                      tokens: Callable[[T], tuple[int, int, str]]) -> T:
        """``send(on_delta)`` once, within the budget; ``tokens(answer)`` = (prompt,
        completion, model) of the answer, for its usage record."""
        services = self.ctx.services
        self.waited_s += await services.budget.admit(self.tenant, self.policy)
        self.requests += 1
        sink = None
        if self.stream:
            sink = await services.telemetry.open_stream(
                StreamId(self.ctx.agent_id, self.ctx.task_id, self.name, self.occurrence),
                incarnation=self.ctx.incarnation, restarted=self._restarted())
        try:
            answer = await send(sink.delta if sink is not None else None)
        except LlmError as error:
            await self._usage(0, 0, self.model, ERROR)
            if sink is not None:
                await sink.end(f"{type(error).__name__}: {error}")
            raise
        except BaseException as error:  # cancelled, crashed: the stream says it stopped
            if sink is not None:
                await sink.end(f"{type(error).__name__}: {error}")
            raise
        if sink is not None:
            await sink.end()
        await self._usage(*tokens(answer), OK)
        return answer

    def wait_events(self, position: int) -> list[NewEvent]:
        """``llm.budget`` when the budget held the call back: recorded with the call."""
        if not self.waited_s:
            return []
        return [NewEvent(r.LLM_BUDGET, self.ctx.module, {
            "task_id": self.ctx.task_id, "name": self.name, "occurrence": self.occurrence,
            "tenant": self.tenant, "waited_s": round(self.waited_s, 3)},
            r.position_metadata(position))]

    def _restarted(self) -> bool:
        """Whether a stream of this call may have begun before: another request of this
        call, or an earlier run of the task (a re-run after a crash, a move or a wait).
        A client then drops what it holds of the stream: never a splice of two answers."""
        return self.requests > 1 or self.ctx.incarnation > 0 or self.ctx.is_rerun

    async def _usage(self, prompt_tokens: int, completion_tokens: int, model: str,
                     outcome: str) -> None:
        ctx = self.ctx
        services = ctx.services
        record = UsageRecord(
            tenant=self.tenant, agent_id=ctx.agent_id, kind=ctx.module.removeprefix("agent."),
            task_id=ctx.task_id, name=self.name, provider=self.provider_name, model=model,
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost_usd=services.prices.cost(model, prompt_tokens, completion_tokens),
            outcome=outcome)
        try:
            await services.telemetry.usage(record)
        except Exception:  # the answer is paid for: never re-pay it for a lost record
            log.exception("task %s: usage record of llm %r not published", ctx.task_id,
                          self.name)


def budget_failure(error: Exception) -> dict[str, Any]:
    """What a ``step.failed`` of a call the budget refused records beside its error."""
    if isinstance(error, BudgetExceeded):
        return {"tenant": error.tenant, "budget_reason": error.reason}
    return {}


def provider_name(provider: Any) -> str:
    name = getattr(provider, "name", None)
    return name if isinstance(name, str) else type(provider).__name__
