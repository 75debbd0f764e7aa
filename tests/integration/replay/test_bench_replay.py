"""bench/replay.py end to end at a tiny size: the report's shape and counts, never timings."""

from __future__ import annotations

import json

from bench import replay

from ares.config import Settings


async def test_the_replay_bench_reports_ours_and_ceilings_for_the_same_events(
        rp_settings: Settings) -> None:
    report = await replay.run(rp_settings, events=600, streams=30, samples=3,
                              sample_events=40, rounds=1, partitions=3)
    json.dumps(report)
    assert report["name"] == "replay"
    assert report["ours"]["events"] == report["ceiling"]["events"] == 3 * 40
    assert report["ours"]["verified"] is True
    assert report["ours"]["step_by_step"]["events"] == 3 * 40
    index = report["parts"]["index"]
    assert index["ours"]["events"] == index["ceiling"]["events"] == 3 * 40
    assert index["ceiling"]["ours_scanning"]["events"] == 3 * 40
    assert index["ours"]["index_reads"] > 0
    projector = report["parts"]["projector"]
    assert projector["ours"]["events"] == projector["ceiling"]["events"] == 600 + 120
    assert projector["ours"]["index_rows"] == 720
    for part in (report, index, projector):
        assert isinstance(part["ratio"], float)
        assert part["ratio"] > 0
