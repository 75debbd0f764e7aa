"""The garbage collector's policy of ares's long-running processes.

CPython collects its young generation every 700 net allocations of tracked objects. A
runtime manager under load allocates a few dozen per append (the agent's await, the sealed
``Event``, the writer's plan and outcome), so it collected every ~150 appends, and each
collection walked the whole working set of the agents in flight (~5,000 objects with 200
agents) because those objects had not died yet. With a large heap (a recovered stream table,
agents' memories) the older collections that follow walked it too: 6-17 CPU-µs per appended
event in ``bench/append.py``, about a tenth of the append path.

A higher young threshold lets most of those objects die before any collection sees them;
``gc.freeze()`` at start moves what exists then (imported modules, settings, the process's
singletons: never garbage) out of every later walk. Reference counting still frees all
acyclic garbage at once; only cycles wait longer, and a threshold of 20,000 objects bounds
that at a few MB.
"""

from __future__ import annotations

import gc
from typing import NamedTuple

# CPython's own default is (700, 10, 10).
DEFAULT_GEN0_THRESHOLD = 20_000
MIN_GEN0_THRESHOLD = 100


class GcPolicy(NamedTuple):
    """What ``apply_gc_policy`` set: the thresholds, and how many objects it froze."""

    thresholds: tuple[int, int, int]
    frozen: int


def apply_gc_policy(gen0_threshold: int = DEFAULT_GEN0_THRESHOLD) -> GcPolicy:
    """Freeze what exists now and raise the young threshold; 0 leaves Python's defaults.

    Call once, when a process has imported and configured itself and is about to serve.
    """
    if gen0_threshold == 0:
        return GcPolicy(gc.get_threshold(), 0)
    if gen0_threshold < MIN_GEN0_THRESHOLD:
        raise ValueError(f"a young-generation threshold below {MIN_GEN0_THRESHOLD} makes "
                         f"the collector run all the time (got {gen0_threshold})")
    gc.collect()  # what is garbage now is not frozen
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
    return GcPolicy(gc.get_threshold(), gc.get_freeze_count())
