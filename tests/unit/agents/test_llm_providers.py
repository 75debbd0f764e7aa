"""LLM providers: the offline one is deterministic; the OpenAI one (the official SDK) is
tested against a local aiohttp server with scripted answers (no external network) for the
exact wire request, error translation and key hygiene. tests/unit/llm covers chat, tools,
streaming and Anthropic against the protocol servers of tests/support/llm_servers.py."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ares.agents import OutcomeStatus, RetryPolicy, Task
from ares.agents.context import Context
from ares.errors import ConfigError
from ares.llm import (
    LlmRequestError,
    LlmUnavailableError,
    OfflineProvider,
    count_tokens,
    provider_from_env,
)
from ares.llm.openai_provider import LlmSettings, OpenAIProvider
from tests.unit.agents.support import FnAgent, Harness

KEY = "sk-test-SECRET-0123456789"


# -- offline ---------------------------------------------------------------------------

async def test_offline_provider_is_deterministic_per_prompt_and_model() -> None:
    provider = OfflineProvider()
    a = await provider.complete("hello")
    assert a == await OfflineProvider().complete("hello")
    assert a.text != (await provider.complete("hello!")).text
    assert a.text != (await provider.complete("hello", model="offline-2")).text
    assert a.prompt_tokens == count_tokens("hello") == 1
    assert a.completion_tokens == count_tokens(a.text)
    assert a.model == "offline-1"


async def test_offline_provider_latency_and_params() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    provider = OfflineProvider(latency_ms=250, sleep=sleep)
    result = await provider.complete("hi", max_tokens=3, temperature=0)
    assert slept == [0.25]
    assert len(result.text.split()) == 3
    with pytest.raises(LlmRequestError, match="unknown parameter"):
        await provider.complete("hi", top_k=3)
    with pytest.raises(ValueError, match="latency_ms"):
        OfflineProvider(latency_ms=-1)


def test_count_tokens_approximates_bpe() -> None:
    assert count_tokens("") == 0
    assert count_tokens("Say hello, world!") == 5
    assert count_tokens("internationalization") == 4  # long words split
    assert count_tokens("1234567") == 3  # digits in groups of 3
    assert count_tokens("a\n\nb") == 3
    prose = "The runtime replays the journal after a crash, so no token is paid twice. " * 20
    assert len(prose) / 5 < count_tokens(prose) < len(prose) / 3  # ~4 characters per token


def test_provider_from_env() -> None:
    assert isinstance(provider_from_env({}), OfflineProvider)
    assert provider_from_env({"ARES_LLM_MODEL": "m"}).default_model == "m"
    http = provider_from_env({"ARES_LLM_BASE_URL": "http://127.0.0.1:1/v1",
                              "ARES_LLM_API_KEY": KEY, "ARES_LLM_MODEL": "small"})
    assert isinstance(http, OpenAIProvider)
    assert http.default_model == "small"
    assert KEY not in repr(http)
    with pytest.raises(ConfigError,
                       match="ARES_LLM_PROVIDER must be one of offline, openai, anthropic"):
        provider_from_env({"ARES_LLM_PROVIDER": "magic"})
    # The official endpoint by default, which needs a key.
    with pytest.raises(ConfigError, match=r"no API key for https://api\.openai\.com/v1"):
        provider_from_env({"ARES_LLM_PROVIDER": "openai"})
    official = provider_from_env({"ARES_LLM_PROVIDER": "openai", "OPENAI_API_KEY": KEY})
    assert isinstance(official, OpenAIProvider)
    assert official.settings.base_url == "https://api.openai.com/v1"
    with pytest.raises(ConfigError, match="must start with http"):
        provider_from_env({"ARES_LLM_BASE_URL": "api.example.com"})
    with pytest.raises(ConfigError, match="ARES_LLM_TIMEOUT_S"):
        LlmSettings.from_env({"ARES_LLM_BASE_URL": "http://x", "ARES_LLM_TIMEOUT_S": "soon"})
    assert KEY not in repr(LlmSettings("http://x", KEY))


# -- OpenAI through its SDK, against scripted answers -----------------------------------

@dataclass
class FakeApi:
    """Scripted answers of a chat-completions endpoint; records the requests."""

    script: list[tuple[int, Any, dict[str, str]]] = field(default_factory=list)
    requests: list[tuple[dict[str, Any], dict[str, str]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((await request.json(), dict(request.headers)))
        status, body, headers = self.script.pop(0) if self.script else (200, _ok("hi"), {})
        text = body if isinstance(body, str) else json.dumps(body)
        return web.Response(status=status, text=text, headers=headers,
                            content_type="application/json")


def _ok(text: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> dict[str, Any]:
    return {"id": "c1", "model": "small-2024", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text},
         "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeApi, str]]:
    fake = FakeApi()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield fake, str(server.make_url("/v1"))
    finally:
        await server.close()


def _provider(base_url: str, timeout_s: float = 5.0) -> OpenAIProvider:
    return OpenAIProvider(LlmSettings(base_url, KEY, "small", timeout_s))


async def test_chat_completion_round_trip(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.script.append((200, _ok("Bonjour"), {}))
    provider = _provider(url)
    try:
        result = await provider.complete("Say hi in French", temperature=0.2)
    finally:
        await provider.close()
    assert (result.text, result.prompt_tokens, result.completion_tokens, result.model) == (
        "Bonjour", 11, 7, "small-2024")
    body, headers = fake.requests[0]
    assert body == {"model": "small", "temperature": 0.2,
                    "messages": [{"role": "user", "content": "Say hi in French"}]}
    assert headers["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(("status", "headers", "retry_after"), [
    (429, {"Retry-After": "3"}, 3.0), (503, {}, None), (500, {"Retry-After": "soon"}, None),
    (408, {}, None),
])
async def test_retriable_http_errors(api: tuple[FakeApi, str], status: int,
                                     headers: dict[str, str],
                                     retry_after: float | None) -> None:
    fake, url = api
    fake.script.append((status, {"error": {"message": "slow down"}}, headers))
    provider = _provider(url)
    try:
        with pytest.raises(LlmUnavailableError, match=f"HTTP {status}") as info:
            await provider.complete("x")
    finally:
        await provider.close()
    assert info.value.retriable
    assert info.value.retry_after_s == retry_after


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retriable_and_never_echo_the_key(
        api: tuple[FakeApi, str], status: int, caplog: pytest.LogCaptureFixture) -> None:
    fake, url = api
    fake.script.append((status, {"error": {"message": f"invalid key {KEY}"}}, {}))
    provider = _provider(url)
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(LlmRequestError) as info:
            await provider.complete("x")
    finally:
        await provider.close()
    assert not info.value.retriable
    assert info.value.status == status
    assert KEY not in str(info.value)
    assert "<redacted>" in str(info.value)
    assert KEY not in caplog.text


@pytest.mark.parametrize("body", ["not json", {"choices": []}, {"nothing": 1}])
async def test_unreadable_answers(api: tuple[FakeApi, str], body: Any) -> None:
    fake, url = api
    fake.script.append((200, body, {}))
    provider = _provider(url)
    try:
        with pytest.raises(LlmRequestError, match="not a chat completion"):
            await provider.complete("x")
    finally:
        await provider.close()


async def test_unreachable_and_timeouts_are_retriable(api: tuple[FakeApi, str]) -> None:
    _, _url = api
    # A port nobody listens on (the test server's port + a closed one is not guaranteed:
    # bind and close a socket to get a free one).
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    provider = _provider(f"http://127.0.0.1:{free}/v1")
    try:
        with pytest.raises(LlmUnavailableError, match="unreachable"):
            await provider.complete("x")
    finally:
        await provider.close()


async def test_a_slow_server_times_out_as_retriable() -> None:
    import asyncio

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.json_response(_ok("late"))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    provider = _provider(str(server.make_url("/v1")), timeout_s=0.05)
    try:
        with pytest.raises(LlmUnavailableError, match=r"unreachable: .*Timeout"):
            await provider.complete("x")
    finally:
        await provider.close()
        await server.close()


async def test_ctx_llm_retries_a_rate_limit_then_records_usage(
        api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.script += [(429, {"error": "rate"}, {"Retry-After": "2"}),
                    (200, _ok("answer", 30, 5), {})]
    provider = _provider(url)

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.llm("ask", prompt="question",
                             retry=RetryPolicy(attempts=3, initial_backoff_s=0.5))

    h = Harness(FnAgent(handler), llm=provider)
    try:
        outcome = await h.run(await h.assign())
    finally:
        await provider.close()
    assert outcome.status is OutcomeStatus.COMPLETED
    assert outcome.output == "answer"
    assert h.clock.sleeps == [2.0]  # the server's Retry-After beats the 0.5 s backoff
    [call] = await h.sink.of_type("llm.call")
    assert (call.payload["prompt_tokens"], call.payload["completion_tokens"]) == (30, 5)
    assert call.payload["model"] == "small-2024"
