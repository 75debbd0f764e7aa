"""bench/scaling.py end to end at tiny sizes: the report's shape, and that every step ran
(members changed, partitions moved); never a timing."""

from __future__ import annotations

import json

from bench import scaling

from ares.config import Settings
from tests.integration.test_bench_smoke import assert_section, bench_topics_left

PARTITIONS = 6


async def test_scaling_bench_moves_partitions_through_every_step(settings: Settings) -> None:
    report = await scaling.run(settings, agents=24, partitions=PARTITIONS, initial=2, add=1,
                               remove="3", kill="1", step_ms=300, steady_s=2.0,
                               observe_s=2.0, session_timeout_ms=6000, concurrency=24)
    json.dumps(report)

    assert_section(report, "scaling")
    assert report["higher_is_better"] is False
    assert report["ours"]["agents"] == 24
    assert report["ceiling"]["records"] > 0  # the raw group consumed its stream
    members = {"scale_out": (["sc-w1", "sc-w2"], ["sc-w1", "sc-w2", "sc-w3"]),
               "scale_in": (["sc-w1", "sc-w2", "sc-w3"], ["sc-w1", "sc-w2"]),
               "kill": (["sc-w1", "sc-w2"], ["sc-w2"])}
    assert set(report["parts"]) == set(members)
    for name, (before, after) in members.items():
        part = report["parts"][name]
        assert_section(part, f"scaling.{name}")
        for side in ("ours", "ceiling"):  # the same steps, ours and the raw group
            figures = part[side]
            assert (figures["members_before"], figures["members_after"]) == (before, after)
            assert figures["partitions_moved"] >= 1
            assert figures["partitions_moved"] + figures["partitions_unmoved"] == PARTITIONS
            assert figures["rebalance_ms"] > 0
            assert set(figures) >= {"moved", "unmoved", "steady_gap", "stall_p99_ms"}
        # every agent on a moved or unmoved partition has a stall figure
        ours = part["ours"]
        assert ours["moved"]["samples"] + ours["unmoved"]["samples"] == 24
    # sc-w3 handed its agents off; sc-w1's were resurrected by the survivor
    assert report["ours"]["handed_off"] >= 1
    assert report["ours"]["resurrected"] >= 1

    assert await bench_topics_left(settings) == []
