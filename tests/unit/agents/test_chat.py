"""ctx.chat, ctx.run_tools and agent_loop: recorded turns, model-chosen tools under their
effects, usage records, token streams and the fleet budget (in-memory ports)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import ares
from ares.agents import records as r
from ares.agents.errors import NonDeterminismError, StepFailed
from ares.llm.base import LlmRequestError, LlmResult
from ares.llm.chat import (
    STOP_END,
    STOP_TOOL_CALLS,
    ChatResponse,
    DeltaSink,
    ToolCallRequest,
    ToolSpec,
    user,
)
from ares.llm.telemetry import DELTA, END, ERROR, OK, RESTARTED, START, MemoryTelemetry
from ares.llm.telemetry import BudgetExceeded as OverBudget
from tests.unit.agents.support import Counter, FnAgent, Harness


class ScriptedModel:
    """Calls each offered tool once, in order, then answers; counts its requests."""

    name = "scripted"
    default_model = "scripted-1"

    def __init__(self, fail: Exception | None = None) -> None:
        self.requests: list[list[Mapping[str, Any]]] = []
        self.fail = fail

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        turn = await self.chat([user(prompt)])
        return LlmResult(turn.text, turn.prompt_tokens, turn.completion_tokens, turn.model)

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[ToolSpec] = (), model: str | None = None,
                   on_delta: DeltaSink | None = None, **params: Any) -> ChatResponse:
        self.requests.append(list(messages))
        if self.fail is not None:
            raise self.fail
        answered = {m.get("name") for m in messages if m.get("role") == "tool"}
        for spec in tools:
            if spec.name not in answered:
                call = ToolCallRequest(f"call-{spec.name}", spec.name, {"n": len(messages)})
                return ChatResponse("", (call,), 10, 5, "scripted-1", STOP_TOOL_CALLS)
        text = f"done after {len(messages)} messages"
        if on_delta is not None:
            for word in text.split(" "):
                await on_delta(word + " ")
        return ChatResponse(text, (), 20, 7, "scripted-1", STOP_END)


class Gate:
    """A budget that refuses (fail) or holds calls back for ``wait_s`` (wait)."""

    def __init__(self, over: bool = False, wait_s: float = 0.0) -> None:
        self.over = over
        self.wait_s = wait_s
        self.asked: list[tuple[str, str]] = []

    async def admit(self, tenant: str, policy: str) -> float:
        self.asked.append((tenant, policy))
        if self.over and policy == "fail":
            raise OverBudget(tenant, "1200 tokens spent of 1000 this minute")
        return self.wait_s


def harness(handler: Any, model: ScriptedModel, *, gate: Gate | None = None,
            config: Mapping[str, Any] | None = None) -> tuple[Harness, MemoryTelemetry]:
    agent = FnAgent(handler)
    agent.config.update(config or {})
    h = Harness(agent, llm=model)  # type: ignore[arg-type]
    telemetry = MemoryTelemetry()
    h.services = dataclasses.replace(h.services, telemetry=telemetry,
                                     budget=gate or Gate())
    return h, telemetry


def tools(lookup: Counter, send: Counter) -> list[ares.Tool]:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    return [ares.Tool("lookup", lookup, "reads", schema, effect="idempotent"),
            ares.Tool("send", send, "sends an e-mail", schema, effect="at_most_once")]


async def test_the_loop_runs_the_tools_the_model_picks_and_records_every_turn() -> None:
    lookup, send = Counter({"found": 1}), Counter("sent")

    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        final, conversation = await ares.agent_loop(ctx, "assist", [user("hi")],
                                                    tools(lookup, send))
        return {"text": final.text, "messages": len(conversation)}

    model = ScriptedModel()
    h, telemetry = harness(handler, model, config={"tenant": "acme"})
    outcome = await h.run(await h.assign())

    assert outcome.output == {"text": "done after 5 messages", "messages": 6}
    assert (lookup.calls, send.calls, len(model.requests)) == (1, 1, 3)
    responses = await h.sink.of_type(r.LLM_RESPONSE)
    assert [e.payload["response"]["stop_reason"] for e in responses] == \
        [STOP_TOOL_CALLS, STOP_TOOL_CALLS, STOP_END]
    assert [e.payload["response"]["tool_calls"][0]["name"]
            for e in responses[:2]] == ["lookup", "send"]
    assert [(u.tenant, u.outcome, u.tokens) for u in telemetry.usages] == \
        [("acme", OK, 15), ("acme", OK, 15), ("acme", OK, 27)]
    assert outcome.stats.llm_calls == 3
    assert outcome.stats.prompt_tokens == 40


async def test_a_rerun_pays_for_no_recorded_turn_and_sends_no_second_email() -> None:
    lookup, send = Counter({"found": 1}), Counter("sent")

    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        final, _ = await ares.agent_loop(ctx, "assist", [user("hi")], tools(lookup, send))
        return final.text

    model = ScriptedModel()
    h, _ = harness(handler, model)
    task = await h.assign()
    # Appends: turn 1, lookup, turn 2, send intent, send outcome, then turn 3: die there.
    with pytest.raises(BaseException, match="killed"):
        await h.run(task, kill_at=6)
    assert (len(model.requests), send.calls) == (3, 1)

    outcome = await h.rerun(task)
    assert outcome.output == "done after 5 messages"
    assert (len(model.requests), lookup.calls, send.calls) == (4, 1, 1)  # turn 3 only
    assert outcome.stats.reused_llm_calls == 2
    assert outcome.stats.reused_tool_calls == 2


async def test_a_different_conversation_at_a_recorded_turn_is_non_determinism() -> None:
    prompts = iter(["first", "second"])

    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        await ctx.chat("ask", [user(next(prompts))])
        raise RuntimeError("crash after the turn")

    h, _ = harness(handler, ScriptedModel())
    task = await h.assign()
    with pytest.raises(RuntimeError):
        await h.run(task)
    with pytest.raises(NonDeterminismError, match="different prompt"):
        await h.rerun(task)


async def test_a_streamed_turn_publishes_its_deltas_and_a_rerun_says_restarted() -> None:
    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        response = await ctx.chat("ask", [user("hi")], stream=True)
        return response.text

    h, telemetry = harness(handler, ScriptedModel())
    task = await h.assign()
    with pytest.raises(BaseException, match="killed"):
        await h.run(task, kill_at=1)  # the turn's record never lands
    await h.rerun(task)

    kinds = [kind for _, kind, _ in telemetry.tokens]
    assert kinds == [START, DELTA, DELTA, DELTA, DELTA, END,
                     RESTARTED, DELTA, DELTA, DELTA, DELTA, END]
    second = "".join(text for _, kind, text in telemetry.tokens[7:11])
    assert second.strip() == "done after 1 messages"
    assert {stream for stream, _, _ in telemetry.tokens} == {"t1/ask/0"}


async def test_over_budget_with_policy_fail_raises_budget_exceeded_recorded() -> None:
    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        await ctx.chat("ask", [user("hi")], budget_policy="fail")

    model = ScriptedModel()
    gate = Gate(over=True)
    h, _ = harness(handler, model, gate=gate, config={"tenant": "acme"})
    task = await h.assign()
    outcome = await h.run(task)
    assert outcome.error_type == "ares.agents.errors.BudgetExceeded"
    assert model.requests == []
    failed = (await h.sink.of_type(r.STEP_FAILED))[0].payload
    assert (failed["tenant"], failed["budget_reason"]) == \
        ("acme", "1200 tokens spent of 1000 this minute")


async def test_budget_exceeded_is_raised_again_on_replay_without_asking_the_budget() -> None:
    caught: list[str] = []

    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        try:
            await ctx.llm("ask", "hi", budget_policy="fail")
        except ares.BudgetExceeded as e:
            caught.append(e.tenant)
        raise RuntimeError("crash")

    gate = Gate(over=True)
    h, _ = harness(handler, ScriptedModel(), gate=gate)
    task = await h.assign()
    with pytest.raises(RuntimeError):
        await h.run(task)
    with pytest.raises(RuntimeError):
        await h.rerun(task)
    assert caught == ["default", "default"]
    assert len(gate.asked) == 1
    assert isinstance(ares.BudgetExceeded("t", "llm", "ask", 0, "x", "y"), StepFailed)


async def test_a_budget_wait_is_recorded_with_the_call() -> None:
    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        await ctx.llm("plain", "hi")
        await ctx.chat("turn", [user("hi")])

    h, _ = harness(handler, ScriptedModel(), gate=Gate(wait_s=1.5),
                   config={"budget_policy": "wait"})
    await h.run(await h.assign())
    waits = await h.sink.of_type(r.LLM_BUDGET)
    assert [(e.payload["name"], e.payload["waited_s"]) for e in waits] == [("plain", 1.5)]
    response = (await h.sink.of_type(r.LLM_RESPONSE))[0].payload
    assert response["budget_wait_s"] == 1.5


async def test_a_provider_refusal_is_a_failed_step_and_an_error_usage_record() -> None:
    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        await ctx.chat("ask", [user("hi")])

    h, telemetry = harness(handler, ScriptedModel(fail=LlmRequestError("400 bad", 400)))
    outcome = await h.run(await h.assign())
    assert outcome.error_type == "ares.agents.errors.StepFailed"
    assert [(u.outcome, u.tokens) for u in telemetry.usages] == [(ERROR, 0)]


async def test_a_tool_the_model_made_up_goes_back_as_an_error() -> None:
    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        made_up = ChatResponse("", (ToolCallRequest("c1", "nope", {}),), 0, 0, "m",
                               STOP_TOOL_CALLS)
        return await ctx.run_tools(made_up, [])

    h, _ = harness(handler, ScriptedModel())
    outcome = await h.run(await h.assign())
    assert outcome.output == [{"role": "tool", "tool_call_id": "c1", "name": "nope",
                               "content": '{"error": "unknown tool \'nope\'"}'}]


async def test_bad_messages_and_policies_are_refused_before_any_call() -> None:
    model = ScriptedModel()

    async def handler(task: ares.Task, ctx: ares.Context) -> Any:
        with pytest.raises(ValueError, match="role"):
            await ctx.chat("a", [{"role": "robot", "content": "x"}])
        with pytest.raises(ValueError, match="budget_policy"):
            await ctx.chat("b", [user("x")], budget_policy="sometimes")
        with pytest.raises(ValueError, match="max_turns"):
            await ares.agent_loop(ctx, "c", [user("x")], [], max_turns=0)

    h, _ = harness(handler, model)
    await h.run(await h.assign())
    assert model.requests == []
