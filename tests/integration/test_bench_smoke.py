"""The benchmarks run end to end at tiny sizes: report shape and counts, never timings."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncpg
from bench import append, budgets, dashboard_live, delegation, read, takeover, tokens, waits

from ares.config import Settings
from tests.support.kafka import admin_client

PARTITIONS = 3
FIGURES = ("events", "seconds", "events_per_s", "cpu_us_per_event", "cores",
           "gc_us_per_event")


def assert_section(report: dict[str, Any], name: str) -> None:
    assert report["name"] == name
    metric = report["metric"]
    assert metric in report["ours"]
    assert metric in report["ceiling"]
    assert isinstance(report["higher_is_better"], bool)
    assert isinstance(report["ratio"], float)
    assert report["ratio"] > 0
    json.dumps(report)  # what --json prints


async def bench_topics_left(settings: Settings, settle_s: float = 30.0) -> list[str]:
    """The run's benchmark topics the broker still lists, once their deletion settled:
    a deleted topic can stay in the metadata for a moment after DeleteTopics answers."""
    deadline = time.monotonic() + settle_s
    while True:
        async with admin_client(settings.kafka_bootstrap) as admin:
            topics = await admin.list_topics()
        left = [t for t in topics if t.startswith(f"{settings.topic_prefix}bench-")]
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.5)


async def test_append_bench_reports_ours_and_ceilings_for_the_same_events(
    settings: Settings,
) -> None:
    report = await append.run(settings, events=120, streams=12, rounds=2,
                              latency_samples=30, partitions=PARTITIONS)

    assert_section(report, "append")
    ours, ceiling = report["ours"], report["ceiling"]
    assert all(k in ours and k in ceiling for k in FIGURES)
    for figures in (ours, ceiling):  # the collector's share is part of the CPU time
        assert 0 <= figures["gc_us_per_event"] <= figures["cpu_us_per_event"]
    assert ours["events"] == ceiling["events"] == 120 == report["config"]["events"]
    # Round 0 runs ours first and the ceiling commits as many transactions as our writers
    # did; round 1 runs the ceiling first, with our counts of round 0 (both rounds carry
    # the same records per partition, 5 steps of the same 12 streams).
    (ours_0, ceiling_0), (ours_1, ceiling_1) = report["round_transactions"]
    assert ceiling_0 == ours_0
    assert ceiling_1 == ours_0
    assert ours["transactions"] == ours_0 + ours_1
    assert ceiling["transactions"] == ceiling_0 + ceiling_1
    assert 1 <= ours["transactions"] <= 120
    assert len(report["round_ratios"]) == 2
    assert report["round_ratio_median_by_order"] == {
        "ours_first": report["round_ratios"][0], "ceiling_first": report["round_ratios"][1]}
    assert report["target"]["ratio"] == 0.8
    assert isinstance(report["target"]["met"], bool)

    parts = report["parts"]
    assert set(parts) == {"idempotent", "latency", "codec"}
    assert_section(parts["idempotent"], "append.idempotent")
    assert parts["idempotent"]["ceiling"]["events"] == 120

    latency = parts["latency"]
    assert_section(latency, "append.latency")
    assert latency["higher_is_better"] is False
    for figures in (latency["ours"], latency["ceiling"]):
        assert figures["samples"] == 30  # warm-up appends come on top, not counted
        assert figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert isinstance(latency["goal"]["met"], bool)

    codec = parts["codec"]
    assert_section(codec, "append.codec")
    assert codec["ours"]["events"] == codec["ceiling"]["events"] == 120
    assert codec["ceiling"]["same_bytes"] is True

    assert await bench_topics_left(settings) == []


async def test_read_bench_reads_every_event_written(settings: Settings) -> None:
    report = await read.run(settings, events=300, streams=10, rounds=2, stream_reads=3,
                            transaction_size=7, partitions=PARTITIONS)

    assert_section(report, "read")
    config = report["config"]
    assert config["events"] == 300
    # Each side replayed the whole topic once per round.
    assert report["ours"]["events"] == report["ceiling"]["events"] == 2 * 300
    assert report["ceiling"]["consume_only"]["events"] == 2 * 300
    assert len(report["round_ratios"]) == 2
    # Every partition holds its records plus one commit marker per transaction of <= 7.
    assert 300 + 300 // 7 <= config["log_records"] <= 300 + 300 // 7 + 2 * PARTITIONS
    assert isinstance(report["goal"]["met"], bool)

    stream = report["parts"]["stream"]
    assert_section(stream, "read.stream")
    assert stream["ours"]["streams"] == stream["ceiling"]["streams"] == 3
    assert stream["ours"]["events"] == stream["ceiling"]["events"] == 3 * 30
    assert stream["ours"]["log_records_scanned"] >= 90

    assert await bench_topics_left(settings) == []


async def test_waits_bench_measures_waiting_agents_and_wakes_every_timer(
    settings: Settings,
) -> None:
    report = await waits.run(settings, agents=500, timers_count=500, window_start=8.0,
                             window_end=12.0, partitions=PARTITIONS, concurrency=100,
                             model_agents=100, settle_interval_s=0.5, settle_window=3,
                             settle_max_s=10.0)
    json.dumps(report)

    # Memory: RSS deltas of 500 agents are too small to be more than a shape here.
    assert report["name"] == "waits"
    assert report["higher_is_better"] is False
    assert set(report["rss"]) == {"empty", "idle", "waiting", "idle_2", "sleeping"}
    assert all(r["rss_bytes"] > 0 for r in report["rss"].values())
    assert report["ours"]["agents"] == report["ceiling"]["agents"] == 500
    assert isinstance(report["goal"]["met"], bool)
    # Every agent reached its wait, and none woke: the signal never came, the sleep is an
    # hour (the warm-up's 20 agents waited for both once).
    assert report["waits_seen"] == {"signal": 500 + 20, "timer": 500 + 20}
    assert report["woken_meanwhile"] == 0
    assert report["events"]["wait.started"] == 2 * 500 + 2 * 20
    sleeping = report["parts"]["sleeping"]
    assert sleeping["name"] == "waits.sleeping"
    assert sleeping["ours"]["agents"] == 500
    for model in (report["model"], sleeping["model"]):
        assert model["agents"] == 100
        assert model["idle_bytes"] > 0
        assert model["extra_bytes"] > 0
        assert model["top_sites"]

    timers = report["parts"]["timers"]
    assert_section(timers, "waits.timers")
    assert timers["recorded"] == timers["ours"]["completed"] == 500
    assert timers["ours"]["samples"] == timers["ceiling"]["samples"] == 500
    assert timers["outcomes"] == {"elapsed": 500}
    assert timers["ours"]["early"] == 0  # never before its recorded deadline
    assert 1 <= timers["ours"]["peak_pending"] <= 500
    assert isinstance(timers["goal"]["met"], bool)

    assert await bench_topics_left(settings) == []


async def test_takeover_bench_wakes_every_moved_timer_and_fires_the_schedule_again(
    settings: Settings,
) -> None:
    report = await takeover.run(settings, agents=16, sleep_s=16.0, kill_after_s=4.0)

    assert_section(report, "takeover")
    assert report["higher_is_better"] is False
    moved, kept = report["agents"]["moved"], report["agents"]["kept"]
    assert moved >= kept >= 1  # the victim hosted the most sleepers; both hosted some
    assert moved + kept == 16
    assert 0 <= report["agents"]["due_in_takeover"] <= moved
    assert report["ours"]["samples"] == moved
    assert report["ceiling"]["samples"] == kept
    assert report["ours"]["early"] == 0  # never before its recorded deadline
    assert isinstance(report["goal"]["met"], bool)
    catchup = report["parts"]["catchup"]
    assert_section(catchup, "takeover.catchup")
    assert isinstance(catchup["ours"]["catchup"], bool)

    assert await bench_topics_left(settings) == []


async def test_delegation_bench_times_every_child_against_command_round_trips(
    settings: Settings,
) -> None:
    report = await delegation.run(settings, quick=True, partitions=PARTITIONS,
                                  quiet_probes=10)
    config = report["config"]
    children = config["leaders"] * config["children"]

    assert_section(report, "delegation")
    assert report["higher_is_better"] is False
    burst = report["parts"]["burst"]
    assert_section(burst, "delegation.burst")
    for phase in (report, burst):
        # Every child of every leader was dispatched once and timed on both legs.
        assert phase["dispatched"] == children
        assert phase["ours"]["children"] == phase["ours"]["samples"] == children
        resume = phase["parts"]["resume"]
        assert_section(resume, f"{phase['name']}.resume")
        assert resume["ours"]["children"] == children
        assert set(resume["ours"]["split"]) == {"report", "signal", "wake", "wake_parked",
                                                 "wake_busy"}
        assert phase["ceiling"]["samples"] >= 1  # round trips during the phase
        assert set(phase["ratios"]) >= {"dispatch_p50_over_round_trip_p50",
                                        "resume_p50_over_round_trip_p50"}
    assert report["quiet_round_trip"]["samples"] == 10
    events = report["events"]
    assert events["delegation.dispatched"] == events["delegation.reported"] == 2 * children
    assert events["wait.completed"] == 2 * children

    assert await bench_topics_left(settings) == []


async def test_dashboard_live_bench_times_each_event_to_the_sse_client_and_a_raw_consumer(
    settings: Settings, postgres_dsn: str,
) -> None:
    report = await dashboard_live.run(settings.with_overrides(postgres_dsn=postgres_dsn),
                                      agents=200, followed=5, events=30, gap_ms=5,
                                      partitions=PARTITIONS)

    assert_section(report, "dashboard_live")
    assert report["higher_is_better"] is False
    assert report["warm_up_events"] == 2 * 5  # started and a task each: not counted
    for side in (report["ours"], report["ceiling"]):
        # Every event reached both readers, and was timed from its commit and its seal.
        assert side["samples"] == 30
        assert side["missing"] == 0
        assert side["from_sealed"]["samples"] == 30
        assert side["p50_ms"] <= side["p99_ms"] <= side["max_ms"]
    assert report["goal"]["p99_ms"] == 1000.0
    assert isinstance(report["goal"]["met"], bool)

    assert await bench_topics_left(settings) == []
    conn = await asyncpg.connect(postgres_dsn)
    try:  # its projections schema dropped too
        left = await conn.fetchval("SELECT count(*) FROM information_schema.schemata "
                                   "WHERE schema_name = $1", report["config"]["schema"])
    finally:
        await conn.close()
    assert left == 0


async def test_tokens_bench_publishes_every_delta_and_usage_record_next_to_a_raw_producer(
        settings: Settings) -> None:
    report = await tokens.run(settings, agents=4, deltas=25, calls=40, partitions=PARTITIONS)

    assert_section(report, "tokens: stream deltas published to ares.tokens")
    # start + deltas + end per stream, on both sides
    assert report["ours"]["events"] == report["ceiling"]["events"] == 4 * 27
    usage = report["parts"]["usage"]
    assert_section(usage, usage["name"])
    assert usage["ours"]["events"] == usage["ceiling"]["events"] == 40
    assert await bench_topics_left(settings) == []


async def test_budgets_bench_folds_every_usage_record_next_to_a_raw_consumer(
        settings: Settings) -> None:
    report = await budgets.run(settings, records=300, tenants=7, partitions=PARTITIONS,
                               release_rounds=2, release_waiters=5)

    assert_section(report, "budget keeper: usage records folded (a restart's re-read)")
    assert report["ours"]["events"] == report["ceiling"]["events"] == 300
    release = report["parts"]["release"]
    assert_section(release, "budgets.release")
    assert release["ours"]["samples"] == 2 * 5  # every held call let through, each round
    assert release["ceiling"]["samples"] == 2
    assert await bench_topics_left(settings) == []
