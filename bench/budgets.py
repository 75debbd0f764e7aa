"""Budget keeper throughput: usage records folded per second, as at a restart.

Run alone: ``python bench/budgets.py [--records N] [--tenants T] [--partitions P]
[--release-rounds R] [--release-waiters W] [--json]``.

``--records`` usage records of ``--tenants`` tenants (stamped now, JSON as the runtime's
telemetry writes them) are produced to an ``ares.usage`` of the run's own topics first.
Then a ``BudgetKeeper`` (the service of ``ares run budget-keeper``, in this process)
starts and re-reads them: from its start until every partition is caught up (``ready``)
it decodes, validates, deduplicates and folds each record: records/s is its recovery
throughput, and also the most usage a keeper follows live. Ceiling: a raw aiokafka
consumer reading the same records and ``json.loads``-ing each value.

Part ``budgets.release`` (bench/budget_release.py): calls held by an exhausted budget, the
tenant's limit raised: how soon each goes, against a raw read of the same limits record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from ares.budgets.keeper import BudgetKeeper
from ares.config import Settings
from ares.llm.telemetry import UsageRecord
from ares.topics import USAGE, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/budgets.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.budget_release import release
from bench.harness import (
    Section,
    Stopwatch,
    bench_plan,
    bench_settings,
    cli,
    section,
    start_producer,
)

RAW_IDLE_S = 60.0  # the broker answered nothing new this long: the records are not there


async def run(settings: Settings, records: int = 200_000, tenants: int = 1000,
              partitions: int = 4, release_rounds: int = 5,
              release_waiters: int = 50) -> Section:
    settings = bench_settings(settings)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    try:
        topic = plan.name(USAGE)
        await _produce(settings, topic, records, tenants)
        ceiling = await _raw(settings, topic, partitions, records)
        ours = await _keeper(settings, plan, records)
        held, raw_trip = await release(settings, plan, rounds=release_rounds,
                                       waiters=release_waiters)
    finally:
        await delete_topics(plan, settings)
    report = section("budget keeper: usage records folded (a restart's re-read)",
                     "events_per_s", ours, ceiling, records=records, tenants=tenants,
                     partitions=partitions)
    report["parts"] = {"release": section(
        "budgets.release", "p99_ms", held, raw_trip, higher_is_better=False,
        what="calls held by an exhausted budget: the raised limit written -> each call let "
             "through by the runtime's view; ceiling: the same limits record produced -> "
             "read by a raw consumer")}
    return report


async def _produce(settings: Settings, topic: str, records: int, tenants: int) -> None:
    rng = random.Random(1)
    producer = await start_producer(settings, linger_ms=20)
    try:
        now = time.time()
        for i in range(records):
            tenant = f"tenant-{rng.randrange(tenants):04d}"
            usage = UsageRecord(tenant=tenant, agent_id=f"agent-{i % 5000}", kind="bench",
                                task_id="t", name="call", provider="offline",
                                model="offline-1", prompt_tokens=rng.randint(10, 400),
                                completion_tokens=rng.randint(10, 400),
                                cost_usd=rng.randint(1, 100) / 10_000, at=now)
            await producer.send(topic, json.dumps(usage.to_json()).encode(),
                                key=tenant.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def _raw(settings: Settings, topic: str, partitions: int,
               records: int) -> dict[str, object]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                enable_auto_commit=False, max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        watch = Stopwatch()
        seen = 0
        idle_since = time.monotonic()
        while seen < records:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            if batch:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > RAW_IDLE_S:
                raise RuntimeError(f"the raw consumer read {seen} of {records} records of "
                                   f"{topic}, then nothing for {RAW_IDLE_S:.0f} s")
            for found in batch.values():
                for record in found:
                    json.loads(record.value)
                seen += len(found)
        return watch.stop(seen).to_dict()
    finally:
        await consumer.stop()


async def _keeper(settings: Settings, plan: object, records: int) -> dict[str, object]:
    keeper = BudgetKeeper(settings, plan)  # type: ignore[arg-type]
    watch = Stopwatch()
    await keeper.start()
    try:
        while not keeper.ready:
            if keeper.ended:  # a crashed loop never becomes ready: say why, do not hang
                raise RuntimeError(f"the budget keeper ended before it was ready: "
                                   f"{keeper.error!r}")
            await asyncio.sleep(0.005)
        measured = watch.stop(keeper.folded)
    finally:
        await keeper.stop()
    assert keeper.folded == records, (keeper.folded, records)
    return measured.to_dict()


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--release-rounds", type=int, default=5,
                        help="rounds of the release part (a tenant over, its limit raised)")
    parser.add_argument("--release-waiters", type=int, default=50,
                        help="calls held in each round")


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    cli("budget keeper throughput", run, _arguments)
