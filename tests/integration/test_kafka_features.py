"""The broker features ares-mesh stands on, proven against the real broker with aiokafka.

If any of these fails on a Kafka version, that version is not supported (docs/development.md).
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import ProducerFenced

from tests.support.kafka import admin_client, drain, end_transaction, temp_topics


async def test_idempotent_producer_writes_each_record_once(kafka_bootstrap: str,
                                                           unique: str) -> None:
    topic = f"feat-idem-{unique}"
    async with temp_topics(kafka_bootstrap, [topic]):
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True,
                                    acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send(topic, f"m{i}".encode()) for i in range(500)]
            offsets = [(await f).offset for f in futures]
        finally:
            await producer.stop()
        values = await drain(kafka_bootstrap, topic, isolation_level="read_uncommitted")
    assert offsets == list(range(500))
    assert values == [f"m{i}".encode() for i in range(500)]


async def test_transaction_commits_consumed_offsets_with_produced_records(
    kafka_bootstrap: str, unique: str
) -> None:
    source, sink, group = f"feat-tx-in-{unique}", f"feat-tx-out-{unique}", f"feat-tx-{unique}"
    async with temp_topics(kafka_bootstrap, [source, sink]):
        plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await plain.start()
        for i in range(10):
            await plain.send_and_wait(source, f"in{i}".encode())
        await plain.stop()

        consumer = AIOKafkaConsumer(source, bootstrap_servers=kafka_bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    isolation_level="read_committed")
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap,
                                    transactional_id=f"feat-tx-{unique}")
        await consumer.start()
        await producer.start()
        try:
            tp = TopicPartition(source, 0)
            records = (await consumer.getmany(tp, timeout_ms=5000, max_records=6))[tp]
            assert len(records) == 6
            # Processed but aborted: neither output nor offsets may become visible.
            async with producer.transaction():
                await producer.send(sink, b"doomed")
            await producer.begin_transaction()
            await producer.send(sink, b"aborted")
            await producer.send_offsets_to_transaction({tp: records[2].offset + 1}, group)
            await producer.abort_transaction()
            # The real read-process-write transaction.
            async with producer.transaction():
                for record in records:
                    await producer.send(sink, b"out-" + record.value)
                await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, group)
        finally:
            await producer.stop()
            await consumer.stop()

        async with admin_client(kafka_bootstrap) as admin:
            committed = await admin.list_consumer_group_offsets(group)
        outputs = await drain(kafka_bootstrap, sink, isolation_level="read_committed")
    assert committed[TopicPartition(source, 0)].offset == 6
    assert outputs == [b"doomed"] + [f"out-in{i}".encode() for i in range(6)]


async def test_read_committed_never_sees_aborted_records(kafka_bootstrap: str,
                                                         unique: str) -> None:
    topic = f"feat-rc-{unique}"
    async with temp_topics(kafka_bootstrap, [topic]):
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap,
                                    transactional_id=f"feat-rc-{unique}")
        await producer.start()
        try:
            for label, commit in (("a", True), ("b", False), ("c", True), ("d", False)):
                await producer.begin_transaction()
                for i in range(3):
                    await producer.send(topic, f"{label}{i}".encode())
                await end_transaction(producer, commit=commit)
        finally:
            await producer.stop()
        committed = await drain(kafka_bootstrap, topic, isolation_level="read_committed")
        everything = await drain(kafka_bootstrap, topic, isolation_level="read_uncommitted")
    assert committed == [b"a0", b"a1", b"a2", b"c0", b"c1", b"c2"]
    # The aborted records really are in the log: read_committed filtered them out.
    assert {b"b0", b"d2"} <= set(everything)


async def test_new_producer_with_same_transactional_id_fences_the_old_one(
    kafka_bootstrap: str, unique: str
) -> None:
    topic, tid = f"feat-fence-{unique}", f"feat-fence-{unique}"
    async with temp_topics(kafka_bootstrap, [topic]):
        zombie = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid)
        successor = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid)
        await zombie.start()
        try:
            async with zombie.transaction():
                await zombie.send(topic, b"before-takeover")
            await successor.start()  # init_transactions bumps the epoch: the zombie is fenced
            await zombie.begin_transaction()
            with pytest.raises(ProducerFenced):
                await zombie.send_and_wait(topic, b"zombie-write")
            async with successor.transaction():
                await successor.send(topic, b"after-takeover")
        finally:
            await successor.stop()
            await zombie.stop()
        committed = await drain(kafka_bootstrap, topic, isolation_level="read_committed")
    assert committed == [b"before-takeover", b"after-takeover"]


async def test_static_member_gets_its_partitions_back_without_a_rebalance(
    kafka_bootstrap: str, unique: str
) -> None:
    """A restarted member with the same group_instance_id rejoins before its session times
    out: it gets the same partitions, and the other member is never revoked."""
    topic, group = f"feat-static-{unique}", f"feat-static-{unique}"
    revocations: list[set[TopicPartition]] = []

    class CountRevocations(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            if revoked:
                revocations.append(set(revoked))

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            return None

    def member(instance: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group,
                                group_instance_id=instance, session_timeout_ms=30000,
                                heartbeat_interval_ms=500, enable_auto_commit=False)

    async def wait_assigned(consumer: AIOKafkaConsumer, count: int) -> set[TopicPartition]:
        for _ in range(300):
            await consumer.getmany(timeout_ms=100)
            if len(consumer.assignment()) == count:
                return set(consumer.assignment())
        raise AssertionError(f"no assignment of {count} partitions")

    async with temp_topics(kafka_bootstrap, [topic], partitions=4):
        steady, restarting = member("steady"), member("restarting")
        await steady.start()
        await restarting.start()
        steady.subscribe([topic], listener=CountRevocations())
        restarting.subscribe([topic])
        poll_steady = asyncio.create_task(_poll_forever(steady))
        again = member("restarting")
        try:
            first = await wait_assigned(restarting, 2)
            revocations.clear()
            await restarting.stop()  # a static member does not leave the group on stop
            await again.start()
            again.subscribe([topic])
            second = await wait_assigned(again, 2)
            await asyncio.sleep(1.5)  # let any rebalance the rejoin might cause show itself
        finally:
            poll_steady.cancel()
            await asyncio.gather(poll_steady, return_exceptions=True)
            for consumer in (again, restarting, steady):
                await consumer.stop()
    assert second == first
    assert revocations == []


async def _poll_forever(consumer: AIOKafkaConsumer) -> None:
    while True:
        await consumer.getmany(timeout_ms=100)
