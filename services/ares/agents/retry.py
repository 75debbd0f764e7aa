"""Retry policies and the clock they sleep on (injected, so tests never really sleep)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Protocol

from ares.errors import TransientError


class Clock(Protocol):
    """Time as the SDK sees it: wall time for records, sleep for backoff."""

    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a step is tried and how long to wait in between.

    Only exceptions that are instances of ``retry_on`` are retried; any other exception
    fails the step at once. Delays: ``initial_backoff_s * multiplier**(n-1)`` capped at
    ``max_backoff_s``; with ``jitter`` each delay is drawn uniformly in [0, delay] (full
    jitter, for many agents hammering one rate-limited API).
    """

    attempts: int = 3
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    multiplier: float = 2.0
    retry_on: tuple[type[BaseException], ...] = field(default=(TransientError,))
    jitter: bool = False

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1 (got {self.attempts})")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("RetryPolicy backoffs must be >= 0")
        if self.multiplier < 1:
            raise ValueError(f"RetryPolicy.multiplier must be >= 1 (got {self.multiplier})")

    def retries(self, error: BaseException) -> bool:
        return isinstance(error, self.retry_on)

    def delay(self, failed_attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``failed_attempt``-th (1-based) attempt failed."""
        base = min(self.max_backoff_s,
                   self.initial_backoff_s * self.multiplier ** (failed_attempt - 1))
        if self.jitter:
            return (rng or random).uniform(0, base)
        return base


NO_RETRY = RetryPolicy(attempts=1)
# ctx.llm's default: providers fail transiently (rate limits, overloaded, timeouts).
LLM_DEFAULT_RETRY = RetryPolicy(attempts=4, initial_backoff_s=1.0, max_backoff_s=30.0,
                                jitter=True)
