"""The keeper's arithmetic, pure: usage records folded into per-tenant windows.

* tokens in tumbling 60 s windows keyed by the record's ``at`` (when the provider
  answered), so a record that arrives late or out of order lands in its own window,
  not in the one that is current when it is read;
* cost in UTC-day windows, keyed the same way;
* each ``usage_id`` counts once (a record read twice, by a replay or a producer retry,
  does not count twice); ids are kept per UTC day and dropped with their day.

Time is always passed in (``now``): the fold never reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ares.budgets.model import (
    MINUTE_S,
    BudgetLimits,
    BudgetState,
    day_start,
    minute_start,
    utc_day,
)
from ares.llm.telemetry import UsageRecord

# Minute windows kept behind the current one: enough for a status that lags a little.
KEEP_MINUTES = 5
# A record from the last minute of yesterday still counts in its minute window.
DAY_GRACE_S = MINUTE_S


@dataclass(slots=True)
class TenantWindows:
    minutes: dict[int, int] = field(default_factory=dict)  # window start -> tokens
    days: dict[str, float] = field(default_factory=dict)  # UTC day -> USD


class UsageFold:
    """Folds the usage of some tenants (the keeper holds one per partition of ares.usage)."""

    def __init__(self) -> None:
        self.tenants: dict[str, TenantWindows] = {}
        self._seen: dict[str, set[str]] = {}  # UTC day of `at` -> usage ids
        self.duplicates = 0
        self.too_old = 0

    def add(self, record: UsageRecord, now: float) -> bool:
        """Count ``record``; False (not counted) for a usage id already counted, or a
        record older than anything still kept (before yesterday's last minute)."""
        if not math.isfinite(record.at) or record.at < day_start(now) - DAY_GRACE_S:
            self.too_old += 1
            return False
        day = utc_day(record.at)
        seen = self._seen.setdefault(day, set())
        if record.usage_id in seen:
            self.duplicates += 1
            return False
        seen.add(record.usage_id)
        windows = self.tenants.setdefault(record.tenant, TenantWindows())
        window = minute_start(record.at)
        windows.minutes[window] = windows.minutes.get(window, 0) + record.tokens
        windows.days[day] = windows.days.get(day, 0.0) + record.cost_usd
        return True

    def minute_tokens(self, tenant: str, now: float) -> int:
        windows = self.tenants.get(tenant)
        return 0 if windows is None else windows.minutes.get(minute_start(now), 0)

    def day_usd(self, tenant: str, now: float) -> float:
        windows = self.tenants.get(tenant)
        return 0.0 if windows is None else windows.days.get(utc_day(now), 0.0)

    def prune(self, now: float) -> None:
        """Drop minute windows older than ``KEEP_MINUTES``, days before yesterday, and
        the ids of those days (a record that old is refused by ``add`` anyway)."""
        oldest_minute = minute_start(now) - KEEP_MINUTES * MINUTE_S
        keep_days = {utc_day(now), utc_day(now - 86_400)}
        for tenant, windows in list(self.tenants.items()):
            windows.minutes = {m: t for m, t in windows.minutes.items() if m >= oldest_minute}
            windows.days = {d: c for d, c in windows.days.items() if d in keep_days}
            if not windows.minutes and not windows.days:
                del self.tenants[tenant]
        for day in [d for d in self._seen if d not in keep_days]:
            del self._seen[day]


def minute_tokens(folds: Iterable[UsageFold], tenant: str, now: float) -> int:
    return sum(f.minute_tokens(tenant, now) for f in folds)


def day_usd(folds: Iterable[UsageFold], tenant: str, now: float) -> float:
    return sum(f.day_usd(tenant, now) for f in folds)


def assess(limits: BudgetLimits, minute_start_s: int, tokens: int, day: str,
           usd: float) -> tuple[str | None, str]:
    """Which budget is spent ("minute", "day" or None) and why, in words. Spent means
    reached: at the limit, the next call would exceed it."""
    if limits.usd_per_day is not None and usd >= limits.usd_per_day:
        return "day", (f"${usd:.4f} spent on {day} UTC (limit ${limits.usd_per_day:g}/day; "
                       "the window ends at 00:00 UTC)")
    if limits.tokens_per_minute is not None and tokens >= limits.tokens_per_minute:
        start = _hhmm(minute_start_s)
        end = _hhmm(minute_start_s + MINUTE_S)
        return "minute", (f"{tokens} tokens spent in the minute {start}-{end} UTC "
                          f"(limit {limits.tokens_per_minute} tokens/minute)")
    return None, ""


def state_at(tenant: str, limits: BudgetLimits, folds: Iterable[UsageFold],
             now: float) -> BudgetState:
    """The state of ``tenant`` in the current minute and day of ``now``."""
    folds = list(folds)
    window, day = minute_start(now), utc_day(now)
    tokens, usd = minute_tokens(folds, tenant, now), day_usd(folds, tenant, now)
    which, reason = assess(limits, window, tokens, day, usd)
    return BudgetState(tenant=tenant, limits=limits, minute_start=window,
                       minute_tokens=tokens, day=day, day_usd=round(usd, 9),
                       over=which is not None, reason=reason, updated_at=now)


def current(state: BudgetState, now: float) -> BudgetState:
    """``state`` as it stands at ``now``: a past minute or day window has ended, so what
    was spent in it no longer counts (a reader needs no fresh record to see that)."""
    window, day = minute_start(now), utc_day(now)
    if state.minute_start == window and state.day == day:
        return state
    tokens = state.minute_tokens if state.minute_start == window else 0
    usd = state.day_usd if state.day == day else 0.0
    which, reason = assess(state.limits, window, tokens, day, usd)
    return BudgetState(tenant=state.tenant, limits=state.limits, minute_start=window,
                       minute_tokens=tokens, day=day, day_usd=usd, over=which is not None,
                       reason=reason, updated_at=state.updated_at)


def _hhmm(epoch_s: int) -> str:
    seconds = epoch_s % 86_400
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
