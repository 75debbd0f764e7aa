"""Replay benchmark: the replay reader against raw consume + decode, in the same run.

Run alone: ``python bench/replay.py [--events N] [--streams K] [--samples S] [--json]``.

The topic holds a fleet's log: N events of K streams interleaved round robin (agents
stepping together), and in the middle of it S sample streams of ``--sample-events`` each,
every one written in a burst (an agent working through a task). A projector then indexes
the whole topic into PostgreSQL (timed: the **projector** part).

* **replay** (headline): ``ReplaySession`` replays each sample stream from its first event
  to its last — reads through the stream index, SHA-256 chain verification and the
  lifecycle fold included; step by step (a state per event) shown beside — vs a raw
  aiokafka consumer that is told where the stream lies (seek to its first offset, consume
  to its last, key filter, fastavro decode): the least work that yields the same events.
* **index**: reading one stream among many — ``KafkaStreamReader.read`` through the index
  vs the best a reader without an index can do: a raw scan of the partition from its
  start with a key filter and decode. Our own scanning fallback (PostgreSQL down) is shown
  next to it. A ratio above 1 is the index paying for itself.
* **projector**: events projected into PostgreSQL per second (rows and offsets in one
  transaction per batch) vs raw consume + decode of the whole topic.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from fastavro import schemaless_reader

from ares.config import Settings
from ares.events.kafka.reader import new_consumer
from ares.events.wire.codec import HEADER_SIZE, default_codec
from ares.events.wire.schemas import EVENT
from ares.replay_reader.kafka_source import KafkaStreamReader
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projector import Projector
from ares.replay_reader.session import ReplaySession

if __package__ in (None, ""):  # python bench/replay.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    Measurement,
    Record,
    Section,
    Stopwatch,
    bench_settings,
    bench_topics,
    by_partition,
    chunks,
    cli,
    combine,
    events_topic_configs,
    interleave,
    machine,
    produce_transactions,
    rate_ratios,
    seal_all,
    section,
    settled_end_offsets,
    start_producer,
    step_events,
    stream_ids,
)
from bench.read import SCAN_FETCH_MAX_WAIT_MS, consume

TRANSACTION_SIZE = 20


async def run(settings: Settings, *, events: int = 100_000, streams: int = 1000,
              samples: int = 10, sample_events: int = 500, rounds: int = 2,
              partitions: int | None = None) -> Section:
    """The ``replay`` report section (a topic and a PostgreSQL schema of its own, dropped
    at the end)."""
    settings = bench_settings(settings)
    partitions = partitions or events_topic_configs(settings)[0]
    per_stream = max(1, events // streams)
    fleet = seal_all(step_events(stream_ids(streams), per_stream), partitions)
    bursts = seal_all(step_events(stream_ids(samples, "sample"), sample_events), partitions)
    topic = settings.topic("ares.events")
    schema = f"bench_{settings.topic_prefix.strip('.').replace('-', '_').replace('.', '_')}"
    store = ProjectionStore(settings.postgres_dsn, schema, events_topic=topic)
    async with bench_topics(settings, [topic], partitions):
        first, last = await populate(settings, topic, fleet, bursts, partitions)
        ends = await settled_end_offsets(settings, topic, partitions)
        try:
            projector = await measure_projector(settings, store, topic, partitions)
            indexed = await KafkaStreamReader.open(settings, topic, store)
            scanning = await KafkaStreamReader.open(settings, topic, None)
            try:
                replay = await measure_replay(settings, indexed, list(bursts), first, last,
                                              rounds)
                index = await measure_index(settings, indexed, scanning, list(bursts), rounds)
            finally:
                await indexed.close()
                await scanning.close()
        finally:
            await store.drop()
            await store.close()
    total = streams * per_stream + samples * sample_events
    replay["config"] = {"events": total, "streams": streams + samples,
                        "partitions": partitions, "samples": samples,
                        "sample_events": sample_events, "rounds": rounds,
                        "log_records": sum(ends.values())}
    replay["machine"] = machine()
    replay["parts"] = {"index": index, "projector": projector}
    return replay


async def populate(settings: Settings, topic: str, fleet: Mapping[str, Sequence[Record]],
                   bursts: Mapping[str, Sequence[Record]],
                   partitions: int) -> tuple[dict[str, int], dict[str, int]]:
    """The fleet interleaved, each sample stream as one burst in the middle of it; the
    first and last offset of every sample stream."""
    mixed = interleave(fleet)
    half = len(mixed) // 2
    ordered = [*mixed[:half], *(r for rs in bursts.values() for r in rs), *mixed[half:]]
    producers = [await start_producer(settings, transactional_id=f"{topic}.fill-{p}")
                 for p in range(partitions)]
    try:
        await asyncio.gather(*(
            produce_transactions(producer, topic,
                                 chunks(records, max(1, len(records) // TRANSACTION_SIZE)))
            for producer, records in zip(producers, by_partition(ordered, partitions),
                                         strict=True)))
    finally:
        for producer in producers:
            await producer.stop()
    return await _bounds(settings, topic, list(bursts), partitions)


async def _bounds(settings: Settings, topic: str, sample: Sequence[str],
                  partitions: int) -> tuple[dict[str, int], dict[str, int]]:
    """First and last offset of each sample stream (one scan: not timed)."""
    wanted = {s.encode() for s in sample}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    consumer = new_consumer(settings, fetch_max_wait_ms=SCAN_FETCH_MAX_WAIT_MS)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        pending = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
        while pending:
            for tp, records in (await consumer.getmany(*pending, timeout_ms=500)).items():
                for r in records:
                    if r.key in wanted:
                        first.setdefault(r.key.decode(), r.offset)
                        last[r.key.decode()] = r.offset
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
    finally:
        await consumer.stop()
    return first, last


async def measure_projector(settings: Settings, store: ProjectionStore, topic: str,
                            partitions: int) -> Section:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    await consume(settings, tps, decode=False)  # warm-up: page cache, connections
    ceiling = await consume(settings, tps, decode=True)
    projector = Projector(settings, store, topic, None)
    watch = Stopwatch()
    await projector.run(until_caught_up=True)
    ours = watch.stop(projector.projected)
    conn = await asyncpg.connect(settings.postgres_dsn)
    try:
        rows = await conn.fetchval(f'SELECT count(*) FROM "{store.schema}".stream_index')
    finally:
        await conn.close()
    return section("replay.projector", "events_per_s", ours.to_dict(index_rows=rows),
                   ceiling.to_dict(),
                   what="events projected into PostgreSQL (index, streams, rows and offsets "
                        "in one transaction per batch) vs raw consume + fastavro decode")


async def measure_replay(settings: Settings, reader: KafkaStreamReader,
                         sample: Sequence[str], first: Mapping[str, int],
                         last: Mapping[str, int], rounds: int) -> Section:
    schema = default_codec().schemas.get(EVENT).parsed
    consumer = new_consumer(settings, fetch_max_wait_ms=SCAN_FETCH_MAX_WAIT_MS)
    await consumer.start()
    ours_runs: list[Measurement] = []
    raw_runs: list[Measurement] = []
    step_runs: list[Measurement] = []
    verified = True
    try:
        for _ in range(rounds):
            watch = Stopwatch()
            count = 0
            for stream_id in sample:
                session = await ReplaySession.open(reader, stream_id)
                await session.step_to(session.expected_total)
                count += session.position
                verified = verified and session.failure is None
            ours_runs.append(watch.stop(count))
            watch = Stopwatch()
            count = 0
            for stream_id in sample:
                session = await ReplaySession.open(reader, stream_id)
                async for _step in session.steps():
                    count += 1
            step_runs.append(watch.stop(count))
            watch = Stopwatch()
            count = 0
            for stream_id in sample:
                count += await drain_range(consumer, reader.tp(stream_id), first[stream_id],
                                           last[stream_id] + 1, stream_id.encode(), schema)
            raw_runs.append(watch.stop(count))
    finally:
        await consumer.stop()
    ours, ceiling, stepped = combine(ours_runs), combine(raw_runs), combine(step_runs)
    return section(
        "replay", "events_per_s",
        ours.to_dict(verified=verified, step_by_step=stepped.to_dict()), ceiling.to_dict(),
        what="ReplaySession replaying each sample stream to its end (index seeks, chain "
             "verification, lifecycle fold) vs raw seek to the stream's first offset + "
             "consume to its last + key filter + fastavro decode",
        round_ratios=rate_ratios(ours_runs, raw_runs),
        notes=["ours re-encodes every event to verify its SHA-256 chain link and folds the "
               "state: the ceiling does neither",
               "step_by_step: the same with a ReplayStep (event + state) per event"])


async def measure_index(settings: Settings, indexed: KafkaStreamReader,
                        scanning: KafkaStreamReader, sample: Sequence[str],
                        rounds: int) -> Section:
    schema = default_codec().schemas.get(EVENT).parsed
    consumer = new_consumer(settings, fetch_max_wait_ms=SCAN_FETCH_MAX_WAIT_MS)
    await consumer.start()
    ours_runs: list[Measurement] = []
    scan_runs: list[Measurement] = []
    raw_runs: list[Measurement] = []
    try:
        for _ in range(rounds):
            ours_runs.append(await _reads(indexed, sample))
            scan_runs.append(await _reads(scanning, sample))
            watch = Stopwatch()
            count = 0
            for stream_id in sample:
                tp = indexed.tp(stream_id)
                consumer.assign([tp])
                start = (await consumer.beginning_offsets([tp]))[tp]
                end = (await consumer.end_offsets([tp]))[tp]
                count += await drain_range(consumer, tp, start, end, stream_id.encode(), schema)
            raw_runs.append(watch.stop(count))
    finally:
        await consumer.stop()
    ours, scanned, ceiling = combine(ours_runs), combine(scan_runs), combine(raw_runs)
    return section(
        "replay.index", "events_per_s", ours.to_dict(index_reads=indexed.index_reads),
        ceiling.to_dict(ours_scanning=scanned.to_dict()),
        what="read(stream) through the stream index vs a raw scan of the partition from its "
             "start (key filter + fastavro decode); ratio > 1: the index pays")


async def drain_range(consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, stop: int,
                      key: bytes, schema: dict[str, Any]) -> int:
    """Raw aiokafka: the records of ``[start, stop)`` with ``key``, fastavro-decoded; a
    fetch unpacks no more records than the range still holds (as our reader does)."""
    consumer.assign([tp])
    consumer.seek(tp, start)
    count = 0
    while (position := await consumer.position(tp)) < stop:
        batch = await consumer.getmany(tp, timeout_ms=500,
                                       max_records=min(stop - position, 10_000))
        for record in batch.get(tp, ()):
            if record.offset >= stop:
                return count
            if record.key == key:
                body = BytesIO(record.value)
                body.seek(HEADER_SIZE)
                schemaless_reader(body, schema, None)
                count += 1
    return count


async def _reads(reader: KafkaStreamReader, sample: Sequence[str]) -> Measurement:
    watch = Stopwatch()
    count = 0
    for stream_id in sample:
        count += len(await reader.read(stream_id, 1, 1_000_000))
    return watch.stop(count)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=100_000,
                        help="events of the interleaved fleet (default 100000)")
    parser.add_argument("--streams", type=int, default=1000,
                        help="streams of the fleet (default 1000)")
    parser.add_argument("--samples", type=int, default=10,
                        help="sample streams replayed and read (default 10)")
    parser.add_argument("--sample-events", type=int, default=500,
                        help="events of each sample stream (default 500)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of each measurement, alternating (default 2)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions of the topic (default: ares.events in topics.yaml)")


if __name__ == "__main__":
    cli("Replay: ReplaySession and indexed reads vs raw consume + decode", run, _arguments,
        postgres=True)
