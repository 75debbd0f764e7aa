"""Helpers for integration tests that talk to the real broker."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord

from ares.config import Settings
from ares.events.chain import seal_encoded
from ares.events.model import NewEvent, StreamHead
from ares.topics import TopicPlan, apply_topics, delete_topics, load_topics


@asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def temp_topics(
    bootstrap: str, names: Sequence[str], partitions: int = 1
) -> AsyncIterator[list[str]]:
    """Create topics for one test and delete them afterwards."""
    async with admin_client(bootstrap) as admin:
        await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]
        )
        try:
            yield list(names)
        finally:
            await admin.delete_topics(list(names))


@asynccontextmanager
async def started(
    client: AIOKafkaProducer | AIOKafkaConsumer,
) -> AsyncIterator[AIOKafkaProducer | AIOKafkaConsumer]:
    await client.start()
    try:
        yield client
    finally:
        await client.stop()


async def drain(
    bootstrap: str, topic: str, *, isolation_level: str, partitions: int = 1
) -> list[bytes]:
    """Every record value of ``topic`` up to the end, read with the given isolation level."""
    records = await drain_records(bootstrap, topic, partitions=partitions,
                                  isolation_level=isolation_level)
    return [r.value for r in records]


@asynccontextmanager
async def applied_topics(settings: Settings, partitions: int = 4) -> AsyncIterator[TopicPlan]:
    """Every ares topic under ``settings``' prefix, from topics.yaml; deleted afterwards."""
    plan = load_topics(settings, env={"ARES_TOPIC_PARTITIONS": str(partitions)})
    await apply_topics(plan, settings)
    try:
        yield plan
    finally:
        await delete_topics(plan, settings)


async def drain_records(bootstrap: str, topic: str, *, partitions: int = 1,
                        isolation_level: str = "read_committed") -> list[ConsumerRecord]:
    """Every record of ``topic`` up to the end (all partitions up to ``partitions``)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        found: list[ConsumerRecord] = []
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            batch = await consumer.getmany(*tps, timeout_ms=1000)
            for records in batch.values():
                found.extend(records)
        return found
    finally:
        await consumer.stop()


@asynccontextmanager
async def undecided_record(bootstrap: str, topic: str, stream_id: str,
                           partition: int) -> AsyncIterator[AIOKafkaProducer]:
    """A foreign transaction left open with ``stream_id``'s version 1 in it: it holds the
    partition's LSO as a hanging transaction does. Yields its producer (commit or abort
    it to decide the record); stopped afterwards."""
    _, hidden = seal_encoded(stream_id, StreamHead(), NewEvent(
        "task.assigned", "chaos-test", {"task_id": "t1", "input_json": "{}"}), 1)
    intruder = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                transactional_id=f"intruder-{uuid.uuid4().hex}",
                                transaction_timeout_ms=120_000)
    await intruder.start()
    try:
        await intruder.begin_transaction()
        await intruder.send_and_wait(topic, hidden, key=stream_id.encode(),
                                     partition=partition)
        yield intruder
    finally:
        await intruder.stop()


# Broker settings under which ``leave_hanging_transaction`` works: without them the
# partition leader asks the coordinator whether a transactional batch's partition is part of
# the transaction (KIP-890) and refuses it.
UNVERIFIED_TRANSACTIONS = {"transaction.partition.verification.enable": "false"}


async def leave_hanging_transaction(bootstrap: str, transactional_id: str, tp: TopicPartition,
                                    records: Sequence[tuple[bytes, bytes]],
                                    elsewhere: TopicPartition, *, commit: bool) -> None:
    """Leave what the Kafka 4.4 restart race leaves (reliability finding 1): a transaction
    of ``transactional_id`` that its coordinator finished (commit or abort) whose marker
    never reached ``tp``, so ``records`` (key, value) stay undecided there for good.

    The producer writes to ``tp`` without telling the coordinator (the partition is marked
    as added on the client only), plus one record to ``elsewhere``, which the coordinator
    does know: it decides and completes the transaction with markers for ``elsewhere`` only.
    Needs a broker with ``UNVERIFIED_TRANSACTIONS``.
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                acks="all")
    await producer.start()
    try:
        await producer.begin_transaction()
        producer._txn_manager._txn_partitions.add(tp)  # no AddPartitionsToTxn for tp
        for key, value in records:
            await producer.send_and_wait(tp.topic, value, key=key, partition=tp.partition)
        await producer.send_and_wait(elsewhere.topic, b"known to the coordinator",
                                     partition=elsewhere.partition)
        await end_transaction(producer, commit=commit)
    finally:
        await producer.stop()


async def end_transaction(producer: AIOKafkaProducer, *, commit: bool) -> None:
    if commit:
        await producer.commit_transaction()
    else:
        await producer.abort_transaction()
