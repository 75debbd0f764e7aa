"""The Kafka EventStore: ``ares.events`` partitions, each written by one fenced owner.

A store owns the partitions it is opened with (all by default): opening takes over their
transactional ids, which fences any previous owner, then rebuilds each owned stream's head
by scanning the partition. Appends to a stream on a partition owned elsewhere are refused:
external systems send commands (``ares.Client``) to the owner instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from ares import metrics
from ares.config import Settings
from ares.errors import AresError, IntegrityError, SchemaError
from ares.events.kafka.errors import translate
from ares.events.kafka.internals import add_partition_to_transaction, producer_id
from ares.events.kafka.partition_writer import PartitionWriter, transactional_id
from ares.events.kafka.reader import PartitionScanner, new_consumer
from ares.events.kafka.routing import partition_for
from ares.events.kafka.transactions import (
    CoordinatorView,
    Decision,
    describe_transaction,
    hanging_decision,
    open_transactions,
)
from ares.events.model import ANY_VERSION, Direction, Event, EventFilter, NewEvent, utc_now
from ares.events.subscription import Subscription
from ares.events.wire.codec import decode_event
from ares.events.writer import StreamTable
from ares.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class NotOwnerError(AresError):
    """This process does not own the partition of the stream it was asked to append to."""


class KafkaEventStore:
    def __init__(self, settings: Settings, topic: str, partitions: int,
                 writers: dict[int, PartitionWriter], scanner: PartitionScanner) -> None:
        self._settings = settings
        self.topic = topic
        self.partitions = partitions
        self._writers = writers
        self._scanner = scanner

    @classmethod
    async def open(cls, settings: Settings, owned: Iterable[int] | None = None,
                   topic: str | None = None) -> KafkaEventStore:
        topic = topic or settings.topic("ares.events")
        scanner = await PartitionScanner.open(settings)
        writers: dict[int, PartitionWriter] = {}
        try:
            partitions = await scanner.partitions(topic)
            for partition in range(partitions) if owned is None else owned:
                writers[partition] = await open_writer(settings, topic, partition, scanner)
        except BaseException:
            for writer in writers.values():
                await writer.stop()
            await scanner.close()
            raise
        return cls(settings, topic, partitions, writers, scanner)

    @property
    def owned(self) -> list[int]:
        return sorted(self._writers)

    def writer(self, partition: int) -> PartitionWriter | None:
        return self._writers.get(partition)

    def partition_of(self, stream_id: str) -> int:
        return partition_for(stream_id, self.partitions)

    def append(self, stream_id: str, events: Sequence[NewEvent],
               expected_version: int = ANY_VERSION) -> Coroutine[Any, Any, int]:
        """``EventStore.append``: awaited like a coroutine function, and it is one to its
        callers. It returns the owner's own coroutine rather than awaiting it in one more:
        that frame was created and resumed twice on every append of a fleet. Errors still
        surface when the result is awaited, as they would from an ``async def``."""
        partition = partition_for(stream_id, self.partitions)
        writer = self._writers.get(partition)
        if writer is None:
            return _raise(NotOwnerError(
                f"stream {stream_id!r} lives on partition {partition}, which this process does "
                "not own: send the append as a command (ares.Client / `ares events append`)"
            ))
        return writer.append(stream_id, events, expected_version)

    async def read(self, stream_id: str, from_version: int | None = None,
                   limit: int | None = None,
                   direction: Direction = Direction.FORWARD) -> list[Event]:
        tp = TopicPartition(self.topic, self.partition_of(stream_id))
        start: int | None = None
        if (writer := self._writers.get(tp.partition)) is not None:
            state = writer.table.state(stream_id)
            if state is None:
                return []
            start = state.first_offset
            await self._scanner.wait_until_stable(tp, writer.committed_end)
        events = [event async for _, event in self._scanner.scan(tp, start, stream_id.encode())]
        if direction is Direction.FORWARD:
            low = from_version or 1
            selected = [e for e in events if e.version >= low]
        else:
            selected = [e for e in reversed(events)
                        if from_version is None or e.version <= from_version]
        return selected if limit is None else selected[:limit]

    async def read_all(self) -> AsyncIterator[Event]:
        for partition in range(self.partitions):
            tp = TopicPartition(self.topic, partition)
            if (writer := self._writers.get(partition)) is not None:
                await self._scanner.wait_until_stable(tp, writer.committed_end)
            async for batch in self._scanner.scan_batches(tp):
                for _, event in batch:
                    yield event

    def subscribe(self, event_filter: EventFilter) -> Subscription:
        """Live events from the call on: located by the records' log timestamps (the
        writer's clock, so hosts need synchronised clocks, as Kafka's time index does).
        An undecodable record is logged and skipped; a failure of the follower itself
        reaches the subscriber as an error instead of a silent hang."""
        queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        since_ms = int(utc_now().timestamp() * 1000)
        task = asyncio.create_task(self._follow(event_filter, since_ms, queue))

        async def close() -> None:
            await cancel_and_wait(task)

        return Subscription(queue, close)

    async def _follow(self, event_filter: EventFilter, since_ms: int,
                      queue: asyncio.Queue[Event | BaseException]) -> None:
        consumer = new_consumer(self._settings)
        try:
            await consumer.start()
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(tps)
            # The ends first: an append committed between the two requests lies past the
            # ends taken before it, but might be missed by a time lookup taken before it
            # and then skipped by seeking to ends taken after it (found by CI).
            ends = await consumer.end_offsets(tps)
            found = await consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
            for tp in tps:
                consumer.seek(tp, found[tp].offset if found.get(tp) else ends[tp])
            key = event_filter.stream_id.encode() if event_filter.stream_id else None
            while True:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    for record in records:
                        if (key is not None and record.key != key) or record.timestamp < since_ms:
                            continue
                        try:
                            event = decode_event(record.value or b"")
                        except SchemaError as exc:
                            log.error("subscription skips undecodable record %s/%d@%d: %s",
                                      record.topic, record.partition, record.offset, exc)
                            continue
                        if event_filter.matches(event):
                            queue.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # delivered to the subscriber, who decides
            queue.put_nowait(translate(exc, "following ares.events")
                             if isinstance(exc, KafkaError) else exc)
        finally:
            await consumer.stop()

    async def stream_version(self, stream_id: str) -> int:
        partition = self.partition_of(stream_id)
        if (writer := self._writers.get(partition)) is not None:
            return writer.table.head(stream_id).version
        last = await self.read(stream_id, direction=Direction.BACKWARD, limit=1)
        return last[0].version if last else 0

    async def close(self) -> None:
        for writer in self._writers.values():
            await writer.stop()
        self._writers.clear()
        await self._scanner.close()


EventObserver = Callable[[int, Event], None]
# Called once the previous owner is fenced: (where to start the scan, the seeded heads).
ScanPlanner = Callable[[], Awaitable[tuple[int | None, StreamTable]]]


async def open_writer(settings: Settings, topic: str, partition: int,
                      scanner: PartitionScanner, *, plan_scan: ScanPlanner | None = None,
                      observer: EventObserver | None = None) -> PartitionWriter:
    """Take over a partition: fence the previous owner, then rebuild stream heads.

    ``plan_scan`` runs after the fence (so nothing the old owner could still write is
    missed) and gives the heads known from a checkpoint and where to start the scan
    (default: no heads, the log start); ``observer`` sees every event of the scan (recovery
    routes them to their agents).
    """
    tid = transactional_id(topic, partition)
    # Read before the fence: init_transactions erases the coordinator's last decision, which
    # is what completes a hanging transaction of this writer (ares.events.kafka.transactions).
    before = await describe_transaction(scanner.client, tid)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        transactional_id=tid,
        **settings.kafka_options(),
        acks="all",
        linger_ms=1,
        max_batch_size=1_048_576,
        max_request_size=max(settings.max_record_bytes * 2, 1_048_576),
        request_timeout_ms=int(settings.request_timeout_s * 1000),
    )
    try:
        await producer.start()  # init_transactions: bumps the epoch, aborts the zombie's txn
    except KafkaError as exc:
        await producer.stop()
        raise translate(exc, f"taking over {topic}/{partition}") from exc
    tp = TopicPartition(topic, partition)
    try:
        await _settle_hanging_transaction(scanner, producer, tp, before)
        start_offset, table = ((None, StreamTable(settings.dedupe_window)) if plan_scan is None
                                else await plan_scan())
        observe = table.observe
        async for batch in scanner.scan_batches(tp, start_offset):
            for offset, event in batch:
                observe(event, offset)
                if observer is not None:
                    observer(offset, event)
        end = await scanner.last_stable_offset(tp)
    except BaseException:
        await producer.stop()
        raise
    writer = PartitionWriter(producer, topic, partition, table, settings.max_record_bytes,
                             settings.request_timeout_s)
    writer.committed_end = end
    writer.start()
    return writer


# After init_transactions the previous owner's transaction is decided; what still holds
# the last stable offset below the high watermark after this long is a hanging transaction.
HANGING_TRANSACTION_WAIT_S = 10.0


async def _settle_hanging_transaction(scanner: PartitionScanner, producer: AIOKafkaProducer,
                                      tp: TopicPartition, before: CoordinatorView | None) -> None:
    """Never write behind undecided records: a later commit marker of the same producer
    would make them visible after our appends (two events with one version).

    A hanging transaction of this writer's own producer, which its coordinator finished
    before the takeover, is completed with that decision (``transactions.hanging_decision``)
    at once: the evidence is conclusive right after the fence, and waiting would give a
    concurrent takeover (a rebalance after a broker restart) time to erase the decision.
    Records of anyone else get ``HANGING_TRANSACTION_WAIT_S`` to be decided by their own
    transaction; then the partition is refused, naming the operator's command.
    """
    if (held := await scanner.undecided(tp)) is None:
        return
    decision, why = await _hanging_decision(scanner, producer, tp, before)
    if decision is None:
        held = await _undecided_after(scanner, tp, HANGING_TRANSACTION_WAIT_S)
        if held is None:
            return
        decision, why = await _hanging_decision(scanner, producer, tp, before)
    if decision is not None:
        log.warning("%s/%d: completing a hanging transaction (last stable offset %d, high "
                    "watermark %d) with %s: %s", tp.topic, tp.partition, *held, decision, why)
        await _complete_hanging(producer, tp, decision)
        metrics.HANGING_TRANSACTIONS.labels(str(decision)).inc()
        held = await _undecided_after(scanner, tp, HANGING_TRANSACTION_WAIT_S)
        if held is None:
            return
        why = f"it stayed undecided after a {decision} marker"
    stable, high = held
    raise IntegrityError(
        f"{tp.topic}/{tp.partition} has an undecided (hanging) transaction: its last stable "
        f"offset {stable} stays below the high watermark {high}. Writing now could "
        f"interleave with it, and it cannot be completed here ({why}); abort it first "
        f"(kafka-transactions.sh find-hanging / abort --topic {tp.topic} "
        f"--partition {tp.partition})")


async def _undecided_after(scanner: PartitionScanner, tp: TopicPartition,
                           wait_s: float) -> tuple[int, int] | None:
    """``(LSO, high watermark)`` if records stay undecided for ``wait_s``, else None."""
    deadline = time.monotonic() + wait_s
    while (held := await scanner.undecided(tp)) is not None:
        if time.monotonic() > deadline:
            return held
        await asyncio.sleep(0.2)
    return None


async def _hanging_decision(scanner: PartitionScanner, producer: AIOKafkaProducer,
                            tp: TopicPartition, before: CoordinatorView | None
                            ) -> tuple[Decision | None, str]:
    try:
        holders = await open_transactions(scanner.client, tp)
    except KafkaError as exc:
        return None, f"the partition's producers could not be described: {exc!r}"
    return hanging_decision(before, holders, producer_id(producer))


async def _complete_hanging(producer: AIOKafkaProducer, tp: TopicPartition,
                            decision: Decision) -> None:
    """A transaction that adds ``tp`` and writes nothing: its marker carries our producer id,
    so it decides the hanging records of that producer too (Kafka completes a producer's
    open transaction on a partition with the next marker of that producer id)."""
    try:
        await producer.begin_transaction()
        add_partition_to_transaction(producer, tp)
        if decision is Decision.COMMIT:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
    except KafkaError as exc:
        raise translate(exc, f"completing the hanging transaction of {tp.topic}/"
                             f"{tp.partition}") from exc


async def _raise(error: BaseException) -> Any:
    """A coroutine that fails with ``error`` when awaited (``append``'s refusal)."""
    raise error
