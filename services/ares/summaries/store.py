"""``ares.summaries``: reading a partition's summaries, and the compactor's fenced writer.

Records on partition p of ``ares.summaries`` (co-partitioned with ``ares.events``):

* ``<stream>:<from>-<to>``: a ``Summary`` (see ``summary.py``); a tombstone (no value)
  deletes it, after a merge or on expiry;
* ``__trim__:<partition>:<offset>``: a ``TrimRecord``, the audit trail of DeleteRecords.

The writer is transactional with one ``transactional_id`` per summaries topic: what one
pass writes to a partition is visible all at once or not at all (a compactor killed
mid-pass leaves nothing half-written), and starting a second compactor fences the first.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.dlq import Reject, reason_of
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import PartitionScanner
from ares.events.model import utc_now
from ares.events.wire.codec import decode_event, encode
from ares.events.wire.schemas import EVENT
from ares.summaries.record import MODULE, Summary, parse_summary_key

log = logging.getLogger(__name__)

TRIM_PREFIX = "__trim__:"
TRIM_TYPE = "compaction.trimmed"


@dataclass(frozen=True, slots=True)
class StoredSummary:
    summary: Summary
    timestamp_ms: int  # the record's log timestamp: when it was (re)written


@dataclass(frozen=True, slots=True)
class TrimRecord:
    """One DeleteRecords on ``ares.events``: the partition's log start moved."""

    topic: str
    partition: int
    from_offset: int  # the log start before
    to_offset: int  # ... and after
    held_by: str | None  # the stream that held the trim point
    hold: str
    detail: str
    at_ms: int = 0

    @property
    def key(self) -> str:
        return f"{TRIM_PREFIX}{self.partition}:{self.to_offset}"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "from_offset": self.from_offset, "to_offset": self.to_offset,
                "deleted": self.to_offset - self.from_offset, "held_by": self.held_by,
                "hold": self.hold, "detail": self.detail, "at_ms": self.at_ms}

    def encode(self) -> bytes:
        return encode(EVENT, {
            "id": str(uuid.uuid4()), "stream_id": f"__compactor__.{self.partition}",
            "type": TRIM_TYPE, "module": MODULE, "version": 0, "timestamp": utc_now(),
            "payload": {k: v for k, v in self.to_json().items() if k != "at_ms"},
            "metadata": {}, "prev_hash": "", "hash": ""})

    @classmethod
    def decode(cls, data: bytes, at_ms: int) -> TrimRecord:
        p = decode_event(data).payload
        try:
            return cls(str(p["topic"]), int(p["partition"]), int(p["from_offset"]),
                       int(p["to_offset"]), p.get("held_by"), str(p["hold"]),
                       str(p["detail"]), at_ms)
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"invalid_payload: trim record: {exc!r}") from exc


@dataclass(slots=True)
class PartitionSummaries:
    """The live summaries of one partition, per stream and key, and its trim records."""

    partition: int
    by_stream: dict[str, dict[str, StoredSummary]] = field(default_factory=dict)
    trims: list[TrimRecord] = field(default_factory=list)

    def of(self, stream_id: str) -> list[Summary]:
        """One stream's summaries in version order."""
        found = self.by_stream.get(stream_id, {})
        return sorted((s.summary for s in found.values()),
                      key=lambda s: (s.from_version, s.to_version))

    def stored(self, stream_id: str) -> dict[str, StoredSummary]:
        return self.by_stream.get(stream_id, {})

    @property
    def count(self) -> int:
        return sum(len(found) for found in self.by_stream.values())

    def put(self, summary: Summary, timestamp_ms: int) -> None:
        self.by_stream.setdefault(summary.stream_id, {})[summary.key] = StoredSummary(
            summary, timestamp_ms)

    def delete(self, key: str) -> None:
        parsed = parse_summary_key(key)
        if parsed is not None:
            found = self.by_stream.get(parsed[0])
            if found is not None:
                found.pop(key, None)
                if not found:
                    del self.by_stream[parsed[0]]


async def load_summaries(scanner: PartitionScanner, topic: str, partition: int,
                         stream_id: str | None = None,
                         reject: Reject | None = None) -> PartitionSummaries:
    """The live records of one partition of ``ares.summaries`` (only ``stream_id``'s when
    given). A compacted topic may still hold superseded records: the last one per key wins;
    an unreadable record is skipped with a warning, and handed to ``reject`` (dead letters)
    when given and the whole partition is read."""
    loaded = PartitionSummaries(partition)
    prefix = None if stream_id is None else f"{stream_id}:".encode()

    def rejected(record: ConsumerRecord, reason: str, detail: str) -> None:
        if reject is not None and stream_id is None:
            reject(record, reason, detail)

    async for record in scanner.scan_records(TopicPartition(topic, partition)):
        raw_key: bytes | None = record.key
        if raw_key is None:
            rejected(record, "invalid_summary", "a record without a key")
            continue
        if prefix is not None and not raw_key.startswith(prefix):
            continue
        key = raw_key.decode(errors="replace")
        try:
            if key.startswith(TRIM_PREFIX):
                if record.value is not None and stream_id is None:
                    loaded.trims.append(TrimRecord.decode(record.value, record.timestamp))
                continue
            parsed = parse_summary_key(key)
            if parsed is None:
                rejected(record, "invalid_summary",
                         f"key {key[:100]!r} is not <stream>:<from>-<to>")
                continue
            if stream_id is not None and parsed[0] != stream_id:
                continue
            if record.value is None:
                loaded.delete(key)
                continue
            summary = Summary.decode(record.value)
        except SchemaError as exc:
            log.warning("skipping unreadable record %s at %s/%d@%d: %s", key, topic,
                        partition, record.offset, exc)
            rejected(record, reason_of(exc, "invalid_summary"), str(exc))
            continue
        if summary.key != key:
            log.warning("skipping summary filed under %s but covering %s", key, summary.key)
            rejected(record, "key_mismatch",
                     f"summary of {summary.key!r} filed under key {key[:100]!r}")
            continue
        loaded.put(summary, record.timestamp)
    return loaded


class SummaryWriter:
    """The compactor's transactional producer on ``ares.summaries``."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self.producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap,
            transactional_id=f"{topic}.compactor", acks="all", linger_ms=5,
            max_request_size=max(settings.max_record_bytes * 2, 1_048_576),
            request_timeout_ms=int(settings.request_timeout_s * 1000),
            **settings.kafka_options())

    async def start(self) -> None:
        try:
            await self.producer.start()  # init_transactions: fences another compactor
        except KafkaError as exc:
            await self.producer.stop()
            raise translate(exc, "starting the compactor's summary writer") from exc

    async def stop(self) -> None:
        await self.producer.stop()

    async def write(self, partition: int, puts: Sequence[Summary] = (),
                    deletes: Sequence[str] = (),
                    records: Sequence[tuple[str, bytes]] = ()) -> None:
        """Summaries, tombstones and other records of one partition, in one transaction."""
        if not puts and not deletes and not records:
            return
        try:
            async with self.producer.transaction():
                for summary in puts:
                    await self.producer.send(self.topic, summary.encode(),
                                              key=summary.key.encode(), partition=partition)
                for key in deletes:
                    await self.producer.send(self.topic, None, key=key.encode(),
                                              partition=partition)
                for key, value in records:
                    await self.producer.send(self.topic, value, key=key.encode(),
                                              partition=partition)
        except KafkaError as exc:
            raise translate(exc, f"writing summaries to {self.topic}/{partition}") from exc
