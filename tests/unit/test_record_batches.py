"""The partition writer fills aiokafka's record batches through the C record builder
(``Transaction._add``): the batches it sends must hold exactly the records, offsets and
counts that aiokafka's public ``BatchBuilder.append`` would have given them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch

from ares.events.kafka.partition_writer import PartitionWriter, Transaction
from ares.events.model import NewEvent
from ares.events.writer import StreamTable


class _CapturingProducer:
    """What the writer asks of a producer while it stages and flushes a transaction."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.sent: list[BatchBuilder] = []

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self.batch_size, 0, is_transactional=True)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        self.sent.append(batch)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _records(batch: BatchBuilder) -> list[tuple[int, bytes | None, bytes | None, list[Any]]]:
    return [(r.offset, r.key, r.value, list(r.headers))
            for r in DefaultRecordBatch(bytes(batch._build()))]


def _staged_batches(batch_size: int, appends: int) -> tuple[list[BatchBuilder], list[int]]:
    producer = _CapturingProducer(batch_size)
    writer = PartitionWriter(producer, "t", 0, StreamTable(), 1 << 20)  # type: ignore[arg-type]
    tx = Transaction(writer)
    versions = [tx.stage(f"agent-{i % 3}", [NewEvent("step.done", "tests", {"n": i}),
                                           NewEvent("step.noted", "tests", {"i": i})], -1)
                for i in range(appends)]
    asyncio.run(tx.flush())
    return producer.sent, versions


@pytest.mark.parametrize(("batch_size", "appends"), [(1 << 20, 5), (2048, 12)])
def test_staged_batches_hold_what_the_public_append_would(batch_size: int, appends: int) -> None:
    sent, versions = _staged_batches(batch_size, appends)
    assert versions == [2 * (i // 3) + 2 for i in range(appends)]
    if batch_size < 4096:
        assert len(sent) > 1  # records spilled over into further batches
    for batch in sent:
        ours = _records(batch)
        reference = BatchBuilder(batch_size, 0, is_transactional=True)
        for _, key, value, headers in ours:
            assert reference.append(timestamp=None, key=key, value=value,
                                    headers=headers) is not None
        assert batch.record_count() == reference.record_count() == len(ours)
        assert [r[0] for r in ours] == list(range(len(ours)))
        assert _records(reference) == ours
        assert batch.closed()
    total = sum(len(_records(batch)) for batch in sent)
    assert total == 2 * appends
