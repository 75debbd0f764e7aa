"""The collector policy of the services: a higher young threshold; 0 leaves Python's
defaults; a threshold that would collect all the time is refused."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from ares.gc_policy import MIN_GEN0_THRESHOLD, apply_gc_policy


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    """The policy changes process state: every test leaves the collector as it found it."""
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)


def test_raises_the_young_threshold_and_keeps_the_older_ones() -> None:
    gc.set_threshold(700, 10, 10)
    assert apply_gc_policy(5_000) == gc.get_threshold() == (5_000, 10, 10)


def test_freezes_nothing() -> None:
    frozen = gc.get_freeze_count()
    apply_gc_policy(5_000)
    assert gc.get_freeze_count() == frozen


def test_zero_leaves_pythons_defaults() -> None:
    gc.set_threshold(700, 10, 10)
    assert apply_gc_policy(0) == gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("threshold", [1, MIN_GEN0_THRESHOLD - 1, -5])
def test_a_threshold_that_would_collect_all_the_time_is_refused(threshold: int) -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="below 100"):
        apply_gc_policy(threshold)
    assert gc.get_threshold() == before
