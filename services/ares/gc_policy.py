"""The garbage collector's policy of ares's long-running processes.

CPython collects its young generation every 700 net allocations of tracked objects. A
runtime manager under load allocates a few dozen per append (the agent's await, the sealed
``Event``, the writer's plan and outcome), so it collected every ~150 appends, and each
collection walked the whole working set of the agents in flight (~5,000 objects with 200
agents) because those objects had not died yet; the older collections that follow walked
the rest of the heap: a measurable share of every appended event (``gc_us_per_event`` of
``bench/append.py``; docs/development.md has the figure).

A higher young threshold lets most of those objects die before any collection sees them.
Reference counting still frees all acyclic garbage at once; only cycles wait longer, and a
threshold of 20,000 objects bounds that at a few MB.

Nothing is frozen here (``gc.freeze``): a partition's replay freezes and thaws the heap
around itself (``runtime_manager.replay``), and a thaw cannot tell a start-up freeze apart.
"""

from __future__ import annotations

import gc

# CPython's own default is (700, 10, 10).
DEFAULT_GEN0_THRESHOLD = 20_000
MIN_GEN0_THRESHOLD = 100


def check_gc_threshold(gen0_threshold: int) -> None:
    """ValueError unless the threshold is 0 (Python's defaults) or at least the minimum;
    ``Settings.validate`` reports it under the setting's name."""
    if gen0_threshold != 0 and gen0_threshold < MIN_GEN0_THRESHOLD:
        raise ValueError(f"0 keeps Python's default; a young-generation threshold below "
                         f"{MIN_GEN0_THRESHOLD} makes the collector run all the time "
                         f"(got {gen0_threshold})")


def apply_gc_policy(gen0_threshold: int = DEFAULT_GEN0_THRESHOLD) -> tuple[int, int, int]:
    """Raise the young-generation threshold (0 leaves Python's defaults); the thresholds
    now in force. Call once, when a process is about to serve."""
    check_gc_threshold(gen0_threshold)
    if gen0_threshold == 0:
        return gc.get_threshold()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
    return gc.get_threshold()
