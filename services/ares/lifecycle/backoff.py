"""Resurrection backoff: the first retry at once, then exponential delays with full jitter.

``attempt`` is the 1-based number of the resurrection in the current restart window (the
guard's count of deaths, see ``guard.py``). With ``first_immediate`` attempt 1 has no delay
and attempt ``k >= 2`` is the ``n = k - 1``-th delayed attempt; without it every attempt is
delayed and ``n = k``. The delayed attempt ``n`` waits

    uniform(0, nominal(k)),   nominal(k) = min(max_s, initial_s * multiplier ** (n - 1))

so the defaults give nominal delays 0, 1, 2, 4, 8, 16, 30, 30, ... seconds. *Full* jitter
(AWS Architecture Blog, "Exponential Backoff And Jitter") spreads a fleet of agents that
died together (a lost worker, a broken dependency) over the whole interval instead of
re-synchronising them at its end, which is what plain or "equal" jitter does.

Pure: the random source is a parameter (``random.Random(seed).random`` in tests), so the
delays of a run are reproducible and events can record both the nominal and actual delay.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    initial_s: float = 1.0
    multiplier: float = 2.0
    max_s: float = 30.0
    first_immediate: bool = True

    def __post_init__(self) -> None:
        for name in ("initial_s", "multiplier", "max_s"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"backoff {name} must be a finite number, got {value!r}")
        if self.initial_s < 0 or self.max_s < 0:
            raise ValueError(f"backoff delays must be >= 0 (initial_s={self.initial_s}, "
                             f"max_s={self.max_s})")
        if self.multiplier < 1:
            raise ValueError(f"backoff multiplier must be >= 1, got {self.multiplier}")

    def nominal(self, attempt: int) -> float:
        """The delay cap of ``attempt`` before jitter (0.0 for an immediate attempt)."""
        n = self._delayed_index(attempt)
        if n == 0:
            return 0.0
        try:
            raw = self.initial_s * self.multiplier ** (n - 1)
        except OverflowError:  # float ** int overflows instead of returning inf
            return self.max_s
        return min(self.max_s, raw)

    def delay(self, attempt: int, rand: Callable[[], float]) -> float:
        """The delay before ``attempt``: ``rand() * nominal(attempt)``.

        ``rand`` returns a float in [0, 1) like ``random.random``; it is not called for an
        immediate attempt, so a seeded sequence is not shifted by one.
        """
        cap = self.nominal(attempt)
        if cap == 0.0:
            return 0.0
        r = rand()
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"rand() must return a number in [0, 1], got {r!r}")
        return r * cap

    def _delayed_index(self, attempt: int) -> int:
        """0 for an immediate attempt, else the 1-based index among delayed attempts."""
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ValueError(f"attempt must be an int >= 1, got {attempt!r}")
        return attempt - 1 if self.first_immediate else attempt


__all__ = ["BackoffPolicy"]
