"""The benchmarks' collector clock: one per process, and it counts collections' CPU time."""

from __future__ import annotations

import gc

from bench.harness import CollectorClock, Stopwatch


def test_one_clock_per_process_however_often_it_is_asked_for() -> None:
    clock = CollectorClock.installed()
    assert CollectorClock.installed() is clock
    assert sum(isinstance(c, CollectorClock) for c in gc.callbacks) == 1


def test_a_collection_shows_in_the_stopwatchs_collector_time() -> None:
    watch = Stopwatch()
    garbage = [[[i]] for i in range(50_000)]  # enough tracked objects for a measurable walk
    gc.collect()
    measured = watch.stop(len(garbage))
    assert 0 < measured.gc_s <= measured.cpu_s
