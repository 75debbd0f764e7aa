"""Append benchmark: ``KafkaEventStore.append`` against raw aiokafka producing the same bytes.

Run alone: ``python bench/append.py [--events N] [--streams K] [--rounds R] [--json]``.

* **throughput**: K agents append concurrently, one event per append, each awaiting its
  append before the next (an agent's step loop), with OCC (``expected_version``). Our
  partition writers commit one transaction per group of concurrent appends; the number of
  transactions is counted from the log afterwards (one commit marker per transaction and
  partition). Ceiling: per partition, a raw aiokafka transactional producer with the same
  settings sends the same pre-encoded records in the same number of transactions. A second
  ceiling: one plain idempotent ``acks=all`` producer, no transactions. The run is cut
  into ``--rounds`` on which the order alternates: ours then the transactional ceiling,
  then the ceiling (with the transaction counts of our round before) then ours; the
  idempotent ceiling last. A burst of load from another process hits both sides, and
  neither always runs second (which costs, see ``round_ratio_median_by_order``); the
  figures are the totals.
* **latency**: one stream, sequential single-event appends, each alternated with a raw
  begin/send/commit of the same record on the same partition (same broker conditions).
* **codec**: ``chain.seal_encoded`` (validate, canonical JSON, Avro encode, SHA-256, frame)
  against one fastavro ``schemaless_writer`` of the same record (CPU only, best of 3):
  what our append pays before the producer sees a byte, and a raw client does not.

Targets (reported, never asserted): throughput ratio >= 0.8, single-append p99 <= 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from fastavro import schemaless_writer

from ares.config import Settings
from ares.events.chain import seal_encoded
from ares.events.kafka.routing import partition_for
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.wire.canonical import canonical_json
from ares.events.wire.codec import HEADER_SIZE, default_codec
from ares.events.wire.schemas import EVENT, JSON_PAYLOAD

if __package__ in (None, ""):  # python bench/append.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    Measurement,
    Record,
    Section,
    Stopwatch,
    bench_settings,
    bench_topics,
    best_of,
    by_partition,
    chunks,
    cli,
    combine,
    events_topic_configs,
    interleave,
    latency_summary,
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

T = TypeVar("T")
THROUGHPUT_TARGET = 0.8
CODEC_SAMPLE = 5000
CODEC_REPEATS = 3
P99_TARGET_MS = 10.0


async def run(settings: Settings, *, events: int = 100_000, streams: int = 200,
              rounds: int = 9, latency_samples: int = 500,
              partitions: int | None = None) -> Section:
    """The ``append`` report section (topics of its own, deleted at the end).

    The throughput run is cut into ``rounds`` of alternating order (``throughput_rounds``),
    so a burst of load from elsewhere hits both sides alike.
    """
    settings = bench_settings(settings)
    where = machine()
    partitions = partitions or events_topic_configs(settings)[0]
    per_stream = max(1, events // streams)
    rounds = max(1, min(rounds, per_stream))
    news = step_events(stream_ids(streams), per_stream)

    codec_part, sealed = measure_codec(news, partitions)
    ours_topic = settings.topic("ares.events")
    tx_topic = settings.topic("ares.events.ceiling-tx")
    idem_topic = settings.topic("ares.events.ceiling-idempotent")
    async with bench_topics(settings, [ours_topic, tx_topic, idem_topic], partitions):
        store = await KafkaEventStore.open(settings, topic=ours_topic)
        tx_producers = [await start_producer(settings, transactional_id=f"{tx_topic}.raw-{p}")
                        for p in range(partitions)]
        idempotent = await start_producer(settings, enable_idempotence=True)
        try:
            await warm_up(settings, store, tx_producers, idempotent, tx_topic, idem_topic)
            measured = await throughput_rounds(settings, store, tx_producers, idempotent,
                                               (ours_topic, tx_topic, idem_topic),
                                               news, sealed, rounds)
            latency = await measure_latency(store, tx_producers, tx_topic, latency_samples)
        finally:
            await store.close()
            for producer in [*tx_producers, idempotent]:
                await producer.stop()

    ours = combine([m.ours for m in measured])
    tx_ceiling = combine([m.transactional for m in measured])
    idem_ceiling = combine([m.idempotent for m in measured])
    records = [r for rs in sealed.values() for r in rs]

    def shape(transactions: int) -> dict[str, Any]:
        return {"transactions": transactions,
                "events_per_transaction": round(len(records) / max(1, transactions), 2)}

    ours_figures = ours.to_dict(**shape(sum(sum(m.transactions) for m in measured)))
    ceiling_shape = shape(sum(m.ceiling_transactions for m in measured))
    round_ratios = rate_ratios([m.ours for m in measured], [m.transactional for m in measured])
    return section(
        "append", "events_per_s", ours_figures, tx_ceiling.to_dict(**ceiling_shape),
        target=THROUGHPUT_TARGET,
        what=(f"{streams} agents x {per_stream} sequential single-event appends (OCC), "
              f"{partitions} partitions, ~{_mean_size(records)}-byte records, acks=all; "
              "ceiling: raw aiokafka transactional producers, same records and transactions"),
        round_ratios=round_ratios,
        round_ratio_median=_median(round_ratios),
        # Even rounds ran ours first, odd rounds the ceiling first: the two medians show
        # how much running second costs either side on this machine.
        round_ratio_median_by_order={"ours_first": _median(round_ratios[0::2]),
                                     "ceiling_first": _median(round_ratios[1::2])},
        round_transactions=[[sum(m.transactions), m.ceiling_transactions] for m in measured],
        config={"events": len(records), "streams": streams, "partitions": partitions,
                "rounds": rounds, "record_bytes": _mean_size(records),
                "latency_samples": latency_samples},
        machine=where,
        parts={
            "idempotent": section(
                "append.idempotent", "events_per_s", ours_figures, idem_ceiling.to_dict(),
                what="the same appends vs one raw idempotent acks=all producer, no transactions",
                round_ratios=rate_ratios([m.ours for m in measured],
                                         [m.idempotent for m in measured]),
            ),
            "latency": latency,
            "codec": codec_part,
        },
    )


@dataclass(frozen=True, slots=True)
class Round:
    """One throughput round: the same records through each path."""

    ours: Measurement
    transactional: Measurement
    idempotent: Measurement
    transactions: list[int]  # ours per partition, counted from the log
    ceiling_transactions: int  # what the transactional ceiling committed


async def throughput_round(
    settings: Settings, store: KafkaEventStore, tx_producers: Sequence[AIOKafkaProducer],
    idempotent: AIOKafkaProducer, topics: tuple[str, str, str],
    news: Mapping[str, Sequence[NewEvent]], sealed: Mapping[str, Sequence[Record]],
    version: int, ceiling_first: Sequence[int] | None = None,
) -> Round:
    """Ours and both ceilings on one round's records; our transactions per partition.

    Our transactions are counted from the log: each committed transaction leaves one
    commit marker (an offset) in each partition it wrote to. The transactional ceiling
    commits as many per partition as ours did in this round; given ``ceiling_first`` (the
    counts to commit, from the round before) it runs *before* ours instead. Alternating the
    order matters: whichever side runs second inherits what the first left the broker to do
    (log rolls, marker writes, the JVM's collections). The idempotent ceiling runs last.
    """
    ours_topic, tx_topic, idem_topic = topics
    partitions = len(tx_producers)
    records = interleave(sealed)
    per_partition = by_partition(records, partitions)

    async def our_side() -> tuple[Measurement, list[int]]:
        before = await settled_end_offsets(settings, ours_topic, partitions)
        ours = await append_fleet(store, news, version)
        after = await settled_end_offsets(settings, ours_topic, partitions)
        return ours, [after[p] - before[p] - len(per_partition[p]) for p in range(partitions)]

    if ceiling_first is None:
        ours, transactions = await our_side()
        tx_ceiling, committed = await produce_ceiling(tx_producers, tx_topic, per_partition,
                                                      transactions)
    else:
        tx_ceiling, committed = await produce_ceiling(tx_producers, tx_topic, per_partition,
                                                      ceiling_first)
        ours, transactions = await our_side()
    idem_ceiling = await produce_idempotent(idempotent, idem_topic, records)
    return Round(ours, tx_ceiling, idem_ceiling, transactions, committed)


async def throughput_rounds(
    settings: Settings, store: KafkaEventStore, tx_producers: Sequence[AIOKafkaProducer],
    idempotent: AIOKafkaProducer, topics: tuple[str, str, str],
    news: Mapping[str, Sequence[NewEvent]], sealed: Mapping[str, Sequence[Record]],
    rounds: int,
) -> list[Round]:
    """The rounds in alternating order: ours first, then the ceilings first, and so on.

    A ceiling-first round commits the transactions ours committed in the round before,
    scaled to this round's steps per agent (rounds may differ by one step; in lockstep
    our writers commit one transaction per step and partition).
    """
    measured: list[Round] = []
    bounds = _bounds(min(len(s) for s in news.values()), rounds)
    for i, (lo, hi) in enumerate(bounds):
        plan = None
        if i % 2:
            prev_lo, prev_hi = bounds[i - 1]
            scale = (hi - lo) / (prev_hi - prev_lo)
            plan = [round(count * scale) for count in measured[-1].transactions]
        measured.append(await throughput_round(
            settings, store, tx_producers, idempotent, topics,
            _slice(news, lo, hi), _slice(sealed, lo, hi), lo, ceiling_first=plan))
    return measured


# -- throughput ---------------------------------------------------------------------------


async def append_fleet(store: KafkaEventStore, news: Mapping[str, Sequence[NewEvent]],
                       version: int = 0) -> Measurement:
    """Every agent appends its events one by one, each awaited, with its expected version
    (every stream is at ``version`` before)."""

    async def agent(stream_id: str, events: Sequence[NewEvent], at: int) -> None:
        for event in events:
            at = await store.append(stream_id, [event], expected_version=at)

    watch = Stopwatch()
    await asyncio.gather(*(agent(s, events, version) for s, events in news.items()))
    return watch.stop(sum(len(events) for events in news.values()))


async def produce_ceiling(producers: Sequence[AIOKafkaProducer], topic: str,
                          per_partition: Sequence[Sequence[Record]],
                          transactions: Sequence[int]) -> tuple[Measurement, int]:
    """Each partition's records in as many transactions as ``transactions`` gives for it
    (at least one, at most one per record); returns how many were committed in all."""
    plans = [chunks(records, count) if records else []
             for records, count in zip(per_partition, transactions, strict=True)]
    watch = Stopwatch()
    await asyncio.gather(*(produce_transactions(producer, topic, plan)
                           for producer, plan in zip(producers, plans, strict=True) if plan))
    return watch.stop(sum(len(records) for records in per_partition)), sum(map(len, plans))


async def produce_idempotent(producer: AIOKafkaProducer, topic: str,
                             records: Sequence[Record]) -> Measurement:
    watch = Stopwatch()
    for r in records:
        await producer.send(topic, r.value, key=r.key, partition=r.partition,
                            headers=list(r.headers))
    await producer.flush()
    return watch.stop(len(records))


async def warm_up(settings: Settings, store: KafkaEventStore,
                  tx_producers: Sequence[AIOKafkaProducer], idempotent: AIOKafkaProducer,
                  tx_topic: str, idem_topic: str) -> None:
    """A few transactions on every partition of every path: connections, metadata and the
    first AddPartitionsToTxn are paid before the clocks start."""
    partitions = len(tx_producers)
    streams = _streams_covering(partitions, "warmup")
    news = step_events(streams, 5)
    await append_fleet(store, news)
    per_partition = by_partition(interleave(seal_all(news, partitions)), partitions)
    await produce_ceiling(tx_producers, tx_topic, per_partition,
                          [len(records) for records in per_partition])
    await produce_idempotent(idempotent, idem_topic,
                             [r for records in per_partition for r in records])


# -- latency ------------------------------------------------------------------------------


async def measure_latency(store: KafkaEventStore, tx_producers: Sequence[AIOKafkaProducer],
                          tx_topic: str, samples: int) -> Section:
    """Sequential single-event appends of one stream, each followed by a raw transactional
    begin/send/commit of the same record on the same partition (alternating, so both see
    the same broker). A tenth more (at most 20) go first to warm up and are not counted."""
    warm = min(20, samples // 10)
    stream_id = "latency-00000"
    news = step_events([stream_id], samples + warm)
    partitions = len(tx_producers)
    records = seal_all(news, partitions)[stream_id]
    producer = tx_producers[partition_for(stream_id, partitions)]
    ours: list[float] = []
    raw: list[float] = []
    ours_cpu = raw_cpu = 0.0
    version = 0
    for i, (event, record) in enumerate(zip(news[stream_id], records, strict=True)):
        t0, c0 = time.perf_counter(), time.process_time()
        version = await store.append(stream_id, [event], expected_version=version)
        t1, c1 = time.perf_counter(), time.process_time()
        await produce_transactions(producer, tx_topic, [[record]])
        t2, c2 = time.perf_counter(), time.process_time()
        if i >= warm:
            ours.append(t1 - t0)
            raw.append(t2 - t1)
            ours_cpu += c1 - c0
            raw_cpu += c2 - c1
    ours_figures = {**latency_summary(ours),
                    "cpu_us_per_event": round(ours_cpu / len(ours) * 1e6, 2)}
    raw_figures = {**latency_summary(raw),
                   "cpu_us_per_event": round(raw_cpu / len(raw) * 1e6, 2)}
    part = section(
        "append.latency", "p99_ms", ours_figures, raw_figures, higher_is_better=False,
        what="one durable single-event append at a time vs raw begin/send/commit",
    )
    part["goal"] = {"ours.p99_ms": P99_TARGET_MS,
                    "met": ours_figures["p99_ms"] <= P99_TARGET_MS}
    return part


# -- codec --------------------------------------------------------------------------------


def measure_codec(news: Mapping[str, Sequence[NewEvent]],
                  partitions: int) -> tuple[Section, dict[str, list[Record]]]:
    """Our sealing (``seal_encoded``) vs fastavro encoding the same records: CPU only, on
    up to ``CODEC_SAMPLE`` events, best of ``CODEC_REPEATS`` (the least disturbed run).

    Returns the section and every sealed record (the bytes the ceilings send).
    """
    sealed = seal_all(news, partitions)
    # seal_all keeps each record's Event
    pairs = [(new, record.event, record.value) for stream_id, events in news.items()
             for new, record in zip(events, sealed[stream_id], strict=True)
             if record.event is not None][:CODEC_SAMPLE]
    schema = default_codec().schemas.get(EVENT).parsed
    datums = [_datum(event) for _, event, _ in pairs]
    bodies = [value[HEADER_SIZE:] for _, _, value in pairs]

    def ours() -> None:
        for new, e, _ in pairs:
            seal_encoded(e.stream_id, StreamHead(e.version - 1, e.prev_hash), new, e.version)

    def fastavro_encode() -> None:
        for datum in datums:
            buf = BytesIO()
            schemaless_writer(buf, schema, datum)
            buf.getvalue()

    def sha256() -> None:
        for body in bodies:
            hashlib.sha256(body).hexdigest()

    check = BytesIO()
    schemaless_writer(check, schema, datums[0])
    sha = best_of(CODEC_REPEATS, len(pairs), sha256).to_dict()
    part = section(
        "append.codec", "events_per_cpu_s", best_of(CODEC_REPEATS, len(pairs), ours).to_dict(),
        best_of(CODEC_REPEATS, len(pairs), fastavro_encode).to_dict(
            sha256_cpu_us_per_event=sha["cpu_us_per_event"],
            same_bytes=check.getvalue() == bodies[0]),
        what="seal_encoded (payload check, canonical JSON, Avro, SHA-256, header) vs one "
             "fastavro schemaless_writer of the same record; CPU only, one core",
    )
    return part, sealed


def _datum(event: Event) -> dict[str, Any]:
    """The record fastavro writes for ``event``: exactly the fields of our wire body."""
    return {
        "id": event.id, "stream_id": event.stream_id, "type": event.type,
        "module": event.module, "version": event.version,
        "timestamp": event.timestamp,
        "payload": (JSON_PAYLOAD, {"json": canonical_json(event.payload)}),
        "metadata": dict(event.metadata), "prev_hash": event.prev_hash, "hash": event.hash,
    }


def _bounds(count: int, rounds: int) -> list[tuple[int, int]]:
    """``rounds`` consecutive [lo, hi) slices of ``range(count)``."""
    edges = [count * i // rounds for i in range(rounds + 1)]
    return list(itertools.pairwise(edges))


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _slice(per_stream: Mapping[str, Sequence[T]], lo: int, hi: int) -> dict[str, Sequence[T]]:
    return {stream_id: items[lo:hi] for stream_id, items in per_stream.items()}


def _streams_covering(partitions: int, tag: str) -> list[str]:
    """Stream ids, one per partition."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        stream_id = f"{tag}-{i:05d}"
        found.setdefault(partition_for(stream_id, partitions), stream_id)
        i += 1
    return list(found.values())


def _mean_size(records: Sequence[Record]) -> int:
    return round(sum(len(r.value) for r in records) / max(1, len(records)))


def _arguments(parser: argparse.ArgumentParser) -> None:
    # 100,000: rounds of ~1 s a side. With 20,000 (the default before 1 Dec 2026) each round
    # lasted ~0.2 s, short enough for its start to flatter our path (0.85 against 0.77).
    parser.add_argument("--events", type=int, default=100_000,
                        help="events appended in the throughput run (default 100000)")
    parser.add_argument("--streams", type=int, default=200,
                        help="concurrent agents, one stream each (default 200)")
    parser.add_argument("--rounds", type=int, default=9,
                        help="throughput rounds, ours and ceilings alternating (default 9)")
    parser.add_argument("--latency-samples", type=int, default=500,
                        help="sequential single-event appends timed (default 500)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions of the topics (default: ares.events in topics.yaml)")


if __name__ == "__main__":
    cli("Append throughput and latency: ours vs raw aiokafka", run, _arguments)
