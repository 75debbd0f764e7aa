"""Which failed transactions retire the writer's producer (KIP-890's lesson): those whose
requests may still reach the broker late. A refusal is aborted; a silence is not.

The writer runs here on a producer that answers as told, with no broker: what is checked
is the decision (retire, or abort and go on), not Kafka (tests/chaos/test_late_requests.py
delays a real EndTxn through a proxy)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as kafka
from aiokafka.producer.message_accumulator import BatchBuilder

from ares.errors import AresError, FencedError, WriterRetired
from ares.events.kafka.errors import UnansweredRequest, result_unknown
from ares.events.kafka.partition_writer import PartitionWriter
from ares.events.model import NewEvent
from ares.events.writer import StreamTable


@pytest.mark.parametrize("exc", [
    UnansweredRequest("EndTxn (commit) got no answer"),
    TimeoutError(),
    kafka.KafkaTimeoutError(),
    kafka.RequestTimedOutError(),
    kafka.KafkaConnectionError("connection reset"),
    kafka.NodeNotReadyError(),
    kafka.UnknownError(),
    ConnectionResetError(),
])
def test_a_silence_or_an_unknown_answer_leaves_the_outcome_unknown(exc: BaseException) -> None:
    assert result_unknown(exc)


@pytest.mark.parametrize("exc", [
    kafka.ProducerFenced(),  # fenced: the producer is done anyway, by a newer owner
    kafka.InvalidProducerEpoch(),
    kafka.InvalidTxnState(),  # refusals: the broker did nothing of the request
    kafka.OutOfOrderSequenceNumber(),
    kafka.RecordTooLargeError(),
    kafka.TransactionalIdAuthorizationFailed(),
    AresError("a work item's own failure"),
])
def test_a_refusal_is_a_known_outcome(exc: BaseException) -> None:
    assert not result_unknown(exc)


class _Producer:
    """Batches acknowledged at once; the commit answers ``commit_error``, or never."""

    def __init__(self, commit_error: BaseException | None, *, answers: bool = True) -> None:
        self.commit_error = commit_error
        self.answers = answers
        self.aborts = 0
        self.commits = 0
        self.committing = asyncio.Event()

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(1 << 20, 0, is_transactional=True)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(type("Sent", (), {"offset": 0})())
        return done

    async def begin_transaction(self) -> None:
        return None

    async def commit_transaction(self) -> None:
        self.commits += 1
        self.committing.set()
        if not self.answers:
            await asyncio.Event().wait()  # aiokafka retrying an unanswered EndTxn
        if self.commit_error is not None:
            raise self.commit_error

    async def abort_transaction(self) -> None:
        self.aborts += 1

    async def stop(self) -> None:
        return None


async def _append_twice(producer: _Producer) -> tuple[PartitionWriter, BaseException,
                                                       BaseException]:
    writer = PartitionWriter(producer, "t", 0, StreamTable(), 1 << 20,
                             request_timeout_s=0.2)
    writer.start()
    try:
        errors: list[BaseException] = []
        for _ in range(2):
            with pytest.raises(AresError) as raised:
                await writer.append("agent-1", [NewEvent("step.done", "tests", {})], 0)
            errors.append(raised.value)
        return writer, errors[0], errors[1]
    finally:
        await writer.stop()


async def test_an_unanswered_end_txn_retires_the_producer_without_an_abort() -> None:
    producer = _Producer(None, answers=False)
    writer, first, second = await _append_twice(producer)
    assert isinstance(first, WriterRetired)
    assert "EndTxn (commit) of t/0 got no answer within 0.2 s" in str(first)
    assert writer.retired
    assert isinstance(second, WriterRetired)  # refused at once: this producer writes no more
    assert producer.commits == 1
    assert producer.aborts == 0  # an abort of the same epoch could be overtaken too


async def test_a_dropped_connection_at_the_commit_retires_the_producer() -> None:
    producer = _Producer(kafka.KafkaConnectionError("reset by peer"))
    writer, first, _second = await _append_twice(producer)
    assert isinstance(first, WriterRetired)
    assert writer.retired
    assert producer.aborts == 0


async def test_a_refused_commit_is_aborted_and_the_writer_goes_on() -> None:
    producer = _Producer(kafka.InvalidTxnState())
    writer, first, second = await _append_twice(producer)
    assert not isinstance(first, FencedError)
    assert not writer.fenced
    assert producer.commits == 2  # the second append ran a transaction of its own
    assert producer.aborts == 2
    assert not isinstance(second, FencedError)


async def test_a_stop_while_a_commit_waits_is_a_stop_not_a_timeout() -> None:
    """The watchdog's interruption and a stop's cancellation are told apart."""
    producer = _Producer(None, answers=False)
    writer = PartitionWriter(producer, "t", 0, StreamTable(), 1 << 20,
                             request_timeout_s=3600)
    writer.start()
    append = asyncio.ensure_future(
        writer.append("agent-1", [NewEvent("step.done", "tests", {})], 0))
    await producer.committing.wait()  # the commit is in flight
    await writer.stop()
    with pytest.raises(AresError, match="the partition writer stopped"):
        await append
    assert not writer.retired
