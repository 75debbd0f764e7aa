"""A deterministic LLM for tests, demos and benchmarks: same prompt and model, same text."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from ares.llm.base import LlmRequestError, LlmResult, count_tokens

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
    def default_model(self) -> str:
        return self._model

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
