"""Reading one stream out of ``ares.events``: seek through the stream index, scan without it.

A stream's events are scattered over its partition among every other stream's. The stream
index (PostgreSQL, kept by the projector) maps ``(stream_id, version)`` to its offset, so a
read fetches just the offsets it needs: nearby offsets are read as one range, distant ones
with a seek each. The projector's position on the partition says where the index ends;
events after it are found by scanning only that tail. Every event read through the index
is checked against it (its stream and version at that offset): a disagreement — a topic
recreated under the index, say — falls back to a scan, never to a wrong answer.

Without the index (PostgreSQL down, or no DSN), reads scan the partition with a key filter
(only the stream's records are decoded) and log a warning: slower, still exact. Scans
remember where they left a stream, so paging through it does not rescan from the start.

Records are read with ``read_committed`` up to the last stable offset, by consumers that
join no group and own nothing: reading never disturbs the services.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.events.kafka.retry import connect
from ares.events.kafka.routing import partition_for
from ares.events.model import Event
from ares.events.ports import IndexEntry, IndexUnavailableError, StreamIndex
from ares.events.wire.codec import decode_event

log = logging.getLogger(__name__)

# Index entries closer than this (in offsets) are fetched as one range, not seek by seek.
CLUSTER_GAP = 200
_FETCH_TIMEOUT_MS = 500
_MAX_RECORDS = 10_000
_WARN_EVERY_S = 30.0


class RangeScanner:
    """One consumer reading ``[start, end)`` of one partition at a time: one user at a time
    (``KafkaStreamReader.lease``), since a range re-assigns and seeks the consumer."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._started: AIOKafkaConsumer | None = None

    @property
    def _consumer(self) -> AIOKafkaConsumer:
        if self._started is None:
            raise RuntimeError("the range scanner is not started")
        return self._started

    async def start(self) -> None:
        """Connect, waiting out a broker that answers "not yet" (ARES_RETRY_TIMEOUT_S)."""
        # No long polls: a fetch parked at the broker would delay the next range's first one.
        self._started = await connect(lambda: new_consumer(self._settings, fetch_max_wait_ms=5),
                                      what="connecting the replay reader",
                                      settings=self._settings)

    async def close(self) -> None:
        if self._started is not None:
            await self._started.stop()

    async def partitions(self, topic: str) -> int:
        return len(await topic_partitions(self._consumer, topic))

    async def end(self, tp: TopicPartition) -> int:
        """The last stable offset: what read_committed can see."""
        return int((await self._consumer.end_offsets([tp]))[tp])

    async def start_offset(self, tp: TopicPartition) -> int:
        return int((await self._consumer.beginning_offsets([tp]))[tp])

    async def records(self, tp: TopicPartition, start: int, end: int | None = None,
                      key: bytes | None = None) -> AsyncIterator[ConsumerRecord]:
        """Records of ``[start, end)`` (``end`` default: the last stable offset), only those
        with ``key`` when given. Leaving the loop early is fine: the next range seeks anew."""
        consumer = self._consumer
        stop = await self.end(tp)
        stop = stop if end is None else min(end, stop)
        if start >= stop:
            return
        consumer.assign([tp])
        consumer.seek(tp, start)
        while (position := await consumer.position(tp)) < stop:
            # At most what the range still holds: a fetch brings whole batches (up to
            # megabytes past ``stop``), and unpacking records nobody reads is most of the
            # cost of a short range.
            batch = await consumer.getmany(tp, timeout_ms=_FETCH_TIMEOUT_MS,
                                           max_records=min(stop - position, _MAX_RECORDS))
            for record in batch.get(tp, ()):
                if record.offset >= stop:
                    return
                if key is None or record.key == key:
                    yield record


def decode_or_skip(record: ConsumerRecord) -> Event | None:
    try:
        return decode_event(record.value or b"")
    except SchemaError as exc:
        log.error("undecodable record at %s/%d@%d skipped: %s (`ares audit verify` reports "
                  "it)", record.topic, record.partition, record.offset, exc)
        return None


def clusters(entries: Sequence[IndexEntry], gap: int = CLUSTER_GAP) -> list[list[IndexEntry]]:
    """Entries (in offset order) grouped where consecutive offsets are ``gap`` or closer."""
    groups: list[list[IndexEntry]] = []
    for entry in entries:
        if groups and entry.offset - groups[-1][-1].offset <= gap:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


class KafkaStreamReader:
    """The ``EventSource`` over ``ares.events``; ``index`` None reads by scanning only."""

    def __init__(self, settings: Settings, topic: str, partitions: int,
                 index: StreamIndex | None, scanners: Sequence[RangeScanner]) -> None:
        self.settings = settings
        self.topic = topic
        self.partitions = partitions
        self.index = index
        self._pool: asyncio.Queue[RangeScanner] = asyncio.Queue()
        self._scanners = list(scanners)
        for scanner in scanners:
            self._pool.put_nowait(scanner)
        # stream -> (version, offset) of the last event a scan returned: where to go on.
        self._hints: dict[str, tuple[int, int]] = {}
        self.fallbacks = 0
        self.index_reads = 0
        self._warned = 0.0

    @classmethod
    async def open(cls, settings: Settings, topic: str, index: StreamIndex | None = None,
                   concurrency: int = 1) -> KafkaStreamReader:
        scanners: list[RangeScanner] = []
        try:
            for _ in range(max(concurrency, 1)):
                scanner = RangeScanner(settings)
                await scanner.start()
                scanners.append(scanner)
            partitions = await scanners[0].partitions(topic)
        except BaseException:
            for scanner in scanners:
                await scanner.close()
            raise
        return cls(settings, topic, partitions, index, scanners)

    async def close(self) -> None:
        for scanner in self._scanners:
            await scanner.close()

    def tp(self, stream_id: str) -> TopicPartition:
        return TopicPartition(self.topic, partition_for(stream_id, self.partitions))

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[RangeScanner]:
        scanner = await self._pool.get()
        try:
            yield scanner
        finally:
            self._pool.put_nowait(scanner)

    @property
    def degraded(self) -> bool:
        """Whether the last index lookup failed (reads are scanning)."""
        return self._warned > 0 and time.monotonic() - self._warned < _WARN_EVERY_S

    # -- EventSource -----------------------------------------------------------------------

    async def read(self, stream_id: str, from_version: int, limit: int) -> list[Event]:
        tp, key = self.tp(stream_id), stream_id.encode()
        try:
            async with self.lease() as scanner:
                if self.index is not None:
                    found = await self._indexed_read(scanner, stream_id, tp, from_version,
                                                     limit)
                    if found is not None:
                        return found
                return await self._scan_read(scanner, stream_id, tp, key, from_version, limit)
        except KafkaError as exc:
            raise translate(exc, f"reading stream {stream_id!r} from {self.topic}") from exc

    async def head(self, stream_id: str) -> int:
        tp, key = self.tp(stream_id), stream_id.encode()
        async with self.lease() as scanner:
            start, last = 0, 0
            if self.index is not None:
                try:
                    entry, start = await self.index.last(stream_id, tp.partition)
                    last = 0 if entry is None else entry.version
                except IndexUnavailableError as exc:
                    self._fallback(exc)
                    start = 0
            if start == 0:
                start = await scanner.start_offset(tp)
            async for record in scanner.records(tp, start, key=key):
                event = decode_or_skip(record)
                if event is not None and event.stream_id == stream_id:
                    last = max(last, event.version)
            return last

    async def version_at(self, stream_id: str, at: datetime) -> int:
        tp, key = self.tp(stream_id), stream_id.encode()
        async with self.lease() as scanner:
            version, start = 0, None
            if self.index is not None:
                try:
                    after, projected = await self.index.version_after(stream_id, tp.partition,
                                                                      at)
                    if after is not None:
                        self.index_reads += 1
                        return after - 1
                    entry, projected = await self.index.last(stream_id, tp.partition)
                    version, start = (0 if entry is None else entry.version), projected
                except IndexUnavailableError as exc:
                    self._fallback(exc)
                    version, start = 0, None
            if start is None:
                start = await scanner.start_offset(tp)
            # No log-time bound (offsets_for_times): "as of T" is by the events' own
            # timestamps, which a writer may set (imported history), so only the first
            # event after T ends the scan.
            async for record in scanner.records(tp, start, key=key):
                event = decode_or_skip(record)
                if event is None or event.stream_id != stream_id:
                    continue
                if event.timestamp > at:
                    break
                version = event.version
            return version

    # -- indexed reads ---------------------------------------------------------------------

    async def _indexed_read(self, scanner: RangeScanner, stream_id: str, tp: TopicPartition,
                            from_version: int, limit: int) -> list[Event] | None:
        assert self.index is not None
        try:
            found = await self.index.locate(stream_id, tp.partition, from_version, limit)
        except IndexUnavailableError as exc:
            self._fallback(exc)
            return None
        key = stream_id.encode()
        events: list[Event] = []
        for group in clusters(found.entries):
            expected = {e.offset: e.version for e in group}
            got: dict[int, Event] = {}
            async for record in scanner.records(tp, group[0].offset, group[-1].offset + 1, key):
                if record.offset in expected:
                    event = decode_or_skip(record)
                    if event is not None:
                        got[record.offset] = event
            for offset, version in expected.items():
                event = got.get(offset)
                if event is None or event.version != version or event.stream_id != stream_id:
                    log.warning("stream index disagrees with %s/%d at offset %d (stream %r "
                                "version %d): reading by scan", tp.topic, tp.partition, offset,
                                stream_id, version)
                    self.fallbacks += 1
                    return None
                events.append(event)
        self.index_reads += 1
        if len(events) < limit:  # the tail the projector has not indexed yet
            low = events[-1].version + 1 if events else from_version
            async for record in scanner.records(tp, found.projected, key=key):
                event = decode_or_skip(record)
                if event is not None and event.stream_id == stream_id and event.version >= low:
                    events.append(event)
                    if len(events) >= limit:
                        break
        return events

    # -- scanning reads --------------------------------------------------------------------

    async def _scan_read(self, scanner: RangeScanner, stream_id: str, tp: TopicPartition,
                         key: bytes, from_version: int, limit: int) -> list[Event]:
        if limit <= 0:
            return []
        hint = self._hints.get(stream_id)
        start = hint[1] + 1 if hint is not None and hint[0] < from_version else None
        if start is None:
            start = await scanner.start_offset(tp)
        events: list[Event] = []
        async for record in scanner.records(tp, start, key=key):
            event = decode_or_skip(record)
            if event is None or event.stream_id != stream_id or event.version < from_version:
                continue
            events.append(event)
            if len(events) >= limit:
                self._hints[stream_id] = (event.version, record.offset)
                break
        return events

    def _fallback(self, exc: Exception) -> None:
        self.fallbacks += 1
        now = time.monotonic()
        if now - self._warned > _WARN_EVERY_S:
            log.warning("stream index unavailable (%s): reading ares.events by scanning, "
                        "slower until PostgreSQL is back", exc)
        self._warned = now
