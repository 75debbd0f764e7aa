"""``bench/append_cpu.py`` (the append path's CPU without a broker, for profiling) appends
every event of its fleet through real partition writers."""

from __future__ import annotations

import asyncio
import math

from bench.append_cpu import run


def test_every_event_of_the_fleet_is_appended() -> None:
    best, held = asyncio.run(run(per_stream=9, streams=6, partitions=3))
    assert held == 9 * 6
    assert math.isfinite(best)  # a number was measured (never compared: no timing in tests)
