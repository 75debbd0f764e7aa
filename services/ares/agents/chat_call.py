"""``ctx.chat``, ``ctx.run_tools`` and ``agent_loop``: the model picks the tools, the runtime
runs them under their declared effects.

A chat turn is a recorded llm call (one position, one occurrence of its name): one append
holds ``llm.call`` (the typed record every token tally reads: the conversation's hash as
``prompt_hash``, the assistant text as ``output``, the tokens) and ``llm.response`` (the turn
whole: tool calls, stop reason, provider, budget wait). A re-run returns the recorded turn
and never calls the provider; a different conversation at a recorded position is a
``NonDeterminismError``, as a changed prompt is for ``ctx.llm``.

The tools the model asks for run through ``ctx.tool`` with each tool's effect, so a tool the
*model* chose is at-most-once, idempotent or keyed exactly as one the handler chose.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ares.agents import records as r
from ares.agents.context import MISSING, _Exhausted
from ares.agents.errors import ToolCallFailed, ToolSkipped
from ares.agents.llm_spend import Spend, budget_failure, provider_name
from ares.agents.retry import LLM_DEFAULT_RETRY, RetryPolicy
from ares.agents.tools import Effect, Reconciler
from ares.errors import AresError
from ares.events.model import NewEvent
from ares.llm.chat import (
    ChatProvider,
    ChatResponse,
    DeltaSink,
    ToolCallRequest,
    ToolSpec,
    check_messages,
    conversation_hash,
    tool_result,
)

if TYPE_CHECKING:
    from ares.agents.context import Context
    from ares.agents.journal import RecordedCall


def _object_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call: what the model is told (name, description, JSON Schema of
    the arguments) and what ``ctx.tool`` runs, with which ``effect``.

    ``fn`` is called with the model's arguments as keyword arguments (plus
    ``idempotency_key=`` for keyed tools, as ``ctx.tool`` does)."""

    name: str
    fn: Callable[..., Any]
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=_object_schema)
    effect: Effect | str = Effect.AT_MOST_ONCE
    reconcile: Reconciler | None = None
    retry: RetryPolicy | None = None

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


class TurnLimitExceeded(AresError):
    """``agent_loop`` ran ``max_turns`` turns and the model still asked for tools."""


async def chat(ctx: Context, name: str, messages: Sequence[Mapping[str, Any]], *,
               tools: Sequence[Tool | ToolSpec], model: str | None,
               provider: ChatProvider | None, retry: RetryPolicy | None, fallback: Any,
               stream: bool, budget_policy: str | None, params: dict[str, Any]) -> ChatResponse:
    check_messages(messages)
    specs = [t.spec if isinstance(t, Tool) else t for t in tools]
    digest = conversation_hash(messages, specs, {"model": model, **params})
    position, occurrence, recorded = ctx._begin(r.LLM, name)
    if recorded is not None:
        ctx._check_prompt(recorded, position, digest)
        return _replayed(ctx, recorded)
    chosen = provider or ctx.services.llm
    if not isinstance(chosen, ChatProvider):
        raise TypeError(f"ctx.chat({name!r}): provider {type(chosen).__name__} cannot chat")
    spend = Spend(ctx, name, occurrence, provider_name=provider_name(chosen),
                  model=model or chosen.default_model, policy=budget_policy, stream=stream)

    async def send(on_delta: DeltaSink | None) -> ChatResponse:
        return await chosen.chat(list(messages), tools=specs, model=model, on_delta=on_delta,
                                 **params)

    async def once() -> ChatResponse:
        return await spend.request(send, lambda a: (a.prompt_tokens, a.completion_tokens,
                                                    a.model))

    try:
        response = await ctx._attempt(name, retry or LLM_DEFAULT_RETRY, once, (), {})
    except _Exhausted as failure:
        extra = {"model": spend.model, "prompt_hash": digest,
                 "budget_wait_s": spend.waited_s, **budget_failure(failure.error)}
        return await ctx._record_failure(r.LLM, name, occurrence, position, failure,  # type: ignore[no-any-return]
                                         _chat_fallback(fallback), extra)
    if not isinstance(response, ChatResponse):
        raise TypeError(f"{type(chosen).__name__}.chat returned {type(response).__name__}, "
                        "not a ChatResponse")
    metadata = r.position_metadata(position)
    await ctx._append([
        NewEvent(r.LLM_CALL, ctx.module, {
            "name": name, "model": response.model, "prompt_hash": digest,
            "output": response.text, "prompt_tokens": response.prompt_tokens,
            "completion_tokens": response.completion_tokens, "occurrence": occurrence,
            "task_id": ctx.task_id}, metadata),
        NewEvent(r.LLM_RESPONSE, ctx.module, {
            "task_id": ctx.task_id, "name": name, "occurrence": occurrence,
            "response": response.to_json(), "provider": spend.provider_name,
            "streamed": stream, "requests": spend.requests,
            "budget_wait_s": round(spend.waited_s, 3)}, metadata)])
    stats = ctx.stats
    stats.llm_calls += 1
    stats.prompt_tokens += response.prompt_tokens
    stats.completion_tokens += response.completion_tokens
    return response


def _replayed(ctx: Context, recorded: RecordedCall) -> ChatResponse:
    if recorded.llm is None:
        value = ctx._replay_failure(recorded)  # raises, or the recorded fallback
        return value if isinstance(value, ChatResponse) else ChatResponse.from_json(value)
    stats = ctx.stats
    stats.reused_llm_calls += 1
    stats.reused_prompt_tokens += r.int_field(recorded.llm, "prompt_tokens")
    stats.reused_completion_tokens += r.int_field(recorded.llm, "completion_tokens")
    if recorded.response is not None and isinstance(recorded.response.get("response"),
                                                    Mapping):
        return ChatResponse.from_json(recorded.response["response"])
    llm = recorded.llm  # recorded by a ctx.llm at this position: a text-only turn
    return ChatResponse(str(recorded.result), (), r.int_field(llm, "prompt_tokens"),
                        r.int_field(llm, "completion_tokens"), str(llm.get("model", "")))


def _chat_fallback(fallback: Any) -> Any:
    """A fallback turn is recorded as JSON (a ``ChatResponse`` or its JSON, or a text)."""
    if fallback is MISSING:
        return MISSING
    if isinstance(fallback, ChatResponse):
        return fallback.to_json()
    if isinstance(fallback, str):
        return ChatResponse(fallback, (), 0, 0, "fallback").to_json()
    return fallback


async def run_tools(ctx: Context, response: ChatResponse,
                    tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """Run the tool calls ``response`` asks for, in order, each through ``ctx.tool`` with its
    tool's effect; return the ``role: tool`` messages that give the results back.

    A tool the model made up, a tool that failed or was skipped becomes an error message
    for the model (it may try something else); a tool left in doubt pauses the task as
    ``ctx.tool`` does."""
    by_name = {t.name: t for t in tools}
    messages = []
    for call in response.tool_calls:
        messages.append(tool_result(call, await _run_one(ctx, call, by_name.get(call.name))))
    return messages


async def _run_one(ctx: Context, call: ToolCallRequest, tool: Tool | None) -> str:
    if tool is None:
        return json.dumps({"error": f"unknown tool {call.name!r}"})
    try:
        result = await ctx.tool(tool.name, tool.fn, effect=tool.effect,
                                reconcile=tool.reconcile, retry=tool.retry,
                                **dict(call.arguments))
    except (ToolCallFailed, ToolSkipped) as error:
        return json.dumps({"error": str(error)})
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True)


async def agent_loop(ctx: Context, name: str, messages: Sequence[Mapping[str, Any]],
                     tools: Sequence[Tool], *, max_turns: int = 8,
                     **chat_kwargs: Any) -> tuple[ChatResponse, list[dict[str, Any]]]:
    """The ReAct loop: chat, run the tools the model asks for, give their results back,
    until the model answers without tools. Returns (the final turn, the whole
    conversation). Every turn is ``ctx.chat(name, ...)`` (turn *i* is occurrence *i* of
    ``name``), every tool call a ``ctx.tool``: a re-run replays both."""
    if max_turns < 1:
        raise ValueError(f"agent_loop({name!r}): max_turns must be >= 1 (got {max_turns})")
    conversation = [dict(m) for m in messages]
    for _ in range(max_turns):
        response = await ctx.chat(name, conversation, tools=tools, **chat_kwargs)
        conversation.append(response.message())
        if not response.tool_calls:
            return response, conversation
        conversation.extend(await ctx.run_tools(response, tools))
    raise TurnLimitExceeded(f"task {ctx.task_id!r}: agent_loop {name!r} still asked for "
                            f"tools after {max_turns} turns")

