"""The keeper's fold: tumbling minute windows by ``at``, UTC-day cost, usage ids once."""

from __future__ import annotations

import json

import pytest

from ares.budgets.model import BudgetLimits, BudgetState, minute_start, utc_day
from ares.budgets.windows import KEEP_MINUTES, UsageFold, assess, current, state_at
from ares.llm.telemetry import UsageRecord

T0 = 1_796_300_000.0  # 2026-12-03 12:13:20 UTC
MINUTE = minute_start(T0)


def usage(tokens: int, at: float, *, tenant: str = "acme", cost: float = 0.01,
          usage_id: str = "") -> UsageRecord:
    return UsageRecord(tenant=tenant, agent_id="a1", kind="k", task_id="t", name="n",
                       provider="offline", model="m", prompt_tokens=tokens // 2,
                       completion_tokens=tokens - tokens // 2, cost_usd=cost, at=at,
                       usage_id=usage_id)


def test_tokens_land_in_the_minute_of_their_at_not_of_their_arrival() -> None:
    fold = UsageFold()
    fold.add(usage(100, MINUTE + 5), now=MINUTE + 70)
    fold.add(usage(40, MINUTE + 65), now=MINUTE + 70)
    fold.add(usage(7, MINUTE + 59.999), now=MINUTE + 70)  # late, out of order
    assert fold.minute_tokens("acme", MINUTE + 1) == 107
    assert fold.minute_tokens("acme", MINUTE + 61) == 40
    assert fold.minute_tokens("other", MINUTE + 61) == 0


def test_a_usage_id_counts_once() -> None:
    fold = UsageFold()
    record = usage(100, T0, usage_id="u1")
    assert fold.add(record, now=T0) is True
    assert fold.add(record, now=T0 + 1) is False
    assert fold.add(usage(100, T0, usage_id="u1", tenant="acme"), now=T0) is False
    assert fold.minute_tokens("acme", T0) == 100
    assert fold.day_usd("acme", T0) == pytest.approx(0.01)
    assert fold.duplicates == 2


def test_cost_adds_up_per_utc_day() -> None:
    fold = UsageFold()
    midnight = (T0 // 86_400 + 1) * 86_400
    fold.add(usage(1, midnight - 10, cost=1.5), now=midnight + 5)
    fold.add(usage(1, midnight + 1, cost=0.25), now=midnight + 5)
    fold.add(usage(1, midnight + 2, cost=0.25), now=midnight + 5)
    assert fold.day_usd("acme", midnight + 5) == pytest.approx(0.5)
    assert fold.day_usd("acme", midnight - 1) == pytest.approx(1.5)


def test_records_older_than_yesterday_s_last_minute_are_not_counted() -> None:
    fold = UsageFold()
    assert fold.add(usage(5, T0 - 2 * 86_400), now=T0) is False
    assert fold.too_old == 1
    assert fold.tenants == {}


def test_prune_drops_old_minutes_and_days_and_their_ids() -> None:
    fold = UsageFold()
    fold.add(usage(5, MINUTE - (KEEP_MINUTES + 1) * 60, usage_id="old"), now=T0)
    fold.add(usage(6, MINUTE, usage_id="new"), now=T0)
    fold.prune(T0)
    assert sorted(fold.tenants["acme"].minutes) == [MINUTE]
    fold.prune(T0 + 3 * 86_400)
    assert fold.tenants == {}
    # The ids went with their day: the same id, a day later, is a new record.
    assert fold.add(usage(1, T0 + 3 * 86_400, usage_id="new"), now=T0 + 3 * 86_400)


def test_assess_says_which_budget_is_spent_and_why() -> None:
    limits = BudgetLimits(tokens_per_minute=100, usd_per_day=2.0)
    assert assess(limits, MINUTE, 99, "2026-12-03", 1.99) == (None, "")
    which, reason = assess(limits, MINUTE, 100, "2026-12-03", 0.0)
    assert which == "minute"
    assert "100 tokens" in reason
    assert "limit 100 tokens/minute" in reason
    which, reason = assess(limits, MINUTE, 500, "2026-12-03", 2.0)
    assert which == "day"
    assert "limit $2/day" in reason
    assert assess(BudgetLimits(), MINUTE, 10**9, "2026-12-03", 10**6) == (None, "")


def test_state_at_and_current_judge_the_windows_at_a_given_time() -> None:
    fold = UsageFold()
    fold.add(usage(150, MINUTE + 1, cost=0.5), now=MINUTE + 2)
    limits = BudgetLimits(tokens_per_minute=100, usd_per_day=10.0)
    state = state_at("acme", limits, [fold], MINUTE + 2)
    assert (state.minute_tokens, state.over, state.day) == (150, True, utc_day(T0))
    assert current(state, MINUTE + 30) is state
    later = current(state, MINUTE + 61)  # the minute ended: the budget is free again
    assert (later.minute_start, later.minute_tokens, later.over) == (MINUTE + 60, 0, False)
    assert later.day_usd == pytest.approx(0.5)


def test_states_and_limits_round_trip_through_json_and_refuse_garbage() -> None:
    state = BudgetState("acme", BudgetLimits(100, 2.5), MINUTE, 5, "2026-12-03", 0.1, False,
                        "", T0)
    assert BudgetState.decode(state.encode()) == state
    assert BudgetLimits.decode(b'{"tokens_per_minute": 7, "usd_per_day": 3}') == \
        BudgetLimits(7, 3.0)
    bad = [b"not json", b"[]", b'{"tokens_per_minute": 0}', b'{"tokens_per_minute": true}',
           b'{"usd_per_day": -1}', b'{"tokens_per_minute": 5, "x": 1}']
    for raw in bad:
        with pytest.raises(ValueError, match=r"JSON|must be|unknown"):
            BudgetLimits.decode(raw)
    broken = state.to_json()
    broken["minute_tokens"] = "5"
    with pytest.raises(ValueError, match="minute_tokens has the wrong type"):
        BudgetState.decode(json.dumps(broken).encode())
    del broken["day"]
    with pytest.raises(ValueError, match="needs 'day'"):
        BudgetState.from_json(broken)
