"""A deterministic LLM for tests, demos and benchmarks: same prompt and model, same text;
same conversation and tools, same turn (tool calls included), so agent loops replay."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ares.events.wire.canonical import canonical_json
from ares.llm.base import LlmRequestError, LlmResult, count_tokens
from ares.llm.chat import (
    STOP_END,
    STOP_MAX_TOKENS,
    STOP_TOOL_CALLS,
    ChatResponse,
    DeltaSink,
    ToolCallRequest,
    ToolSpec,
    check_messages,
    conversation_hash,
)

_VOCABULARY = (
    "agent", "event", "stream", "replay", "kafka", "partition", "offset", "snapshot",
    "journal", "step", "token", "durable", "resume", "record", "commit", "fence", "owner",
    "state", "task", "plan", "answer", "result", "summary", "context", "history", "signal",
    "worker", "recovery", "ledger", "tool", "intent", "outcome", "the", "a", "of", "and",
    "to", "is", "in", "for", "with", "after", "before", "never", "twice", "once", "again",
    "safely", "exactly", "quickly", "every", "each", "new", "old", "first", "last",
    "checkpoint", "deterministic", "idempotent", "reconcile", "operator", "resurrection",
)

Sleep = Callable[[float], Awaitable[None]]


class OfflineProvider:
    """Output derived from SHA-256(model, prompt); tokens counted by ``count_tokens``.

    ``latency_ms`` simulates the time a real call takes (the pipeline example's step
    duration); ``max_tokens`` (a call parameter) bounds the completion length. Parameters
    other than ``max_tokens`` and ``temperature`` are rejected, like a real API would.
    """

    def __init__(self, model: str = "offline-1", latency_ms: float = 0.0,
                 sleep: Sleep = asyncio.sleep) -> None:
        if latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0 (got {latency_ms})")
        self._model = model
        self.latency_ms = latency_ms
        self._sleep = sleep
        self.calls = 0

    @property
    def name(self) -> str:
        return "offline"

    @property
    def default_model(self) -> str:
        return self._model

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[ToolSpec] = (), model: str | None = None,
                   on_delta: DeltaSink | None = None, **params: Any) -> ChatResponse:
        """One turn of ``offline_turn``; with ``on_delta`` the text arrives word by word,
        ``latency_ms`` spread over the pieces (as a streaming API would pace them)."""
        unknown = set(params) - {"max_tokens", "temperature"}
        if unknown:
            raise LlmRequestError(f"offline provider: unknown parameter(s) {sorted(unknown)}")
        try:
            check_messages(messages)
        except ValueError as e:
            raise LlmRequestError(f"offline provider: {e}") from None
        response = offline_turn(messages, tools, model or self._model, params.get("max_tokens"))
        pieces = stream_pieces(response.text) if on_delta is not None else []
        if self.latency_ms and not pieces:
            await self._sleep(self.latency_ms / 1000)
        for piece in pieces:
            if self.latency_ms:
                await self._sleep(self.latency_ms / 1000 / len(pieces))
            assert on_delta is not None
            await on_delta(piece)
        self.calls += 1
        return response

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        unknown = set(params) - {"max_tokens", "temperature"}
        if unknown:
            raise LlmRequestError(f"offline provider: unknown parameter(s) {sorted(unknown)}")
        model = model or self._model
        if self.latency_ms:
            await self._sleep(self.latency_ms / 1000)
        self.calls += 1
        text = offline_text(prompt, model, params.get("max_tokens"))
        return LlmResult(text, count_tokens(prompt), count_tokens(text), model)


def offline_text(prompt: str, model: str, max_tokens: int | None = None) -> str:
    """8 to 40 vocabulary words chosen by the digest of (model, prompt)."""
    seed = hashlib.sha256(f"{model}\0{prompt}".encode()).digest()
    length = 8 + seed[0] % 33
    if max_tokens is not None:
        length = max(1, min(length, max_tokens))
    words: list[str] = []
    block = seed
    while len(words) < length:
        block = hashlib.sha256(block).digest()
        words.extend(_VOCABULARY[b % len(_VOCABULARY)] for b in block)
    text = " ".join(words[:length])
    return text[0].upper() + text[1:] + "."


def stream_pieces(text: str) -> list[str]:
    """The text as streamed: each word with the whitespace after it (joined: the text)."""
    return re.findall(r"\s*\S+\s*|\s+", text)


def offline_turn(messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec],
                 model: str, max_tokens: int | None = None) -> ChatResponse:
    """The offline model's next turn, a pure function of (model, conversation, tools).

    It calls each tool that has no result in the conversation yet, one per turn in the
    order given, with arguments made up from the tool's schema; once every tool has a
    result it answers with ``offline_text`` of the conversation. The local protocol servers
    of the tests answer with it too, so a real SDK tool loop runs against them.
    """
    digest = conversation_hash(messages, tools, {})
    prompt = canonical_json([dict(m) for m in messages])
    prompt_tokens = sum(count_tokens(str(m.get("content") or "")) for m in messages)
    answered = _answered_tools(messages)
    for tool in tools:
        if tool.name in answered:
            continue
        seed = hashlib.sha256(f"{model}\0{digest}\0{tool.name}".encode()).digest()
        call = ToolCallRequest(f"call_{seed.hex()[:8]}", tool.name,
                               _arguments(tool.parameters, seed))
        completion = count_tokens(json.dumps(call.to_json()))
        return ChatResponse("", (call,), prompt_tokens, completion, model, STOP_TOOL_CALLS,
                            "tool_calls")
    text = offline_text(prompt, model, max_tokens)
    cut = max_tokens is not None and text != offline_text(prompt, model)
    return ChatResponse(text, (), prompt_tokens, count_tokens(text), model,
                        STOP_MAX_TOKENS if cut else STOP_END, "length" if cut else "stop")


def _answered_tools(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """Names of the tools with a result: the tool message's name, else the name of the
    call its ``tool_call_id`` answers (not every wire format repeats the name)."""
    called: dict[str, str] = {}
    answered: set[str] = set()
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                if isinstance(call, Mapping):
                    called[str(call.get("id"))] = str(call.get("name"))
        elif message.get("role") == "tool":
            name = message.get("name") or called.get(str(message.get("tool_call_id")))
            if name:
                answered.add(str(name))
    return answered


def _arguments(schema: Mapping[str, Any], seed: bytes) -> dict[str, Any]:
    """A value for each required property, drawn from ``seed``."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    arguments: dict[str, Any] = {}
    for index, name in enumerate(schema.get("required") or ()):
        spec = properties.get(name)
        spec = spec if isinstance(spec, Mapping) else {}
        block = hashlib.sha256(seed + index.to_bytes(4, "big")).digest()
        arguments[str(name)] = _value(spec, block)
    return arguments


def _value(spec: Mapping[str, Any], block: bytes) -> Any:
    enum = spec.get("enum")
    if isinstance(enum, Sequence) and not isinstance(enum, str) and enum:
        return enum[block[0] % len(enum)]
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "string":
        words = [_VOCABULARY[b % len(_VOCABULARY)] for b in block[1:3]]
        return " ".join(words[:1 + block[0] % 2])
    if kind == "integer":
        return 1 + block[0] % 20
    if kind == "number":
        return (1 + block[0] % 200) / 10
    if kind == "boolean":
        return block[0] % 2 == 0
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return None
