"""The single, fenced writer of one partition of ``ares.events``.

Its transactional producer's ``transactional_id`` is derived from the partition, so a new
owner's ``init_transactions`` fences the previous one: a paused or partitioned zombie can
never append after a takeover. Appends queue up and are committed together (group commit):
one transaction carries every append that arrived while the previous one was committing,
plus whatever else the caller puts in it (command offsets, replies, dead letters).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from ares import metrics
from ares.errors import AresError, FencedError, RecordTooLargeError
from ares.events.kafka_errors import translate
from ares.events.model import NewEvent
from ares.events.writer import AppendPlan, StreamState, StreamTable

log = logging.getLogger(__name__)

# Bounds one transaction, so one huge burst cannot delay every append behind it.
MAX_ITEMS_PER_TRANSACTION = 2000


def transactional_id(events_topic: str, partition: int) -> str:
    """The same id for every owner of the partition: that is what makes fencing work."""
    return f"{events_topic}.writer-{partition}"


class Transaction:
    """What a work item may do inside the writer's current transaction."""

    def __init__(self, writer: PartitionWriter) -> None:
        self._writer = writer
        # Heads before this transaction of every stream it appends to, to undo an abort.
        self.saved: dict[str, StreamState | None] = {}
        self._sends: list[tuple[AppendPlan, list[asyncio.Future[Any]]]] = []

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int:
        """Check, seal and send an append; raises ConflictError etc. for this item only."""
        writer = self._writer
        plan = writer.table.plan(stream_id, events, expected_version)
        if plan.is_noop:
            return plan.version
        encoded = plan.encoded
        for event, value in zip(plan.events, encoded, strict=True):
            if len(value) > writer.max_record_bytes:
                raise RecordTooLargeError(
                    f"event {event.type!r} of stream {stream_id!r} encodes to {len(value)} "
                    f"bytes, over the {writer.max_record_bytes}-byte limit (ARES_MAX_RECORD_BYTES)"
                )
        if stream_id not in self.saved:
            self.saved.update(writer.table.save([stream_id]))
        writer.table.apply(plan)
        key = stream_id.encode()
        futures = [
            await writer.producer.send(writer.topic, value, key=key, partition=writer.partition,
                                       headers=[("ares.type", e.type.encode())])
            for e, value in zip(plan.events, encoded, strict=True)
        ]
        self._sends.append((plan, futures))
        return plan.version

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> None:
        await self._writer.producer.send(topic, value, key=key, partition=partition,
                                         headers=list(headers))

    async def commit_offsets(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        await self._writer.producer.send_offsets_to_transaction(offsets, group_id)

    async def offsets(self) -> list[tuple[AppendPlan, list[int]]]:
        """Log offsets of every appended event (known once the batch is acknowledged)."""
        return [(plan, [(await f).offset for f in futures]) for plan, futures in self._sends]


WorkItem = Callable[[Transaction], Awaitable[Any]]


@dataclass(slots=True)
class _Pending:
    work: WorkItem
    result: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    submitted: float = field(default_factory=time.monotonic)


class PartitionWriter:
    """Owns partition ``partition`` of ``topic``: the only process that appends to it."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, partition: int,
                 table: StreamTable, max_record_bytes: int) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.table = table
        self.max_record_bytes = max_record_bytes
        # Offset after the last event this writer committed: reads wait for the LSO to pass it.
        self.committed_end = 0
        # Called after each commit with every append it made visible, and their offsets:
        # the host reacts to committed events only (an aborted append never happened).
        self.listeners: list[Callable[[AppendPlan, list[int]], None]] = []
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._fenced: FencedError | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"writer-{self.topic}-{self.partition}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task  # a loop that died has said why in the log already
            self._task = None
        self._fail_queued(AresError("the partition writer stopped"))
        with contextlib.suppress(KafkaError, AssertionError):  # a fenced producer may refuse
            await self.producer.stop()

    def _fail_queued(self, error: BaseException) -> None:
        for pending in self._queue:
            if not pending.result.done():
                pending.result.set_exception(error)
        self._queue.clear()

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    async def submit(self, work: WorkItem) -> Any:
        """Run ``work`` inside the next transaction; its result once that commits."""
        if self._fenced is not None:
            raise self._fenced
        pending = _Pending(work)
        self._queue.append(pending)
        self._wakeup.set()
        return await pending.result

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int:
        async def work(tx: Transaction) -> int:
            return await tx.append(stream_id, events, expected_version)

        return int(await self.submit(work))

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                if self._fenced is not None:
                    # A fenced producer can begin no transaction: everything queued behind
                    # the fenced one fails the same way, now, instead of hanging.
                    self._fail_queued(self._fenced)
                    break
                batch = self._queue[:MAX_ITEMS_PER_TRANSACTION]
                del self._queue[:MAX_ITEMS_PER_TRANSACTION]
                try:
                    await self._commit(batch)
                except Exception as exc:  # a client bug must not hang every append
                    log.exception("writer of %s/%d: transaction failed unexpectedly",
                                  self.topic, self.partition)
                    for pending in batch:
                        if not pending.result.done():
                            pending.result.set_exception(
                                AresError(f"append failed: {type(exc).__name__}: {exc}"))

    async def _commit(self, batch: list[_Pending]) -> None:
        tx = Transaction(self)
        outcomes: list[tuple[_Pending, Any, BaseException | None]] = []
        try:
            await self.producer.begin_transaction()
            for pending in batch:
                try:
                    outcomes.append((pending, await pending.work(tx), None))
                except AresError as exc:  # this item's own failure (conflict, too large...)
                    outcomes.append((pending, None, exc))
            written = await tx.offsets()
            await self.producer.commit_transaction()
        except (KafkaError, TimeoutError) as exc:
            await self._fail(batch, tx, exc)
            return
        metrics.TRANSACTIONS.labels("committed").inc()
        label = str(self.partition)
        for plan, offsets in written:
            metrics.EVENTS_APPENDED.labels(label).inc(len(offsets))
            self.table.set_first_offset(plan.stream_id, offsets[0])
            self.committed_end = max(self.committed_end, offsets[-1] + 1)
            for listener in self.listeners:
                try:
                    listener(plan, offsets)
                except Exception:  # a listener's bug must not fail appends that committed
                    log.exception("commit listener failed on stream %s", plan.stream_id)
        now = time.monotonic()
        for pending, value, error in outcomes:
            metrics.APPEND_LATENCY.observe(now - pending.submitted)
            if pending.result.done():
                continue
            if error is None:
                pending.result.set_result(value)
            else:
                pending.result.set_exception(error)

    async def _fail(self, batch: list[_Pending], tx: Transaction, exc: BaseException) -> None:
        error = translate(exc, f"append to {self.topic}/{self.partition}")
        metrics.TRANSACTIONS.labels("fenced" if isinstance(error, FencedError)
                                    else "aborted").inc()
        self.table.restore(tx.saved)  # nothing of an aborted transaction is visible
        if isinstance(error, FencedError):
            self._fenced = error
            log.warning("writer of %s/%d fenced: a newer owner took over", self.topic,
                        self.partition)
        else:
            with contextlib.suppress(KafkaError):
                await self.producer.abort_transaction()
        for pending in batch:
            if not pending.result.done():
                pending.result.set_exception(error)
