"""The collector policy of the services: a higher young threshold, what exists at start
frozen; 0 leaves Python's defaults; a threshold that would collect all the time is refused."""

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
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_raises_the_young_threshold_and_keeps_the_older_ones() -> None:
    gc.set_threshold(700, 10, 10)
    policy = apply_gc_policy(5_000)
    assert gc.get_threshold() == policy.thresholds == (5_000, 10, 10)


def test_freezes_what_exists_at_start_and_only_that() -> None:
    survivor = [object()]  # a tracked container alive at start
    garbage: list[object] = []
    garbage.append(garbage)  # a cycle: garbage, collected before the freeze
    del garbage
    policy = apply_gc_policy(5_000)
    assert policy.frozen == gc.get_freeze_count() > 0
    assert not any(obj is survivor for obj in gc.get_objects())  # out of every later walk
    later = [object()]
    assert any(obj is later for obj in gc.get_objects())


def test_zero_leaves_pythons_defaults() -> None:
    gc.set_threshold(700, 10, 10)
    policy = apply_gc_policy(0)
    assert policy.thresholds == gc.get_threshold() == (700, 10, 10)
    assert policy.frozen == gc.get_freeze_count() == 0


@pytest.mark.parametrize("threshold", [1, MIN_GEN0_THRESHOLD - 1, -5])
def test_a_threshold_that_would_collect_all_the_time_is_refused(threshold: int) -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="below 100"):
        apply_gc_policy(threshold)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
