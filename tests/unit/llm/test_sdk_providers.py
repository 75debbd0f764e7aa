"""OpenAI and Anthropic through their official SDKs, over real HTTP to the local protocol
servers of tests/support/llm_servers.py (no mocks, no network): chat, tool calls,
streaming, error translation, key hygiene, settings."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ares.agents import OutcomeStatus, RetryPolicy, Task
from ares.agents.context import Context
from ares.errors import ConfigError
from ares.llm import (
    STOP_END,
    STOP_MAX_TOKENS,
    STOP_TOOL_CALLS,
    ChatProvider,
    LlmProvider,
    LlmRequestError,
    LlmUnavailableError,
    ToolSpec,
    offline_turn,
    provider_from_env,
)
from ares.llm.anthropic_provider import AnthropicProvider, to_anthropic
from ares.llm.chat import conversation_hash, system, tool_result, user
from ares.llm.openai_provider import LlmSettings, OpenAIProvider
from tests.support.llm_servers import (
    AnthropicProtocolServer,
    OpenAIProtocolServer,
    ProtocolServer,
)
from tests.unit.agents.support import FnAgent, Harness

KEY = "sk-test-SECRET-0123456789"
MODEL = "small"
LOOKUP = ToolSpec("lookup", "Find a record.", {
    "type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query", "limit"]})
CLOCK = ToolSpec("clock", "The time.")

Provider = OpenAIProvider | AnthropicProvider


@dataclass
class Api:
    server: ProtocolServer
    provider: Provider

    def other(self, **settings: Any) -> Provider:
        """Another provider of the same kind on the same server."""
        base = LlmSettings(self.server.base_url, KEY, MODEL, 5.0)
        values = {"base_url": base.base_url, "api_key": base.api_key, "model": base.model,
                  "timeout_s": base.timeout_s, **settings}
        return type(self.provider)(LlmSettings(**values))


@pytest.fixture(params=["openai", "anthropic"])
async def api(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    server: ProtocolServer
    provider: Provider
    if request.param == "openai":
        server = OpenAIProtocolServer()
        await server.start()
        provider = OpenAIProvider(LlmSettings(server.base_url, KEY, MODEL, 5.0))
    else:
        server = AnthropicProtocolServer()
        await server.start()
        provider = AnthropicProvider(LlmSettings(server.base_url, KEY, MODEL, 5.0))
    try:
        yield Api(server, provider)
    finally:
        await provider.close()
        await server.close()


async def test_providers_are_chat_providers(api: Api) -> None:
    assert isinstance(api.provider, ChatProvider)
    assert isinstance(api.provider, LlmProvider)
    assert api.provider.name == api.server.protocol
    assert api.provider.default_model == MODEL


async def test_plain_chat_and_complete(api: Api) -> None:
    conversation = [system("be brief"), user("What is a journal?")]
    response = await api.provider.chat(conversation)
    expected = offline_turn(conversation, [], MODEL)
    assert response.text == expected.text
    assert response.tool_calls == ()
    assert response.stop_reason == STOP_END
    assert (response.prompt_tokens, response.completion_tokens) == (
        expected.prompt_tokens, expected.completion_tokens)
    assert response.model == MODEL
    result = await api.provider.complete("hello")
    assert result.text == offline_turn([user("hello")], [], MODEL).text
    [first, second] = api.server.requests
    assert first.conversation_hash == conversation_hash(conversation, [], {})
    assert not first.streamed
    assert (first.status, second.status) == (200, 200)


async def test_a_tool_loop(api: Api) -> None:
    conversation: list[dict[str, Any]] = [user("find the last commit")]
    names: list[str] = []
    for _ in range(5):
        response = await api.provider.chat(conversation, tools=[LOOKUP, CLOCK])
        conversation.append(response.message())
        if response.stop_reason != STOP_TOOL_CALLS:
            break
        [call] = response.tool_calls
        names.append(call.name)
        if call.name == "lookup":
            assert isinstance(call.arguments["query"], str)
            assert isinstance(call.arguments["limit"], int)
        conversation.append(tool_result(call, f"result of {call.name}"))
    assert names == ["lookup", "clock"]
    assert response.stop_reason == STOP_END
    assert response.text
    # What the server saw is exactly our conversation (translated and back).
    assert api.server.requests[-1].conversation_hash == conversation_hash(
        conversation[:-1], [LOOKUP, CLOCK], {})


async def test_streaming(api: Api) -> None:
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    conversation = [user("stream it")]
    response = await api.provider.chat(conversation, on_delta=on_delta)
    assert len(deltas) > 1
    assert "".join(deltas) == response.text == offline_turn(conversation, [], MODEL).text
    assert response.stop_reason == STOP_END
    assert response.prompt_tokens > 0
    assert response.completion_tokens > 0
    assert api.server.requests[-1].streamed

    # A streamed tool call is put together from its pieces.
    deltas.clear()
    turn = await api.provider.chat(conversation, tools=[LOOKUP], on_delta=on_delta)
    assert deltas == []
    assert turn.stop_reason == STOP_TOOL_CALLS
    assert turn.tool_calls == offline_turn(conversation, [LOOKUP], MODEL).tool_calls
    assert turn.completion_tokens > 0


async def test_max_tokens(api: Api) -> None:
    response = await api.provider.chat([user("q")], max_tokens=2)
    assert len(response.text.split()) == 2
    assert response.stop_reason == STOP_MAX_TOKENS


async def test_rate_limited_with_retry_after(api: Api) -> None:
    api.server.fail_next(429, headers={"Retry-After": "1"})
    with pytest.raises(LlmUnavailableError, match="HTTP 429") as info:
        await api.provider.chat([user("q")])
    assert info.value.retriable
    assert info.value.retry_after_s == 1.0
    api.server.fail_next(429, headers={"retry-after-ms": "250"})
    with pytest.raises(LlmUnavailableError) as info:
        await api.provider.chat([user("q")], on_delta=_ignore)
    assert info.value.retry_after_s == 0.25
    assert (await api.provider.chat([user("q")])).text  # and then it answers


@pytest.mark.parametrize("status", [500, 502, 503, 529, 408, 409])
async def test_server_errors_are_retriable(api: Api, status: int) -> None:
    api.server.fail_next(status)
    with pytest.raises(LlmUnavailableError, match=f"HTTP {status}") as info:
        await api.provider.chat([user("q")])
    assert info.value.retry_after_s is None


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retriable_and_never_echo_the_key(
        api: Api, status: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api.server.fail_next(status, body={"error": {"type": "invalid_request_error",
                                                 "message": f"invalid key {KEY}"}})
    with pytest.raises(LlmRequestError) as info:
        await api.provider.chat([user("q")])
    assert not info.value.retriable
    assert info.value.status == status
    assert KEY not in str(info.value)
    assert "<redacted>" in str(info.value)
    assert KEY not in caplog.text
    assert KEY not in repr(api.provider)
    assert KEY not in repr(api.provider.settings)


@pytest.mark.parametrize("body", ["not json", {"choices": []}, {"nothing": 1}, [1, 2]])
async def test_unreadable_answers(api: Api, body: Any) -> None:
    api.server.malformed_next(body)
    with pytest.raises(LlmRequestError, match="answered something that is not a") as info:
        await api.provider.chat([user("q")])
    assert not info.value.retriable


async def test_unreachable_is_retriable(api: Api) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    provider = api.other(base_url=f"http://127.0.0.1:{free}/v1")
    try:
        with pytest.raises(LlmUnavailableError, match="unreachable"):
            await provider.chat([user("q")])
    finally:
        await provider.close()


async def test_a_stream_that_stalls_times_out_as_retriable(api: Api) -> None:
    api.server.stream_pause = 2.0
    provider = api.other(timeout_s=0.2)
    try:
        with pytest.raises(LlmUnavailableError, match="unreachable"):
            await provider.chat([user("q")], on_delta=_ignore)
    finally:
        api.server.stream_pause = 0.0
        await provider.close()


async def test_ctx_llm_retries_a_rate_limit_then_records_usage(api: Api) -> None:
    api.server.fail_next(429, headers={"Retry-After": "2"})

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("ask", prompt="question",
                             retry=RetryPolicy(attempts=3, initial_backoff_s=0.5))

    h = Harness(FnAgent(handler), llm=api.provider)
    outcome = await h.run(await h.assign())
    assert outcome.status is OutcomeStatus.COMPLETED
    expected = offline_turn([user("question")], [], MODEL)
    assert outcome.output == expected.text
    assert h.clock.sleeps == [2.0]  # the server's Retry-After beats the 0.5 s backoff
    [call] = await h.sink.of_type("llm.call")
    assert (call.payload["prompt_tokens"], call.payload["completion_tokens"]) == (
        expected.prompt_tokens, expected.completion_tokens)
    assert [r.status for r in api.server.requests] == [429, 200]


async def test_invalid_tool_arguments_name_the_tool() -> None:
    """A model that calls a tool with arguments that are not JSON: a request error."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"id": "c", "object": "chat.completion", "created": 0,
                                  "model": "m", "choices": [{"index": 0, "finish_reason":
                                  "tool_calls", "message": {"role": "assistant", "content": None,
                                  "tool_calls": [{"id": "t1", "type": "function", "function": {
                                      "name": "lookup", "arguments": "{not json"}}]}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    provider = OpenAIProvider(LlmSettings(str(server.make_url("/v1")), KEY, MODEL))
    try:
        with pytest.raises(LlmRequestError, match="tool 'lookup' with arguments that are not"):
            await provider.chat([user("q")], tools=[LOOKUP])
    finally:
        await provider.close()
        await server.close()


def test_anthropic_translation() -> None:
    conversation = [system("a"), system("b"), user("q"),
                    {"role": "assistant", "content": "let me look",
                     "tool_calls": [{"id": "1", "name": "x", "arguments": {"k": 1}},
                                    {"id": "2", "name": "y", "arguments": {}}]},
                    {"role": "tool", "tool_call_id": "1", "name": "x", "content": "r1"},
                    {"role": "tool", "tool_call_id": "2", "name": "y", "content": "r2"},
                    user("and?")]
    sys_text, wire = to_anthropic(conversation)
    assert sys_text == "a\n\nb"
    assert wire == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": "1", "name": "x", "input": {"k": 1}},
            {"type": "tool_use", "id": "2", "name": "y", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "1", "content": "r1"},
            {"type": "tool_result", "tool_use_id": "2", "content": "r2"},
            {"type": "text", "text": "and?"}]}]


# -- settings ----------------------------------------------------------------------------

def test_settings_from_env(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"  {KEY}\n")
    for name, cls in (("openai", OpenAIProvider), ("anthropic", AnthropicProvider)):
        provider = provider_from_env({"ARES_LLM_PROVIDER": name,
                                      "ARES_LLM_API_KEY_FILE": str(key_file)})
        assert isinstance(provider, cls)
        assert provider.settings.api_key == KEY
        assert KEY not in repr(provider)
        with pytest.raises(ConfigError, match="not both"):
            provider_from_env({"ARES_LLM_PROVIDER": name, "ARES_LLM_API_KEY": KEY,
                               "ARES_LLM_API_KEY_FILE": str(key_file)})
        with pytest.raises(ConfigError, match="cannot be read") as info:
            provider_from_env({"ARES_LLM_PROVIDER": name,
                               "ARES_LLM_API_KEY_FILE": str(tmp_path / "missing")})
        assert KEY not in str(info.value)
        with pytest.raises(ConfigError, match="no API key"):
            provider_from_env({"ARES_LLM_PROVIDER": name})
    anthropic = provider_from_env({"ARES_LLM_PROVIDER": "anthropic",
                                   "ANTHROPIC_API_KEY": KEY})
    assert isinstance(anthropic, AnthropicProvider)
    assert anthropic.settings.base_url == "https://api.anthropic.com"
    assert anthropic.default_model == "claude-3-5-haiku-latest"
    openai = provider_from_env({"ARES_LLM_PROVIDER": "openai", "OPENAI_API_KEY": KEY,
                                "ARES_LLM_MODEL": "gpt-x", "ARES_LLM_TIMEOUT_S": "7"})
    assert isinstance(openai, OpenAIProvider)
    assert (openai.default_model, openai.settings.timeout_s) == ("gpt-x", 7.0)
    # A self-hosted server without a key is fine.
    local = provider_from_env({"ARES_LLM_BASE_URL": "http://127.0.0.1:1/v1"})
    assert isinstance(local, OpenAIProvider)
    assert local.settings.api_key is None
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        provider_from_env({"ARES_LLM_PROVIDER": "openai", "ARES_LLM_API_KEY_FILE": str(empty)})


def test_a_missing_sdk_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(ConfigError, match=r"pip install 'ares-mesh\[anthropic\]'"):
        AnthropicProvider(LlmSettings("http://127.0.0.1:1", KEY, MODEL))
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ConfigError, match=r"pip install 'ares-mesh\[openai\]'"):
        provider_from_env({"ARES_LLM_BASE_URL": "http://127.0.0.1:1/v1"})


def test_importing_ares_llm_loads_no_sdk() -> None:
    import subprocess

    code = ("import sys, ares.llm; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('openai', 'anthropic', 'httpx2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


async def _ignore(_: str) -> None:
    return None
