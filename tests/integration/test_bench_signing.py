"""``bench/signing.py`` runs end to end at a tiny size: signed and unsigned appends side by
side, the same number of events each; report shape and counts, never timings."""

from __future__ import annotations

import json

from bench import signing

from ares.config import Settings
from tests.integration.test_bench_smoke import assert_section, bench_topics_left


async def test_signing_bench_appends_as_many_signed_events_as_unsigned(
        settings: Settings) -> None:
    report = await signing.run(settings, events=240, streams=12, rounds=2, partitions=3,
                               seal_events=200, verify_events=100)
    assert_section(report, "signing")
    ours, ceiling = report["ours"], report["ceiling"]
    # 12 streams of 20 steps after 5 warm-up steps, half of them signed per round.
    assert ours["events"] == ceiling["events"] == report["config"]["events_per_side"] == 120
    assert len(report["round_ratios"]) == 2
    assert report["cpu_ratio"] > 0
    cpu, seal, verify = (report["parts"][k] for k in ("cpu", "seal", "verify"))
    assert_section(cpu, "signing.cpu")
    assert cpu["ours"]["events"] == cpu["ceiling"]["events"] == 120
    assert_section(seal, "signing.seal")
    assert seal["ours"]["events"] == seal["ceiling"]["events"] == 200
    assert_section(verify, "signing.verify")
    assert verify["higher_is_better"] is False
    json.dumps(report)
    assert await bench_topics_left(settings) == []
