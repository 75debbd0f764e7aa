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
from typing import Any, Final, Protocol

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.producer.message_accumulator import BatchBuilder

from ares import metrics
from ares.errors import AresError, FencedError, RecordTooLargeError, WriterRetired
from ares.events.kafka.batch_future import BatchFuture, wake
from ares.events.kafka.errors import UnansweredRequest, result_unknown, translate
from ares.events.kafka.internals import record_builder, set_record_count
from ares.events.model import NewEvent, utc_now
from ares.events.writer import AppendPlan, StreamState, StreamTable
from ares.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# Bounds one transaction, so one huge burst cannot delay every append behind it.
MAX_ITEMS_PER_TRANSACTION = 2000

_monotonic: Final = time.monotonic
_NEVER: Final = float("inf")


def transactional_id(events_topic: str, partition: int) -> str:
    """The same id for every owner of the partition: that is what makes fencing work."""
    return f"{events_topic}.writer-{partition}"


class TransactionScope(Protocol):
    """What a work item may do inside the writer's current transaction: append, send a
    record (a reply, a dead letter, a snapshot), commit consumed offsets.

    A protocol, so that a work item's helper can wrap it (the runtime's command stamping)
    without subclassing ``Transaction``: this module is compiled (``ares.native``), and an
    interpreted class cannot inherit from a compiled one.
    """

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int: ...

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> None: ...

    async def commit_offsets(self, offsets: dict[TopicPartition, int],
                             group_id: str) -> None: ...


class Transaction:
    """The writer's current transaction (a ``TransactionScope`` for work items).

    Appended events are staged in record batches of our own and handed to the producer
    whole (``send_batch``) when the work items are done: one closed batch per group of
    appends instead of one ``send`` per event, so the producer neither lingers on an open
    batch nor pays its per-record bookkeeping.
    """

    def __init__(self, writer: PartitionWriter) -> None:
        self._writer = writer
        # Heads before this transaction of every stream it appends to, to undo an abort.
        self.saved: dict[str, StreamState | None] = {}
        # Each staged append with the place of each of its records: (batch, relative offset).
        self._staged: list[tuple[AppendPlan, list[tuple[int, int]]]] = []
        self._batches: list[BatchBuilder] = []
        # Each batch's C record builder (internals.record_builder) and its records so far.
        self._records: list[Any] = []
        self._counts: list[int] = []
        self._sent: list[asyncio.Future[Any]] = []
        # One timestamp for every event this transaction appends (they commit together).
        self.now = utc_now()

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int:
        """Check, seal and stage an append; raises ConflictError etc. for this item only."""
        return self.stage(stream_id, events, expected_version)

    def stage(self, stream_id: str, events: Sequence[NewEvent], expected_version: int) -> int:
        """``append`` without a coroutine: the writer's own fast path."""
        writer = self._writer
        table = writer.table
        plan = table.plan(stream_id, events, expected_version, self.now)
        if plan.is_noop:
            return plan.version
        # Indexes rather than zip(..., strict=True): compiled, a builtin called with a
        # keyword is a generic call; a plan's two tuples always match.
        sealed, encoded = plan.events, plan.encoded
        limit = writer.max_record_bytes
        for i, value in enumerate(encoded):
            if len(value) > limit:
                raise RecordTooLargeError(
                    f"event {sealed[i].type!r} of stream {stream_id!r} encodes to {len(value)} "
                    f"bytes, over the {limit}-byte limit (ARES_MAX_RECORD_BYTES)"
                )
        saved = self.saved
        if stream_id not in saved:
            saved[stream_id] = table.save(stream_id)
        table.apply(plan)
        key = stream_id.encode()
        places = [self._add(key, value, [("ares.type", sealed[i].type.encode())])
                  for i, value in enumerate(encoded)]
        self._staged.append((plan, places))
        return plan.version

    def _add(self, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> tuple[int, int]:
        """Put a record in the open batch, or in a new one when it is full; its place.

        aiokafka's ``BatchBuilder.append`` is interpreted code around the C record builder
        (keyword arguments, a serializer check, two attribute updates), paid per record
        (docs/development.md, "The compiled append path: why each trick"). The record goes
        to the C builder
        (``internals.record_builder``) directly instead, and ``flush`` tells each batch its
        record count once (``internals.set_record_count``: aiokafka numbers the batch's
        sequence by it). Private attributes of the aiokafka that pyproject.toml pins,
        checked at every service start (``internals.check``);
        tests/unit/test_record_batches.py checks that the batches hold what the public
        ``append`` would have put in them.
        """
        last = len(self._batches) - 1
        if last >= 0:
            offset = self._counts[last]
            if self._records[last].append(offset, None, key, value, headers) is not None:
                self._counts[last] = offset + 1
                return last, offset
        batch = self._writer.producer.create_batch()
        records = record_builder(batch)
        if records.append(0, None, key, value, headers) is None:  # any first record fits
            raise RecordTooLargeError(f"a {len(value)}-byte record does not fit a record batch")
        self._batches.append(batch)
        self._records.append(records)
        self._counts.append(1)
        return last + 1, 0

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> None:
        await self._writer.producer.send(topic, value, key=key, partition=partition,
                                         headers=list(headers))

    async def commit_offsets(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        writer = self._writer
        await writer.answered(writer.producer.send_offsets_to_transaction(offsets, group_id),
                              "AddOffsetsToTxn/TxnOffsetCommit")

    async def flush(self) -> None:
        """Hand the staged batches to the producer. A closed batch is drained at once
        (no ``linger_ms``)."""
        writer = self._writer
        for batch, count in zip(self._batches, self._counts, strict=True):
            set_record_count(batch, count)  # what its record_count() says (see _add)
            batch.close()
            self._sent.append(await writer.producer.send_batch(batch, writer.topic,
                                                               partition=writer.partition))
        self._batches.clear()
        self._records.clear()
        self._counts.clear()

    async def offsets(self) -> list[tuple[AppendPlan, list[int]]]:
        """Log offsets of every appended event, once the broker acknowledged the batches.

        Awaited *before* the commit: aiokafka's commit waits for the batches but does not
        look at their outcome, so a rejected batch must stop the commit here.
        """
        bases = [(await sent).offset for sent in self._sent]
        return [(plan, [bases[batch] + relative for batch, relative in places])
                for plan, places in self._staged]

    def forget(self) -> None:
        """Retrieve the outcome of batches of a failed transaction (asyncio would warn)."""
        for sent in self._sent:
            if sent.done() and not sent.cancelled():
                sent.exception()


WorkItem = Callable[[Transaction], Awaitable[Any]]


class _Queued(BatchFuture):
    """One submitted item, an append (the fast path) or any other work item, and the future
    of its outcome: one object per append instead of two."""

    __slots__ = ("append", "submitted", "work")

    def __init__(self, loop: asyncio.AbstractEventLoop, work: WorkItem | None,
                 append: tuple[str, Sequence[NewEvent], int] | None) -> None:
        super().__init__(loop)
        self.work = work
        self.append = append
        self.submitted = _monotonic()


class PartitionWriter:
    """Owns partition ``partition`` of ``topic``: the only process that appends to it."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, partition: int,
                 table: StreamTable, max_record_bytes: int,
                 request_timeout_s: float = 10.0) -> None:
        self.producer = producer
        # The producer's own request timeout (Settings.request_timeout_s): a step of a
        # transaction unanswered for this long has a request whose outcome is unknown.
        self.request_timeout_s = request_timeout_s
        self.topic = topic
        self.partition = partition
        self.table = table
        self.max_record_bytes = max_record_bytes
        # Offset after the last event this writer committed: reads wait for the LSO to pass it.
        self.committed_end = 0
        # Called after each commit with every append it made visible, and their offsets:
        # the host reacts to committed events only (an aborted append never happened).
        self.listeners: list[Callable[[AppendPlan, list[int]], None]] = []
        self._queue: list[_Queued] = []
        self._appended = metrics.EVENTS_APPENDED.labels(str(partition))
        self._committed = metrics.TRANSACTIONS.labels("committed")
        # Set while the writer's loop sleeps on an empty queue; the next submission wakes it.
        # A bare future, not an asyncio.Event: every append would call Event.set, which
        # is interpreted, and the loop creates a waiter only when it runs out of work.
        self._idle: asyncio.Future[None] | None = None
        self._fenced: FencedError | None = None
        self._begun = False  # a transaction is open and empty, ready for the next batch
        self._task: asyncio.Task[None] | None = None
        # The loop the writer runs on, once started: asyncio.get_running_loop() costs a
        # getpid() system call on every call in CPython 3.11, and every append needs it.
        self._loop: asyncio.AbstractEventLoop | None = None
        # The step of a transaction in flight (``_watch``): the task waiting for it, which
        # requests it waits for and until when; what the watchdog found overdue.
        self._waiter: asyncio.Task[Any] | None = None
        self._step = ""
        self._due = _NEVER
        self._overdue = ""
        self._watchdog: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name=f"writer-{self.topic}-{self.partition}")
        self._watchdog = asyncio.create_task(
            self._watch(), name=f"writer-watchdog-{self.topic}-{self.partition}")

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        return loop if loop is not None else asyncio.get_running_loop()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task  # a loop that died has said why in the log already
            self._task = None
        await cancel_and_wait(self._watchdog, ignore_errors=True)
        self._watchdog = None
        self._fail_queued(AresError("the partition writer stopped"))
        with contextlib.suppress(KafkaError, AssertionError):  # a fenced producer may refuse
            await self.producer.stop()

    def _fail_queued(self, error: BaseException) -> None:
        for queued in self._queue:
            queued.set_exception(error)
        self._queue.clear()

    @property
    def fenced(self) -> bool:
        """Whether this writer writes no more: fenced by a newer owner, or retired."""
        return self._fenced is not None

    @property
    def retired(self) -> bool:
        """Whether its own producer broke beyond repair (no other owner is involved)."""
        return isinstance(self._fenced, WriterRetired)

    async def submit(self, work: WorkItem) -> Any:
        """Run ``work`` inside the next transaction; its result once that commits."""
        return await self._enqueue(work, None)

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int:
        """Append to a stream of this partition; the new version once committed."""
        return int(await self._enqueue(None, (stream_id, events, expected_version)))

    def _enqueue(self, work: WorkItem | None,
                 append: tuple[str, Sequence[NewEvent], int] | None) -> BatchFuture:
        if self._fenced is not None:
            raise self._fenced
        queued = _Queued(self._event_loop(), work, append)
        self._queue.append(queued)
        idle = self._idle
        if idle is not None and not idle.done():
            idle.set_result(None)
        return queued

    async def _run(self) -> None:
        while True:
            if not self._queue:
                await self._begin_ahead()
            if not self._queue:  # nothing came in while the transaction began
                self._idle = asyncio.Future()
                try:
                    await self._idle
                finally:
                    self._idle = None
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
                except asyncio.CancelledError:
                    # Stopped mid-transaction: its appends end too, not wait for ever.
                    for queued in batch:
                        queued.set_exception(AresError("the partition writer stopped"))
                    raise
                except Exception as exc:  # a client bug must not hang every append
                    log.exception("writer of %s/%d: transaction failed unexpectedly",
                                  self.topic, self.partition)
                    for queued in batch:
                        queued.set_exception(
                            AresError(f"append failed: {type(exc).__name__}: {exc}"))
                    self._begun = False
                    await self._abort_or_retire(exc)

    async def _begin_ahead(self) -> None:
        """Begin the next transaction while there is nothing to do.

        aiokafka's ``begin_transaction`` waits two event-loop turns even when it has nothing
        to wait for; on a busy loop (a fleet appending) that delayed every group commit by
        those turns. A begun, empty transaction is client state only: the broker hears of
        it with its first partition, so an idle writer holds nothing open there.
        """
        if self._begun or self._fenced is not None:
            return
        try:
            await self.producer.begin_transaction()
        except Exception:  # _stage begins again and reports the error
            log.debug("writer of %s/%d: early begin failed", self.topic, self.partition,
                      exc_info=True)
            return
        self._begun = True

    async def _commit(self, batch: list[_Queued]) -> None:
        """One transaction for ``batch``: stage its items, publish them, then settle each
        item's future (on a Kafka error, every item fails and the table is restored)."""
        tx = Transaction(self)
        try:
            outcomes = await self._stage(tx, batch)
            written = await self._publish(tx)
        except (KafkaError, TimeoutError) as exc:
            tx.forget()
            await self._fail(batch, tx, exc)
            return
        self._settle(batch, outcomes, written)

    async def _stage(self, tx: Transaction,
                     batch: list[_Queued]) -> list[tuple[_Queued, Any, BaseException | None]]:
        """Begin the transaction (unless ``_begin_ahead`` did) and run every item in it:
        each item's outcome, its value or its own failure (a conflict, a record too large,
        a bad argument), which fails that item only. Kafka errors propagate."""
        outcomes: list[tuple[_Queued, Any, BaseException | None]] = []
        if self._begun:
            self._begun = False
        else:
            await self.producer.begin_transaction()
        for queued in batch:
            value: Any  # an append's new version, or whatever a work item returns
            try:
                if queued.append is not None:
                    # Unpacked here: a star call would go through the generic
                    # (interpreted-style) entry point of the compiled method.
                    stream_id, events, expected = queued.append
                    value = tx.stage(stream_id, events, expected)
                else:
                    assert queued.work is not None
                    value = await queued.work(tx)
            except (AresError, ValueError) as exc:
                outcomes.append((queued, None, exc))
            else:
                outcomes.append((queued, value, None))
        return outcomes

    async def _publish(self, tx: Transaction) -> list[tuple[AppendPlan, list[int]]]:
        """Send the staged batches, wait for the broker to acknowledge them and commit the
        transaction: every staged append with its events' offsets. Kafka errors propagate
        (the transaction is then aborted by ``_fail``), and so does ``UnansweredRequest``
        when a step waits longer than a request timeout (``answered`` says why)."""
        written: list[tuple[AppendPlan, list[int]]] = await self.answered(
            self._send_and_commit(tx), "produce/AddPartitionsToTxn")
        return written

    async def _send_and_commit(self, tx: Transaction) -> list[tuple[AppendPlan, list[int]]]:
        await tx.flush()
        written = await tx.offsets()
        self._waiting("EndTxn (commit)")  # a step of its own: a request timeout again
        await self.producer.commit_transaction()
        return written

    async def answered(self, step: Awaitable[Any], requests: str) -> Any:
        """``await step``, or ``UnansweredRequest`` once it waited a request timeout.

        aiokafka retries a transaction's requests that time out, for ever, with the same
        producer epoch, and the first copy may still be on its way: the writer stops
        waiting instead and retires the producer (``_fail``). The interruption stops our
        wait only: aiokafka shields its commit and offset futures, and resolves a batch
        only if its future is not done (cancelled) yet.
        """
        self._waiting(requests)
        try:
            return await step
        except asyncio.CancelledError:
            if not self._timed_out():
                raise
            raise self._unanswered() from None
        finally:
            self._waited()

    def _waiting(self, requests: str) -> None:
        """A step begins: the watchdog interrupts it after a request timeout."""
        self._waiter = asyncio.current_task(self._event_loop())  # no getpid (3.11)
        self._step = requests
        self._due = _monotonic() + self.request_timeout_s

    def _waited(self) -> None:
        self._waiter = None
        self._due = _NEVER
        self._overdue = ""

    def _timed_out(self) -> bool:
        """Whether the cancellation just caught is the watchdog's alone; if so, undone (a
        stop's cancellation is never mistaken for it, nor swallowed)."""
        waiter = self._waiter
        return bool(self._overdue) and waiter is not None and waiter.uncancel() == 0

    def _unanswered(self) -> UnansweredRequest:
        return UnansweredRequest(
            f"{self._overdue} of {self.topic}/{self.partition} got no answer within "
            f"{self.request_timeout_s:g} s (the producer's request timeout)")

    async def _watch(self) -> None:
        """Interrupt a step of a transaction still unanswered after a request timeout
        (between 1 and 1.25 timeouts after it began).

        One sleeping task per writer rather than a timer per step: two asyncio.timeout
        per transaction made a one-event transaction cost the writer about 50 % more
        (docs/development.md); a step here writes three attributes.
        """
        period = self.request_timeout_s / 4
        while True:
            await asyncio.sleep(period)
            waiter = self._waiter
            if waiter is not None and not self._overdue and _monotonic() > self._due:
                self._overdue = self._step
                waiter.cancel()

    def _settle(self, batch: list[_Queued],
                outcomes: list[tuple[_Queued, Any, BaseException | None]],
                written: list[tuple[AppendPlan, list[int]]]) -> None:
        """After the commit: the table's first offsets, the listeners, the metrics and
        every item's future."""
        self._committed.inc()
        table = self.table
        appended = 0
        for plan, offsets in written:
            appended += len(offsets)
            table.set_first_offset(plan.stream_id, offsets[0])
            if offsets[-1] >= self.committed_end:
                self.committed_end = offsets[-1] + 1
            for listener in self.listeners:
                try:
                    listener(plan, offsets)
                except Exception:  # a listener's bug must not fail appends that committed
                    log.exception("commit listener failed on stream %s", plan.stream_id)
        self._appended.inc(appended)
        now = _monotonic()
        waited: list[float] = []
        for queued, value, error in outcomes:
            waited.append(now - queued.submitted)
            queued.settle(value, error)
        metrics.APPEND_LATENCY.observe_each(waited)  # one interpreted call per transaction
        # Every waiter of the transaction from one loop callback, not one per append.
        self._event_loop().call_soon(wake, batch)

    async def _fail(self, batch: list[_Queued], tx: Transaction, exc: BaseException) -> None:
        error = translate(exc, f"append to {self.topic}/{self.partition}")
        # Undone here whatever the outcome: a fenced or retired writer writes no more, and
        # its successor's takeover reads what the partition really holds.
        self.table.restore(tx.saved)
        if isinstance(error, FencedError):
            metrics.TRANSACTIONS.labels("fenced").inc()
            self._fenced = error
            log.warning("writer of %s/%d fenced: a newer owner took over", self.topic,
                        self.partition)
        elif result_unknown(exc):
            # No abort: an EndTxn(abort) of the same epoch could itself be overtaken by the
            # late request. The next owner's init_transactions aborts the transaction, or
            # finds it committed, and fences whatever of it is still on its way.
            error = self._retire(exc, "its outcome is unknown")
        else:
            metrics.TRANSACTIONS.labels("aborted").inc()
            await self._abort_or_retire(exc)
        for queued in batch:
            queued.set_exception(error)

    def _retire(self, cause: BaseException, why: str) -> WriterRetired:
        retired = WriterRetired(
            f"the producer of {self.topic}/{self.partition} can no longer write "
            f"({type(cause).__name__}: {cause}; {why}): the partition is taken over again "
            "with a new one")
        self._fenced = retired
        metrics.TRANSACTIONS.labels("retired").inc()
        log.error("writer of %s/%d retired: %s", self.topic, self.partition, retired)
        return retired

    async def _abort_or_retire(self, cause: BaseException) -> None:
        """Abort the failed transaction; a producer that cannot even abort is retired.

        aiokafka turns an error it does not expect from the coordinator (an ``UnknownError``
        answering EndTxn while a broker restarts) into a fatal producer state: from then on
        every begin and abort raises, and a writer that kept it failed every append of its
        partition forever. Like the Java client's fatal errors, the only way on is a new
        producer: the retired writer reports itself fenced, and its owner takes the
        partition over again with a new one, whose initialisation aborts whatever this one
        left open.
        """
        try:
            await self.producer.abort_transaction()
        except KafkaError:
            return  # the broker refused the abort: the next transaction's begin says more
        except Exception as exc:
            self._retire(cause, f"its abort failed: {exc}")
