"""Backoff: first retry at once, then exponential with full jitter, capped, reproducible."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ares.lifecycle.backoff import BackoffPolicy


def never() -> float:
    raise AssertionError("rand() must not be called for an immediate attempt")


def test_nominal_delays_double_from_one_second_to_the_cap() -> None:
    policy = BackoffPolicy()
    assert [policy.nominal(a) for a in range(1, 9)] == [0, 1, 2, 4, 8, 16, 30, 30]


def test_the_first_attempt_is_immediate_and_draws_no_random_number() -> None:
    assert BackoffPolicy().delay(1, never) == 0.0


def test_without_first_immediate_every_attempt_waits() -> None:
    policy = BackoffPolicy(first_immediate=False)
    assert [policy.nominal(a) for a in range(1, 7)] == [1, 2, 4, 8, 16, 30]
    assert policy.delay(1, lambda: 0.5) == 0.5


def test_full_jitter_draws_uniformly_below_the_nominal_delay() -> None:
    policy = BackoffPolicy()
    rng = random.Random(20260301)
    for attempt in range(2, 12):
        cap = policy.nominal(attempt)
        samples = [policy.delay(attempt, rng.random) for _ in range(2000)]
        assert all(0.0 <= d <= cap for d in samples)
        # Full jitter, not "equal" jitter: the lower half of the interval is used too.
        assert min(samples) < 0.05 * cap
        assert max(samples) > 0.95 * cap
        assert abs(sum(samples) / len(samples) - cap / 2) < 0.05 * cap


def test_delays_are_reproducible_from_the_seed() -> None:
    policy = BackoffPolicy()

    def run(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [policy.delay(a, rng.random) for a in range(1, 10)]

    assert run(7) == run(7)
    assert run(7) != run(8)
    expected = random.Random(7)
    assert run(7) == [0.0] + [expected.random() * policy.nominal(a) for a in range(2, 10)]


def test_huge_attempt_numbers_stay_at_the_cap() -> None:
    policy = BackoffPolicy(multiplier=10.0)
    assert policy.nominal(10_000) == 30.0
    assert policy.delay(10_000, lambda: 1.0) == 30.0


def test_a_constant_backoff_is_multiplier_one() -> None:
    policy = BackoffPolicy(initial_s=3.0, multiplier=1.0, max_s=30.0)
    assert [policy.nominal(a) for a in range(1, 5)] == [0, 3, 3, 3]


@pytest.mark.parametrize("attempt", [0, -1, True, 1.5])
def test_attempts_are_one_based_ints(attempt: object) -> None:
    with pytest.raises(ValueError, match="attempt"):
        BackoffPolicy().nominal(attempt)  # type: ignore[arg-type]


def test_rand_must_return_a_unit_interval_number() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        BackoffPolicy().delay(3, lambda: 1.5)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"initial_s": -1.0}, ">= 0"),
    ({"max_s": -1.0}, ">= 0"),
    ({"multiplier": 0.5}, "multiplier"),
    ({"max_s": float("inf")}, "finite"),
])
def test_invalid_policies_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BackoffPolicy(**kwargs)
