"""Reads of ``ares.events`` partitions: bounded scans with ``read_committed``, no group."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import IllegalStateError
from aiokafka.structs import ConsumerRecord

from ares.config import Settings
from ares.errors import SchemaError, UnavailableError
from ares.events.kafka.internals import consumer_client
from ares.events.kafka.retry import connect
from ares.events.model import Event
from ares.events.wire.codec import decode_event
from ares.tasks import stop_client

log = logging.getLogger(__name__)
FETCH_TIMEOUT_MS = 500


def new_consumer(settings: Settings, **overrides: object) -> AIOKafkaConsumer:
    options: dict[str, object] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "request_timeout_ms": int(settings.request_timeout_s * 1000),
        "max_partition_fetch_bytes": max(settings.max_record_bytes * 2, 1_048_576),
        "fetch_max_bytes": 52_428_800,
        **settings.kafka_options(),
    }
    options.update(overrides)
    return AIOKafkaConsumer(**options)


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str,
                           wait_s: float = 5.0) -> set[int]:
    """The partitions of ``topic``, or an error that says how to create it.

    A topic created a moment ago may take a few metadata refreshes to appear.
    """
    deadline = time.monotonic() + wait_s
    while True:
        # Fresh metadata: the consumer's partitions_for_topic answers from a cache.
        cluster = await consumer_client(consumer).fetch_all_metadata()
        found: set[int] | None = cluster.partitions_for_topic(topic)
        if found or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    if not found:
        raise UnavailableError(
            f"topic {topic!r} does not exist: create the topics with `ares topics apply`"
        )
    return set(found)


class PartitionScanner:
    """Scans ranges of partitions up to their last stable offset (LSO).

    One consumer, one scan at a time (a lock): scans re-assign the consumer. Concurrent
    callers (parallel partition takeovers) are safe: their scans queue behind the lock, and
    the offset look-ups, which need no assignment, do not wait for them.
    """

    def __init__(self, consumer: AIOKafkaConsumer, settings: Settings | None = None) -> None:
        self._consumer = consumer
        self._settings = settings or Settings()
        self._uncommitted: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        # Concurrent takeovers ask for high watermarks at once: one opens the consumer,
        # the others wait for it rather than use it before it started (or open another).
        self._uncommitted_lock = asyncio.Lock()
        self.undecodable = 0

    @classmethod
    async def open(cls, settings: Settings) -> PartitionScanner:
        # Scans never long-poll: a fetch parked at the broker for new data would hold up
        # the next scan's first fetch (one fetch in flight per broker).
        consumer = await connect(lambda: new_consumer(settings, fetch_max_wait_ms=5),
                                 what="connecting the event reader",
                                 settings=settings)
        return cls(consumer, settings)

    @property
    def client(self) -> AIOKafkaClient:
        """The underlying Kafka client, for requests the consumer API has no call for."""
        return consumer_client(self._consumer)

    async def close(self) -> None:
        await stop_client(self._consumer)
        if self._uncommitted is not None:
            await stop_client(self._uncommitted)

    async def high_watermark(self, tp: TopicPartition) -> int:
        """The end of the log, committed or not (a read_uncommitted view)."""
        async with self._uncommitted_lock:
            if self._uncommitted is None:
                consumer = new_consumer(self._settings, isolation_level="read_uncommitted")
                await consumer.start()
                self._uncommitted = consumer
        return int((await self._uncommitted.end_offsets([tp]))[tp])

    async def partitions(self, topic: str) -> int:
        """Partition count of ``topic``, or an error that says how to create it."""
        return len(await topic_partitions(self._consumer, topic))

    async def last_stable_offset(self, tp: TopicPartition) -> int:
        return int((await self._consumer.end_offsets([tp]))[tp])

    async def undecided(self, tp: TopicPartition) -> tuple[int, int] | None:
        """``(LSO, high watermark)`` while records of an open or hanging transaction hold
        the partition's last stable offset below its end, else None."""
        stable, high = await self.last_stable_offset(tp), await self.high_watermark(tp)
        return (stable, high) if stable < high else None

    async def wait_until_stable(self, tp: TopicPartition, offset: int,
                                timeout_s: float = 10.0) -> None:
        """Wait until ``offset`` is below the LSO: commit markers are written asynchronously
        after a transaction commits, so a read right after an append must wait for them."""
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while await self.last_stable_offset(tp) < offset:
            if time.monotonic() > deadline:
                raise UnavailableError(f"{tp.topic}/{tp.partition}: offset {offset} did not "
                                       f"become stable within {timeout_s}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def scan_record_batches(
        self, tp: TopicPartition, start: int | None = None, key: bytes | None = None
    ) -> AsyncIterator[list[ConsumerRecord]]:
        """Raw records from ``start`` (default: the log start) to the LSO at call time, only
        those with ``key`` when given, a fetch at a time: a whole-partition scan pays the
        async iteration per fetch, not per record."""
        async with self._lock:
            consumer = self._consumer
            consumer.assign([tp])
            try:
                if start is None:
                    await consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, start)
                end = await self.last_stable_offset(tp)
                while await consumer.position(tp) < end:
                    fetched = (await consumer.getmany(tp, timeout_ms=FETCH_TIMEOUT_MS)).get(tp)
                    if not fetched:
                        continue
                    done = fetched[-1].offset >= end
                    if done:
                        fetched = [r for r in fetched if r.offset < end]
                    if key is not None:
                        fetched = [r for r in fetched if r.key == key]
                    if fetched:
                        yield fetched
                    if done:
                        return
            finally:
                # An assigned partition is fetched in the background for as long as it
                # stays assigned: with fetch_max_wait_ms=5 an idle scanner would poll its
                # last partition ~200 times a second, a tenth of a core for ever after one
                # read. Paused, it is not fetched; the next scan's assign() starts unpaused.
                with contextlib.suppress(IllegalStateError):
                    consumer.pause(tp)

    async def scan_records(
        self, tp: TopicPartition, start: int | None = None, key: bytes | None = None
    ) -> AsyncIterator[ConsumerRecord]:
        """``scan_record_batches`` one record at a time."""
        async for records in self.scan_record_batches(tp, start, key):
            for record in records:
                yield record

    async def scan_batches(
        self, tp: TopicPartition, start: int | None = None, key: bytes | None = None
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        """(offset, event) pairs, a fetch at a time. Undecodable records are counted and
        skipped: only partition owners write here, so they mean a bug or tampering, logged
        loudly."""
        async for records in self.scan_record_batches(tp, start, key):
            decoded = []
            for record in records:
                try:
                    if record.value is None:  # only a foreign producer writes one
                        raise SchemaError("empty: a record without a value")
                    decoded.append((record.offset, decode_event(record.value)))
                except SchemaError as exc:
                    self.undecodable += 1
                    log.error("undecodable record at %s/%d offset %d: %s", tp.topic,
                              tp.partition, record.offset, exc)
            if decoded:
                yield decoded

    async def scan(
        self, tp: TopicPartition, start: int | None = None, key: bytes | None = None
    ) -> AsyncIterator[tuple[int, Event]]:
        """``scan_batches`` one event at a time."""
        async for batch in self.scan_batches(tp, start, key):
            for item in batch:
                yield item
