"""Read benchmark: ``KafkaEventStore`` reads against raw aiokafka consume + fastavro decode.

Run alone: ``python bench/read.py [--events N] [--streams K] [--rounds R] [--json]``.

The topic is filled once with N sealed events of K interleaved streams (the log of a fleet
stepping together), written by raw transactional producers in transactions of
``--transaction-size`` records (so commit markers sit between them, as in a real log).
Ours and the ceilings then read the same records with the same consumer settings
(``kafka_reader.new_consumer``: ``read_committed``, no group, same fetch sizes and wait).

* **replay** (headline): ``read_all()`` of a non-owning store (a replay reader) vs a raw
  consumer of every partition decoding each value with fastavro ``schemaless_reader``.
  The ceiling section also shows raw consume without decoding. Each side replays the
  whole topic ``--rounds`` times, alternating, and the figures are the totals.
* **stream**: ``read(stream)`` of sampled streams by the partition OWNER (it seeks to the
  stream's first offset and scans to the end of the partition, decoding only the stream's
  records) vs a raw consumer doing exactly that, stream by stream, alternating.

Targets (reported, never asserted): replay >= 0.7 x raw consume+decode, >= 100k events/s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from fastavro import schemaless_reader

from ares.config import Settings
from ares.events.kafka.reader import new_consumer
from ares.events.kafka.store import KafkaEventStore
from ares.events.wire.codec import HEADER_SIZE, default_codec
from ares.events.wire.schemas import EVENT

if __package__ in (None, ""):  # python bench/read.py: make ``bench`` importable
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
    rate_ratios,
    seal_all,
    section,
    settled_end_offsets,
    start_producer,
    step_events,
    stream_ids,
)

REPLAY_RATIO_TARGET = 0.7
REPLAY_RATE_TARGET = 100_000
# What PartitionScanner.open sets: scans never long-poll.
SCAN_FETCH_MAX_WAIT_MS = 5


async def run(settings: Settings, *, events: int = 100_000, streams: int = 1000,
              rounds: int = 3, stream_reads: int = 20, transaction_size: int = 20,
              partitions: int | None = None) -> Section:
    """The ``read`` report section (a topic of its own, deleted at the end)."""
    settings = bench_settings(settings)
    where = machine()
    partitions = partitions or events_topic_configs(settings)[0]
    per_stream = max(1, events // streams)
    sealed = seal_all(step_events(stream_ids(streams), per_stream), partitions)
    total = streams * per_stream
    topic = settings.topic("ares.events")
    async with bench_topics(settings, [topic], partitions):
        first = await populate(settings, topic, sealed, partitions, transaction_size)
        ends = await settled_end_offsets(settings, topic, partitions)
        replay = await measure_replay(settings, topic, partitions, max(1, rounds))
        sample = list(sealed)[:: max(1, streams // max(1, stream_reads))][:stream_reads]
        stream = await measure_stream_reads(settings, topic, sample, first, ends)
    records = [r for rs in sealed.values() for r in rs]
    replay["config"] = {
        "events": total, "streams": streams, "partitions": partitions,
        "rounds": max(1, rounds), "transaction_size": transaction_size,
        "stream_reads": len(sample),
        "record_bytes": round(sum(len(r.value) for r in records) / max(1, len(records))),
        "log_records": sum(ends.values()),  # data records + one marker per transaction
    }
    replay["machine"] = where
    replay["parts"] = {"stream": stream}
    return replay


# -- filling the topic --------------------------------------------------------------------


async def populate(settings: Settings, topic: str, sealed: Mapping[str, Sequence[Record]],
                   partitions: int, transaction_size: int) -> dict[str, int]:
    """Write every stream's records, interleaved, in transactions per partition; return
    each stream's first offset (what the owner's stream table knows)."""
    per_partition = by_partition(interleave(sealed), partitions)
    producers = [await start_producer(settings, transactional_id=f"{topic}.fill-{p}")
                 for p in range(partitions)]
    first: dict[str, int] = {}
    try:
        await asyncio.gather(*(
            _fill(producer, topic, records, transaction_size, first)
            for producer, records in zip(producers, per_partition, strict=True)
        ))
    finally:
        for producer in producers:
            await producer.stop()
    return first


async def _fill(producer: AIOKafkaProducer, topic: str, records: Sequence[Record],
                transaction_size: int, first: dict[str, int]) -> None:
    count = max(1, -(-len(records) // transaction_size))
    for chunk in chunks(records, count):
        await producer.begin_transaction()
        firsts: list[tuple[str, asyncio.Future[Any]]] = []
        for r in chunk:
            future = await producer.send(topic, r.value, key=r.key, partition=r.partition,
                                         headers=list(r.headers))
            if r.event is not None and r.event.version == 1:
                firsts.append((r.event.stream_id, future))
        await producer.commit_transaction()
        for stream_id, future in firsts:
            first[stream_id] = (await future).offset


# -- replay -------------------------------------------------------------------------------


async def measure_replay(settings: Settings, topic: str, partitions: int,
                         rounds: int) -> Section:
    """``rounds`` times: ours, raw consume + decode, raw consume (load bursts hit all)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    await consume(settings, tps, decode=False)  # warm-up: connections, page cache
    reader = await KafkaEventStore.open(settings, topic=topic, owned=[])
    ours_runs: list[Measurement] = []
    ceiling_runs: list[Measurement] = []
    raw_runs: list[Measurement] = []
    try:
        for _ in range(rounds):
            watch = Stopwatch()
            count = 0
            async for _event in reader.read_all():
                count += 1
            ours_runs.append(watch.stop(count))
            ceiling_runs.append(await consume(settings, tps, decode=True))
            raw_runs.append(await consume(settings, tps, decode=False))
    finally:
        await reader.close()

    ours, ceiling, raw = combine(ours_runs), combine(ceiling_runs), combine(raw_runs)
    ours_figures = ours.to_dict()
    part = section(
        "read", "events_per_s", ours_figures,
        ceiling.to_dict(consume_only=raw.to_dict()),
        target=REPLAY_RATIO_TARGET,
        what="replay: KafkaEventStore.read_all() (non-owner) vs raw aiokafka read_committed "
             "consume of all partitions + fastavro decode",
        round_ratios=rate_ratios(ours_runs, ceiling_runs),
    )
    part["goal"] = {"ours.events_per_s": REPLAY_RATE_TARGET,
                    "met": ours_figures["events_per_s"] >= REPLAY_RATE_TARGET}
    return part


async def consume(settings: Settings, tps: Sequence[TopicPartition], *,
                  decode: bool) -> Measurement:
    """Raw aiokafka: every record of ``tps`` up to the end, fastavro-decoded if ``decode``."""
    schema = default_codec().schemas.get(EVENT).parsed
    consumer = new_consumer(settings, fetch_max_wait_ms=SCAN_FETCH_MAX_WAIT_MS)
    await consumer.start()
    try:
        watch = Stopwatch()
        consumer.assign(list(tps))
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(list(tps))
        count = await _drain(consumer, ends, schema if decode else None)
        return watch.stop(count)
    finally:
        await consumer.stop()


async def _drain(consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int],
                 schema: dict[str, Any] | None, key: bytes | None = None) -> int:
    count = 0
    pending = {tp for tp, end in ends.items() if await consumer.position(tp) < end}
    while pending:
        batch = await consumer.getmany(*pending, timeout_ms=500)
        for tp, records in batch.items():
            for record in records:
                if key is not None and record.key != key:
                    continue
                if schema is not None:
                    body = BytesIO(record.value)
                    body.seek(HEADER_SIZE)
                    schemaless_reader(body, schema, None)
                count += 1
            if await consumer.position(tp) >= ends[tp]:
                pending.discard(tp)
    return count


# -- stream reads -------------------------------------------------------------------------


async def measure_stream_reads(settings: Settings, topic: str, sample: Sequence[str],
                               first: Mapping[str, int], ends: Mapping[int, int]) -> Section:
    """Each sampled stream read by the owner, then by the raw consumer (alternating)."""
    schema = default_codec().schemas.get(EVENT).parsed
    owner = await KafkaEventStore.open(settings, topic=topic)  # rebuilds heads: not timed
    consumer = new_consumer(settings, fetch_max_wait_ms=SCAN_FETCH_MAX_WAIT_MS)
    await consumer.start()
    ours_runs: list[Measurement] = []
    raw_runs: list[Measurement] = []
    try:
        for stream_id in sample:
            watch = Stopwatch()
            ours_runs.append(watch.stop(len(await owner.read(stream_id))))
            tp = TopicPartition(topic, owner.partition_of(stream_id))
            watch = Stopwatch()
            consumer.assign([tp])
            consumer.seek(tp, first[stream_id])
            end = await consumer.end_offsets([tp])
            count = await _drain(consumer, end, schema, key=stream_id.encode())
            raw_runs.append(watch.stop(count))
    finally:
        await consumer.stop()
        await owner.close()
    scanned = sum(ends[owner.partition_of(s)] - first[s] for s in sample)
    shape = {"streams": len(sample), "log_records_scanned": scanned}
    ours, ceiling = combine(ours_runs), combine(raw_runs)
    return section(
        "read.stream", "events_per_s", ours.to_dict(**shape), ceiling.to_dict(**shape),
        what="read(stream) by the partition owner, streams one after another, vs raw seek to "
             "the stream's first offset + consume to the end + key filter + fastavro decode",
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=100_000,
                        help="events in the topic (default 100000)")
    parser.add_argument("--streams", type=int, default=1000,
                        help="streams they are spread over (default 1000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="replays of the whole topic by each side, alternating (default 3)")
    parser.add_argument("--stream-reads", type=int, default=20,
                        help="streams read one by one with read(stream) (default 20)")
    parser.add_argument("--transaction-size", type=int, default=20,
                        help="records per transaction when filling the topic (default 20)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions of the topic (default: ares.events in topics.yaml)")


if __name__ == "__main__":
    cli("Read throughput: ours vs raw aiokafka consume + fastavro decode", run, _arguments)
