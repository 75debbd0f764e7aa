"""``ares audit verify``: read the log and everything that knows about it, then judge.

The log is read in full, from each partition's start to its last stable offset, never
through the index: a forged record sits at an offset no index knows, and an audit that
trusted the index would not see it. Named streams only need their partitions (records of
other keys are skipped undecoded); ``--all`` audits every stream of every partition.

Memory is bounded by the max-replay cap: records are decoded and verified in chunks of at
most ``max_replay`` events (default 10,000), and only each stream's head stays between
chunks. What else knows a stream's version — its latest snapshot and the owner's partition
checkpoint on ``ares.snapshots``, the projected stream index — is loaded first, so the
scan can remember the hashes at exactly those versions.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import TopicPartition

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.routing import partition_for
from ares.events.kafka.snapshots import Snapshot
from ares.events.model import Event
from ares.events.ports import IndexUnavailableError, SummarySource
from ares.events.wire.codec import decode_event
from ares.lifecycle.recovery import CHECKPOINT_KEY
from ares.replay_reader.audit import AuditReport, KnownHead, StreamAudit
from ares.replay_reader.kafka_source import RangeScanner
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.source import NoSummaries

log = logging.getLogger(__name__)

DEFAULT_MAX_REPLAY = 10_000
Progress = Callable[[int, int], None]  # (records scanned, records to scan)


@dataclass(slots=True)
class AuditScope:
    events_topic: str
    snapshots_topic: str | None = None
    streams: Sequence[str] | None = None  # None: every stream
    index: ProjectionStore | None = None
    summaries: SummarySource = field(default_factory=NoSummaries)
    max_replay: int = DEFAULT_MAX_REPLAY
    notes: list[str] = field(default_factory=list)  # what could not be consulted


class LoggedRecord(Protocol):
    """What the audit reads of a record, from a consumer or from a dump."""

    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def offset(self) -> int: ...


class RecordSource(Protocol):
    """Where the audit reads the log: the topics (``RangeScanner``) or a dump of them."""

    async def partitions_to_scan(self, topic: str, streams: set[str] | None) -> list[int]: ...
    async def start_offset(self, tp: TopicPartition) -> int: ...
    async def end(self, tp: TopicPartition) -> int: ...
    def records(self, tp: TopicPartition, start: int,
                end: int | None = None) -> AsyncIterator[LoggedRecord]: ...


class _Topics:
    """The live topics: a named stream needs only its partition."""

    def __init__(self, scanner: RangeScanner) -> None:
        self._scanner = scanner
        self.start_offset = scanner.start_offset
        self.end = scanner.end

    async def partitions_to_scan(self, topic: str, streams: set[str] | None) -> list[int]:
        partitions = await self._scanner.partitions(topic)
        if streams is None:
            return list(range(partitions))
        return sorted({partition_for(s, partitions) for s in streams})

    def records(self, tp: TopicPartition, start: int,
                end: int | None = None) -> AsyncIterator[LoggedRecord]:
        return self._scanner.records(tp, start, end)


async def run_audit(settings: Settings, scope: AuditScope,
                    progress: Progress | None = None) -> AuditReport:
    """Audit the topics of ``settings``' broker."""
    scanner = RangeScanner(settings)
    await scanner.start()
    try:
        return await audit_source(_Topics(scanner), scope, progress)
    finally:
        await scanner.close()


async def audit_source(source: RecordSource, scope: AuditScope,
                       progress: Progress | None = None) -> AuditReport:
    """Audit the log ``source`` serves (a dump: ``ares.replay_reader.dump.DumpSource``)."""
    if scope.max_replay < 1:
        raise ValueError("max_replay must be >= 1")
    return await _Audit(source, scope, progress).run()


class _Audit:
    def __init__(self, scanner: RecordSource, scope: AuditScope,
                 progress: Progress | None) -> None:
        self.scanner = scanner
        self.scope = scope
        self.progress = progress
        self.report = AuditReport(scope.events_topic, max_replay=scope.max_replay)
        self.known: dict[str, list[KnownHead]] = {}
        self.audits: dict[str, StreamAudit] = {}
        self.wanted = None if scope.streams is None else set(scope.streams)

    async def run(self) -> AuditReport:
        scan = await self.scanner.partitions_to_scan(self.scope.events_topic, self.wanted)
        await self._load_known(scan)
        ranges = {}
        for p in scan:
            tp = TopicPartition(self.scope.events_topic, p)
            ranges[tp] = (await self.scanner.start_offset(tp), await self.scanner.end(tp))
        total = sum(end - start for start, end in ranges.values())
        for tp, (start, end) in ranges.items():
            await self._scan(tp, start, end, total)
        streams = set(self.audits) | set(self.known)
        if self.wanted is not None:
            streams &= self.wanted
            self.report.unknown = sorted(self.wanted - streams)
        for stream_id in sorted(streams):
            audit = self._audit(stream_id)
            summaries = []
            if audit.first is not None and audit.first.version > 1:
                summaries = await self.scope.summaries.summaries(stream_id)
            self.report.streams.append(audit.finish(self.known.get(stream_id, ()), summaries))
        return self.report

    def _audit(self, stream_id: str) -> StreamAudit:
        audit = self.audits.get(stream_id)
        if audit is None:
            watch = [k.version for k in self.known.get(stream_id, ())]
            audit = self.audits[stream_id] = StreamAudit(stream_id, watch=watch)
        return audit

    def _know(self, stream_id: str, head: KnownHead) -> None:
        if stream_id != CHECKPOINT_KEY and (self.wanted is None or stream_id in self.wanted):
            self.known.setdefault(stream_id, []).append(head)

    async def _load_known(self, partitions: list[int]) -> None:
        topic = self.scope.snapshots_topic
        if topic is not None:
            for p in partitions:
                await self._load_snapshots(TopicPartition(topic, p))
        if self.scope.index is not None:
            try:
                heads = await self.scope.index.heads(None if self.wanted is None
                                                     else sorted(self.wanted))
            except IndexUnavailableError as exc:
                self.scope.notes.append(f"the stream index was not consulted ({exc})")
                log.warning("audit: stream index unavailable, not consulted: %s", exc)
            else:
                for stream_id, (version, digest) in heads.items():
                    self._know(stream_id, KnownHead(version, digest, "index"))

    async def _load_snapshots(self, tp: TopicPartition) -> None:
        latest: dict[str, Snapshot] = {}
        start = await self.scanner.start_offset(tp)
        async for record in self.scanner.records(tp, start):
            key = record.key.decode(errors="replace") if record.key else ""
            if record.value is None:
                latest.pop(key, None)
                continue
            try:
                latest[key] = Snapshot.decode(record.value)
            except SchemaError as exc:
                self.scope.notes.append(f"unreadable snapshot at {tp.topic}/{tp.partition}@"
                                        f"{record.offset}: {exc}")
        for key, snapshot in latest.items():
            if key == CHECKPOINT_KEY:
                for stream_id, head in dict(snapshot.state.get("heads", {})).items():
                    self._know(stream_id, KnownHead(int(head[0]), str(head[1]), "checkpoint"))
            else:
                self._know(snapshot.stream_id, KnownHead(snapshot.version, snapshot.hash,
                                                         "snapshot"))

    async def _scan(self, tp: TopicPartition, start: int, end: int, total: int) -> None:
        wanted_keys = None if self.wanted is None else {s.encode() for s in self.wanted}
        chunk: list[tuple[str, int, Event | SchemaError]] = []
        async for record in self.scanner.records(tp, start, end):
            self.report.records_scanned += 1
            if wanted_keys is None or record.key in wanted_keys:
                key = record.key.decode(errors="replace") if record.key else ""
                try:
                    if record.value is None:
                        raise SchemaError("a null value (a tombstone) in the event log")
                    chunk.append((key, record.offset, decode_event(record.value or b"")))
                except SchemaError as exc:
                    chunk.append((key, record.offset, exc))
                if len(chunk) >= self.scope.max_replay:
                    self._verify(chunk)
                    chunk = []
            if self.progress is not None and self.report.records_scanned % 1000 == 0:
                self.progress(self.report.records_scanned, total)
        self._verify(chunk)
        if self.progress is not None:
            self.progress(self.report.records_scanned, total)

    def _verify(self, chunk: list[tuple[str, int, Event | SchemaError]]) -> None:
        """Verify a chunk: each stream's run in one go, in log order."""
        runs: dict[str, list[tuple[int, Event | SchemaError]]] = {}
        for key, offset, item in chunk:
            runs.setdefault(key, []).append((offset, item))
        for key, items in runs.items():
            audit = self._audit(key)
            batch: list[tuple[int, Event]] = []
            for offset, item in items:
                if isinstance(item, SchemaError):
                    audit.feed_many(batch)
                    batch = []
                    audit.undecodable(offset, str(item))
                else:
                    batch.append((offset, item))
            audit.feed_many(batch)
