"""The offline chat model: deterministic turns, one tool call per turn until every tool has
a result, then a final answer; streaming word by word. ``complete`` is unchanged (the demo
and the golden histories depend on its exact text)."""

from __future__ import annotations

from typing import Any

import pytest

from ares.llm import (
    STOP_END,
    STOP_MAX_TOKENS,
    STOP_TOOL_CALLS,
    ChatProvider,
    LlmRequestError,
    OfflineProvider,
    ToolSpec,
    offline_turn,
)
from ares.llm.chat import system, tool_result, user

WEATHER = ToolSpec("weather", "The forecast for a city.", {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "scale": {"type": "number"}, "hourly": {"type": "boolean"},
                   "units": {"enum": ["metric", "imperial"]},
                   "filters": {"type": "object"}, "fields": {"type": "array"},
                   "note": {"type": "string"}},
    "required": ["city", "days", "scale", "hourly", "units", "filters", "fields"]})
CLOCK = ToolSpec("clock", "The time.")


async def test_complete_is_unchanged() -> None:
    provider = OfflineProvider()
    assert await provider.complete("hello") == (await OfflineProvider().complete("hello"))
    result = await provider.complete("hello")
    assert result.text == ("Plan operator operator after plan owner stream outcome "
                           "resurrection new step checkpoint agent last kafka plan plan "
                           "snapshot summary for outcome.")
    assert (result.prompt_tokens, result.completion_tokens, result.model) == (
        1, 30, "offline-1")
    short = await provider.complete("Plan the release", model="m2", max_tokens=5)
    assert short.text == "Partition tool worker a owner."


async def test_is_a_chat_provider() -> None:
    provider = OfflineProvider(model="m")
    assert isinstance(provider, ChatProvider)
    assert (provider.name, provider.default_model) == ("offline", "m")


async def test_one_tool_call_per_turn_then_an_answer() -> None:
    provider = OfflineProvider()
    conversation: list[dict[str, Any]] = [system("be brief"), user("weather in Lyon?")]
    first = await provider.chat(conversation, tools=[WEATHER, CLOCK])
    assert first.stop_reason == STOP_TOOL_CALLS
    assert first.text == ""
    [call] = first.tool_calls
    assert call.name == "weather"
    assert call.id.startswith("call_")
    assert len(call.id) == len("call_") + 8
    int(call.id[5:], 16)
    args = call.arguments
    assert set(args) == set(WEATHER.parameters["required"])  # required properties only
    assert isinstance(args["city"], str)
    assert 1 <= len(args["city"].split()) <= 2
    assert isinstance(args["days"], int)
    assert args["days"] > 0
    assert isinstance(args["scale"], float)
    assert args["scale"] > 0
    assert isinstance(args["hourly"], bool)
    assert args["units"] in ("metric", "imperial")
    assert (args["filters"], args["fields"]) == ({}, [])

    conversation += [first.message(), tool_result(call, '{"sky": "clear"}')]
    second = await provider.chat(conversation, tools=[WEATHER, CLOCK])
    assert [c.name for c in second.tool_calls] == ["clock"]
    assert second.tool_calls[0].arguments == {}
    assert second.tool_calls[0].id != call.id

    conversation += [second.message(), tool_result(second.tool_calls[0], "noon")]
    final = await provider.chat(conversation, tools=[WEATHER, CLOCK])
    assert final.stop_reason == STOP_END
    assert final.provider_stop_reason == "stop"
    assert final.tool_calls == ()
    assert final.text.endswith(".")
    assert final.completion_tokens > 0
    assert final.prompt_tokens > 0
    assert provider.calls == 3


async def test_turns_are_deterministic_per_model_and_conversation() -> None:
    conversation = [user("weather in Lyon?")]
    a = await OfflineProvider().chat(conversation, tools=[WEATHER])
    assert a == await OfflineProvider().chat(conversation, tools=[WEATHER])
    assert a == offline_turn(conversation, [WEATHER], "offline-1")
    other_model = await OfflineProvider().chat(conversation, tools=[WEATHER], model="m2")
    assert other_model.tool_calls[0].id != a.tool_calls[0].id
    other_question = await OfflineProvider().chat([user("weather in Nice?")], tools=[WEATHER])
    assert other_question.tool_calls[0].id != a.tool_calls[0].id
    text = await OfflineProvider().chat(conversation)
    assert text == await OfflineProvider().chat(conversation)
    assert text.text != (await OfflineProvider().chat([user("other")])).text


async def test_a_tool_result_without_its_name_still_counts() -> None:
    """Wire formats do not repeat the tool's name in its result: the call id says it."""
    conversation: list[dict[str, Any]] = [user("q")]
    turn = offline_turn(conversation, [CLOCK], "m")
    result = {"role": "tool", "tool_call_id": turn.tool_calls[0].id, "content": "noon"}
    final = offline_turn([*conversation, turn.message(), result], [CLOCK], "m")
    assert final.stop_reason == STOP_END


async def test_max_tokens_cuts_the_answer() -> None:
    response = await OfflineProvider().chat([user("q")], max_tokens=2)
    assert len(response.text.split()) == 2
    assert response.stop_reason == STOP_MAX_TOKENS
    assert response.provider_stop_reason == "length"
    roomy = await OfflineProvider().chat([user("q")], max_tokens=1000)
    assert roomy.stop_reason == STOP_END


async def test_streaming_word_by_word_with_latency_spread() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    provider = OfflineProvider(latency_ms=300, sleep=sleep)
    response = await provider.chat([user("tell me")], on_delta=on_delta)
    assert len(deltas) == len(response.text.split()) > 1
    assert "".join(deltas) == response.text
    assert all(d.strip() for d in deltas)
    assert sum(slept) == pytest.approx(0.3)
    assert len(slept) == len(deltas)
    assert response == await OfflineProvider().chat([user("tell me")])

    # A tool-call turn has no text: nothing streamed, the latency paid once.
    slept.clear()
    deltas.clear()
    await provider.chat([user("tell me")], tools=[CLOCK], on_delta=on_delta)
    assert deltas == []
    assert slept == [pytest.approx(0.3)]


async def test_bad_requests() -> None:
    provider = OfflineProvider()
    with pytest.raises(LlmRequestError, match="unknown parameter"):
        await provider.chat([user("q")], top_k=3)
    with pytest.raises(LlmRequestError, match="at least one message"):
        await provider.chat([])
    with pytest.raises(LlmRequestError, match="role must be one of"):
        await provider.chat([{"role": "wizard", "content": "x"}])
