"""One compaction pass over every partition: summarise, snapshot, then (maybe) trim.

Per partition p, in this order:

1. read p's summaries (``ares.summaries``/p) and scan what ``ares.events``/p gained since
   the last pass into the ``PartitionIndex``;
2. summarise every stream with more than ``threshold`` events after its last summary:
   one summary of ``[summarised through + 1, head - keep_recent]``; merge the oldest
   summaries of a stream above ``max_summaries_per_stream``; rewrite summaries before the
   topic's retention could drop them and delete those of streams gone for ``summary_ttl``.
   All of it in one transaction (``SummaryWriter``);
3. plan the trim (``trim.plan_trim``); with trimming on, ask the owners for a snapshot of
   every agent whose snapshot holds the trim point back (``snapshot.request``), wait for
   the replies, plan again;
4. trim with DeleteRecords up to the safe point, unless the runtime group is rebalancing
   (an owner may be recovering p from older snapshots); record the trim (log line,
   metrics, a ``__trim__`` record on ``ares.summaries``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.errors import KafkaError

from ares.client import Client
from ares.compactor import metrics
from ares.compactor.config import CompactionConfig
from ares.compactor.index import PartitionIndex, StreamIndex
from ares.compactor.report import PartitionReport, StreamStatus
from ares.compactor.summariser import merge_oldest, summarise
from ares.compactor.trim import Hold, TrimPlan, plan_trim, stream_limit, summarised_through
from ares.config import Settings
from ares.errors import AresError
from ares.events.kafka.dlq import COMPACTOR, DeadLetters
from ares.events.kafka.errors import translate
from ares.events.kafka.groups import describe_group, runtime_group
from ares.events.kafka.reader import PartitionScanner, new_consumer
from ares.events.kafka.snapshots import Snapshot, load_snapshots
from ares.lifecycle.recovery import CHECKPOINT_KEY
from ares.summaries.record import Summary
from ares.summaries.store import (
    PartitionSummaries,
    SummaryWriter,
    TrimRecord,
    load_summaries,
)
from ares.topics import EVENTS, SNAPSHOTS, SUMMARIES, TopicPlan

log = logging.getLogger(__name__)

# Runtime group states in which no owner is moving partitions: trimming may proceed. In any
# other (PreparingRebalance, CompletingRebalance, or unknown) an owner may be recovering.
SETTLED = frozenset({"Stable", "Empty", "Dead"})
UNKNOWN = "Unknown"
SNAPSHOT_CONCURRENCY = 16


@dataclass(slots=True)
class _Partition:
    """What a pass read of one partition."""

    index: PartitionIndex
    summaries: PartitionSummaries
    snapshots: dict[str, Snapshot]
    checkpoint: Snapshot | None
    log_start: int


class Compactor:
    """Runs passes; ``open(write=False)`` for a read-only one (status)."""

    def __init__(self, settings: Settings, plan: TopicPlan, config: CompactionConfig, *,
                 clock: Callable[[], float] = time.time,
                 writer_factory: Callable[[Settings, str], SummaryWriter] = SummaryWriter,
                 ) -> None:
        self.settings = settings
        self.plan = plan
        self.config = config
        self.clock = clock
        self._writer_factory = writer_factory
        self.events_topic = plan.name(EVENTS)
        self.snapshots_topic = plan.name(SNAPSHOTS)
        self.summaries_topic = plan.name(SUMMARIES)
        self.partitions = 0
        self._indices: dict[int, PartitionIndex] = {}
        self._scanner: PartitionScanner | None = None
        self._offsets: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._writer: SummaryWriter | None = None
        self._client: Client | None = None
        # Unreadable summaries go to ares.dlq (the compactor owns that topic's dead letters);
        # a read-only pass writes none.
        self.letters: DeadLetters | None = None

    async def open(self, *, write: bool = True) -> None:
        try:
            self._scanner = await PartitionScanner.open(self.settings)
            self.partitions = await self._scanner.partitions(self.events_topic)
            self._offsets = new_consumer(self.settings)
            await self._offsets.start()
            self._admin = AIOKafkaAdminClient(
                bootstrap_servers=self.settings.kafka_bootstrap,
                request_timeout_ms=int(self.settings.request_timeout_s * 1000),
                **self.settings.kafka_options())
            await self._admin.start()
            if write:
                self._writer = self._writer_factory(self.settings, self.summaries_topic)
                await self._writer.start()
                self.letters = DeadLetters(self.settings, self.plan.name, COMPACTOR)
                await self.letters.start()
        except KafkaError as exc:
            await self.close()
            raise translate(exc, "starting the compactor") from exc
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        client, writer, self._client, self._writer = self._client, self._writer, None, None
        offsets, admin, scanner = self._offsets, self._admin, self._scanner
        self._offsets = self._admin = self._scanner = None
        letters, self.letters = self.letters, None
        if letters is not None:
            await letters.stop()
        if client is not None:
            await client.close()
        if writer is not None:
            await writer.stop()
        if offsets is not None:
            await offsets.stop()
        if admin is not None:
            await admin.close()
        if scanner is not None:
            await scanner.close()

    # -- passes ----------------------------------------------------------------------------

    async def run_pass(self, partitions: Iterable[int] | None = None) -> list[PartitionReport]:
        """Summarise (and with trimming on, trim) every partition; a report per partition."""
        if self._writer is None:
            raise AresError("the compactor was opened read-only")
        started = time.monotonic()
        reports = []
        try:
            for partition in self._selected(partitions):
                reports.append(await self._compact(partition))
        except BaseException:
            metrics.PASSES.labels("failed").inc()
            raise
        metrics.PASSES.labels("ok").inc()
        metrics.PASS_SECONDS.observe(time.monotonic() - started)
        return reports

    async def status(self, partitions: Iterable[int] | None = None) -> list[PartitionReport]:
        """What a pass would start from, per partition: nothing is written."""
        group = await self.runtime_group_state()
        reports = []
        for partition in self._selected(partitions):
            state = await self._read(partition)
            report = self._report(state, group)
            report.runtime_group = group
            reports.append(report)
        return reports

    def _selected(self, partitions: Iterable[int] | None) -> list[int]:
        return sorted(partitions) if partitions is not None else list(range(self.partitions))

    async def _compact(self, partition: int) -> PartitionReport:
        state = await self._read(partition)
        puts, deletes, counts = self._summarise(state)
        assert self._writer is not None
        await self._writer.write(partition, puts, deletes)
        now_ms = int(self.clock() * 1000)
        for key in deletes:
            state.summaries.delete(key)
        for summary in puts:
            state.summaries.put(summary, now_ms)
            if (stream := state.index.streams.get(summary.stream_id)) is not None:
                stream.forget_facts_through(summary.to_version)
        label = str(partition)
        metrics.SUMMARIES_WRITTEN.labels(label).inc(counts.written)
        metrics.SUMMARIES_MERGED.labels(label).inc(counts.merged)
        metrics.SUMMARIES_EXPIRED.labels(label).inc(counts.expired)
        report = self._report(state, None)
        report.written, report.merged = counts.written, counts.merged
        report.expired, report.refreshed = counts.expired, counts.refreshed
        if self.config.trimming:
            await self._snapshot_then_trim(state, report)
        metrics.LOG_START.labels(label).set(report.log_start)
        metrics.TRIM_POINT.labels(label).set(report.plan.safe_point)
        metrics.TRIM_BACKLOG.labels(label).set(report.plan.end_offset - report.plan.safe_point)
        return report

    async def _read(self, partition: int) -> _Partition:
        assert self._scanner is not None
        reject = None if self.letters is None else self.letters.reject
        summaries = await load_summaries(self._scanner, self.summaries_topic, partition,
                                         reject=reject)
        if self.letters is not None:
            await self.letters.flush()  # kept queued on failure: flushed again next pass
        index = self._indices.setdefault(partition,
                                         PartitionIndex(self.events_topic, partition))
        index.summarised = {sid: summarised_through(summaries.of(sid), 1)
                            for sid in summaries.by_stream}
        log_start = await self.log_start(partition)
        await index.update(self._scanner, log_start)
        snapshots = await load_snapshots(self._scanner, self.snapshots_topic, partition)
        checkpoint = snapshots.pop(CHECKPOINT_KEY, None)
        return _Partition(index, summaries, snapshots, checkpoint, log_start)

    # -- summaries -------------------------------------------------------------------------

    def _summarise(self, state: _Partition) -> tuple[list[Summary], list[str], _Counts]:
        counts = _Counts()
        fresh: dict[str, list[Summary]] = {}
        for stream in state.index.streams.values():
            summary = self._next_summary(stream, state.summaries.of(stream.stream_id))
            if summary is not None:
                fresh[stream.stream_id] = [summary]
        puts: list[Summary] = []
        deletes: list[str] = []
        for stream_id in sorted(set(fresh) | set(state.summaries.by_stream)):
            stored = state.summaries.stored(stream_id)
            every = sorted([*(s.summary for s in stored.values()), *fresh.get(stream_id, [])],
                           key=lambda s: s.from_version)
            kept, replaced = merge_oldest(every, self.config.max_summaries_per_stream)
            new = [s for s in kept if s.key not in stored]
            gone = [s.key for s in replaced if s.key in stored]
            counts.written += len(new)
            counts.merged += len(gone)
            puts.extend(new)
            deletes.extend(gone)
        self._apply_ttl(state, puts, deletes, counts)
        return puts, deletes, counts

    def _next_summary(self, stream: StreamIndex, existing: Sequence[Summary]) -> Summary | None:
        if stream.broken is not None:
            return None
        through = summarised_through(existing, stream.first_version)
        stream.forget_facts_through(through)
        if stream.head_version - through <= self.config.threshold:
            return None
        last = stream.head_version - self.config.keep_recent
        facts = stream.facts_between(through + 1, last)
        if not facts or facts[-1].version != last or (
                facts[0].version != through + 1 and facts[0].version != stream.first_version):
            log.error("compactor: stream %s: the facts of versions %d..%d are incomplete; "
                      "not summarised", stream.stream_id, through + 1, last)
            return None
        try:
            return summarise(stream.stream_id, facts)
        except ValueError as exc:
            log.error("compactor: %s", exc)
            return None

    def _apply_ttl(self, state: _Partition, puts: list[Summary], deletes: list[str],
                   counts: _Counts) -> None:
        """Rewrite what the topic's retention would otherwise drop; delete the summaries of
        streams that left the log and the snapshots longer than ``summary_ttl`` ago."""
        now_ms = int(self.clock() * 1000)
        ttl_ms = int(self.config.summary_ttl_s * 1000)
        present = set(state.index.streams) | set(state.snapshots)
        touched = set(deletes) | {s.key for s in puts}
        for stream_id, stored in state.summaries.by_stream.items():
            for key, item in stored.items():
                if key in touched:
                    continue
                age = now_ms - item.timestamp_ms
                if stream_id in present and age > ttl_ms // 2:
                    puts.append(item.summary)
                    counts.refreshed += 1
                elif stream_id not in present and age > ttl_ms:
                    deletes.append(key)
                    counts.expired += 1

    # -- trimming --------------------------------------------------------------------------

    def _report(self, state: _Partition, group: str | None) -> PartitionReport:
        heads = None if state.checkpoint is None else state.checkpoint.state.get("heads", {})
        streams = []
        for stream_id in sorted(set(state.index.streams) | set(state.snapshots)):
            stream = state.index.streams.get(stream_id)
            snapshot = state.snapshots.get(stream_id)
            existing = state.summaries.of(stream_id)
            through = summarised_through(existing, None if stream is None
                                         else stream.first_version)
            limit = stream_limit(stream_id, stream, snapshot, through, checkpoint_heads=heads)
            streams.append(StreamStatus(
                stream_id, (stream.kind if stream is not None else None)
                or (snapshot.agent_kind if snapshot is not None else None),
                None if stream is None else stream.first_version,
                stream.head_version if stream is not None
                else (snapshot.version if snapshot is not None else 0),
                through, len(existing), None if snapshot is None else snapshot.version,
                limit))
        plan = plan_trim(state.index.partition, state.log_start, state.index.end_offset,
                         [s.limit for s in streams],
                         None if state.checkpoint is None else state.checkpoint.events_offset,
                         rebalancing=group is not None and group not in SETTLED,
                         group_state=group)
        trims = sorted(state.summaries.trims, key=lambda t: t.to_offset)
        return PartitionReport(state.index.partition, plan, streams,
                               None if state.checkpoint is None
                               else state.checkpoint.events_offset,
                               state.summaries.count, last_trim=trims[-1] if trims else None)

    async def _snapshot_then_trim(self, state: _Partition, report: PartitionReport) -> None:
        wanted = [s.stream_id for s in report.streams if s.kind is not None and (
            s.limit.hold is Hold.SNAPSHOT
            or (s.limit.hold is Hold.NO_SNAPSHOT and s.summarised_through > 0))]
        if wanted:
            ok, failed = await self._request_snapshots(wanted)
            report.snapshots_requested, report.snapshots_failed = ok + failed, failed
            assert self._scanner is not None
            state.snapshots = await load_snapshots(self._scanner, self.snapshots_topic,
                                                   state.index.partition)
            state.checkpoint = state.snapshots.pop(CHECKPOINT_KEY, None)
        group = await self.runtime_group_state()
        fresh = self._report(state, group)
        report.plan, report.streams, report.runtime_group = fresh.plan, fresh.streams, group
        if report.plan.safe_point > state.log_start:
            report.trimmed = await self._trim(report.plan)
            report.last_trim = report.trimmed
            state.index.forget_before(report.trimmed.to_offset)

    async def _trim(self, plan: TrimPlan) -> TrimRecord:
        assert self._admin is not None
        assert self._writer is not None
        tp = TopicPartition(self.events_topic, plan.partition)
        try:
            done = await self._admin.delete_records({tp: RecordsToDelete(plan.safe_point)})
        except KafkaError as exc:
            raise translate(exc, f"trimming {tp.topic}/{tp.partition}") from exc
        new_start = int(done.get(tp, plan.safe_point))
        record = TrimRecord(tp.topic, plan.partition, plan.log_start, new_start,
                            plan.held_by, plan.hold.value, plan.detail,
                            int(self.clock() * 1000))
        log.info("compactor: trimmed %s/%d from offset %d to %d (%d records); held by %s "
                 "(%s: %s)", tp.topic, tp.partition, plan.log_start, new_start,
                 new_start - plan.log_start, plan.held_by or "-", plan.hold.value, plan.detail)
        metrics.TRIMS.labels(str(plan.partition)).inc()
        metrics.TRIMMED_RECORDS.labels(str(plan.partition)).inc(new_start - plan.log_start)
        await self._writer.write(plan.partition, records=[(record.key, record.encode())])
        return record

    async def _request_snapshots(self, stream_ids: Sequence[str]) -> tuple[int, int]:
        """snapshot.request to each stream's owner, a few at a time; (answered, failed)."""
        if self._client is None:
            client = Client(self.settings, self.plan, issuer="compactor")
            await client.start()
            self._client = client
        client = self._client
        gate = asyncio.Semaphore(SNAPSHOT_CONCURRENCY)

        async def request(stream_id: str) -> bool:
            async with gate:
                try:
                    await client.command("snapshot.request", stream_id,
                                         timeout_s=self.config.snapshot_timeout_s,
                                         reason="compaction")
                except AresError as exc:
                    log.warning("compactor: no snapshot of %s: %s", stream_id, exc)
                    metrics.SNAPSHOT_REQUESTS.labels("failed").inc()
                    return False
                metrics.SNAPSHOT_REQUESTS.labels("ok").inc()
                return True

        results = await asyncio.gather(*(request(s) for s in stream_ids))
        return sum(results), len(results) - sum(results)

    # -- Kafka state -----------------------------------------------------------------------

    async def log_start(self, partition: int) -> int:
        assert self._offsets is not None
        tp = TopicPartition(self.events_topic, partition)
        try:
            return int((await self._offsets.beginning_offsets([tp]))[tp])
        except KafkaError as exc:
            raise translate(exc, f"reading the log start of {tp.topic}/{partition}") from exc

    async def runtime_group_state(self) -> str:
        """The runtime group's state (Stable, Empty, Dead, PreparingRebalance, ...);
        ``Unknown`` when the broker does not say (then nothing is trimmed)."""
        assert self._admin is not None
        group = runtime_group(self.settings)
        try:
            view = await describe_group(self._admin, group, settings=self.settings,
                                        timeout_s=self.settings.request_timeout_s)
        except (AresError, KafkaError) as exc:
            log.warning("compactor: describing the consumer group %s failed: %s", group, exc)
            return UNKNOWN
        return view.state


@dataclass(slots=True)
class _Counts:
    written: int = 0
    merged: int = 0
    expired: int = 0
    refreshed: int = 0
