"""``KafkaBudgetView.admit`` on states put in its dict (the Kafka side is integration)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ares.budgets.model import BudgetLimits, BudgetState, minute_start, utc_day
from ares.budgets.view import KafkaBudgetView, NotingTelemetry
from ares.config import Settings
from ares.llm.telemetry import FAIL, WAIT, BudgetExceeded, MemoryTelemetry, UsageRecord
from ares.tasks import wait_for
from ares.topics import load_topics


def view_at(clock: list[float]) -> KafkaBudgetView:
    settings = Settings()
    return KafkaBudgetView(settings, load_topics(settings), clock=lambda: clock[0])


def over_minute(now: float, tokens: int = 120) -> BudgetState:
    return BudgetState("acme", BudgetLimits(tokens_per_minute=100), minute_start(now), tokens,
                       utc_day(now), 0.0, True, f"{tokens} tokens spent", now)


async def test_within_budget_or_unknown_tenant_is_admitted_at_once() -> None:
    view = view_at([time.time()])
    assert await view.admit("nobody", WAIT) == 0.0
    assert await view.admit("nobody", FAIL) == 0.0
    with pytest.raises(ValueError, match="policy"):
        await view.admit("nobody", "later")


async def test_fail_raises_with_the_reason() -> None:
    now = time.time()
    view = view_at([now])
    view.states["acme"] = over_minute(now)
    with pytest.raises(BudgetExceeded, match="120 tokens spent"):
        await view.admit("acme", FAIL)


async def test_wait_sleeps_until_the_minute_window_ends() -> None:
    real = time.time()
    clock = [minute_start(real) + 59.8]  # 0.2 s before the window ends
    view = view_at(clock)
    view.states["acme"] = over_minute(clock[0])

    async def tick() -> None:  # the clock follows real time
        start = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            clock[0] = minute_start(real) + 59.8 + time.monotonic() - start

    ticking = asyncio.create_task(tick())
    try:
        waited = await wait_for(view.admit("acme", WAIT), 5)
        released_at = clock[0]
    finally:
        ticking.cancel()
    # Held until the view's clock left the minute window, then let through.
    assert released_at >= minute_start(real) + 60
    assert waited > 0
    assert view.waits == 1


async def test_a_waiter_is_woken_by_a_new_state() -> None:
    now = time.time()
    view = view_at([now])
    day_over = BudgetState("acme", BudgetLimits(usd_per_day=1.0), minute_start(now), 0,
                           utc_day(now), 1.5, True, "$1.5 spent", now)
    view.states["acme"] = day_over
    waiter = asyncio.create_task(view.admit("acme", WAIT))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    view.states["acme"] = BudgetState("acme", BudgetLimits(usd_per_day=5.0),
                                      minute_start(now), 0, utc_day(now), 1.5, False, "", now)
    view._changed.set()  # what a record from ares.budgets does
    assert await wait_for(waiter, 2) > 0.05


async def test_this_runtime_s_own_spending_counts_before_the_keeper_has_it() -> None:
    now = time.time()
    clock = [now]
    view = view_at(clock)
    view.states["acme"] = BudgetState("acme", BudgetLimits(tokens_per_minute=100),
                                      minute_start(now), 60, utc_day(now), 0.0, False, "",
                                      now - 1)
    inner = MemoryTelemetry()
    noting = NotingTelemetry(inner, view)
    # Answered before the keeper's state: already in it, not added again.
    await noting.usage(UsageRecord("acme", "a1", "k", "t", "n", "p", "m", 20, 0, 0.0,
                                   at=now - 2))
    assert await view.admit("acme", FAIL) == 0.0
    state = view.state("acme")
    assert state is not None
    assert state.minute_tokens == 60
    # Answered after it: counted here at once, and it reaches the limit.
    await noting.usage(UsageRecord("acme", "a1", "k", "t", "n", "p", "m", 30, 10, 0.0,
                                   at=now - 0.5))
    assert len(inner.usages) == 2  # forwarded to the runtime's telemetry all the same
    with pytest.raises(BudgetExceeded, match="100 tokens spent"):
        await view.admit("acme", FAIL)
