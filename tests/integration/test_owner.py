"""The partition owner on the real broker: commands in, events and replies out, bad input
dead-lettered with its reason and original bytes while the owner keeps serving."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import fastavro
import pytest
from aiokafka import AIOKafkaProducer

from ares.client import Client
from ares.commands.deadlines import EXPIRED_REASON, EXPIRED_REPLY
from ares.commands.model import DEADLINE, append_command
from ares.config import Settings
from ares.errors import ConflictError, UnavailableError
from ares.events.chain import verify_chain
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.events.wire.schemas import COMMAND, registry
from ares.runtime_manager.owner import PartitionOwner
from ares.tasks import wait_for
from ares.topics import COMMANDS, DLQ, TopicPlan
from tests.support.kafka import applied_topics, drain_records

MAX_RECORD = 64 * 1024


@pytest.fixture(scope="module")
def owner_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"own-{uuid.uuid4().hex[:8]}.",
                    max_record_bytes=MAX_RECORD, request_timeout_s=15.0)


@pytest.fixture(scope="module")
async def plan(owner_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(owner_settings) as plan:
        yield plan


@pytest.fixture(scope="module")
async def owner(owner_settings: Settings, plan: TopicPlan) -> AsyncIterator[PartitionOwner]:
    owner = PartitionOwner(owner_settings, plan, session_timeout_ms=6000)
    await owner.start()
    yield owner
    await owner.stop()


@pytest.fixture
async def client(owner_settings: Settings, plan: TopicPlan,
                 owner: PartitionOwner) -> AsyncIterator[Client]:
    async with Client(owner_settings, plan, issuer="test") as client:
        yield client


def note(n: int) -> NewEvent:
    return NewEvent(type="test.noted", module="owner-test", payload={"n": n})


async def test_appends_through_commands_get_versions_and_conflicts(
    client: Client, owner_settings: Settings, plan: TopicPlan
) -> None:
    stream = f"agent-{uuid.uuid4().hex[:8]}"
    assert await client.append(stream, [note(1), note(2)], expected_version=0) == 2
    with pytest.raises(ConflictError) as conflict:
        await client.append(stream, [note(3)], expected_version=0)
    assert (conflict.value.expected, conflict.value.actual) == (0, 2)
    assert await client.append(stream, [note(3)], expected_version=2) == 3

    reader = await KafkaEventStore.open(owner_settings, owned=[], topic=plan.name("ares.events"))
    try:
        events = await reader.read(stream)
    finally:
        await reader.close()
    assert [e.payload["n"] for e in events] == [1, 2, 3]
    verify_chain(events)


async def test_a_retried_command_is_applied_once(client: Client) -> None:
    stream = f"agent-{uuid.uuid4().hex[:8]}"
    command = append_command(stream, [note(1)], expected_version=0, issuer="test")
    first = await client.send(command)
    again = await client.send(command)  # e.g. the caller timed out and retried
    assert (first.status, first.stream_version) == ("ok", 1)
    assert (again.status, again.stream_version) == ("ok", 1)


async def test_a_command_on_the_wrong_partition_is_forwarded(
    client: Client, owner_settings: Settings, plan: TopicPlan
) -> None:
    stream = f"agent-{uuid.uuid4().hex[:8]}"
    home = partition_for(stream, plan.partitions)
    wrong = (home + 1) % plan.partitions
    command = replace(append_command(stream, [note(1)], 0, issuer="test"),
                      reply_to=str(client.reply_partition))
    waiter = client.expect_reply(command.id)
    producer = AIOKafkaProducer(bootstrap_servers=owner_settings.kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(plan.name(COMMANDS), command.encode(),
                                     key=stream.encode(), partition=wrong)
    finally:
        await producer.stop()
    reply = await wait_for(waiter, 30)
    assert (reply.status, reply.stream_version) == ("ok", 1)


async def test_bad_input_is_dead_lettered_and_the_owner_keeps_serving(
    client: Client, owner: PartitionOwner, owner_settings: Settings, plan: TopicPlan
) -> None:
    stream = f"agent-{uuid.uuid4().hex[:8]}"
    valid = append_command(stream, [note(1)], 0).encode()
    unknown_type = _command_with_type(stream, "agent.explode")
    # (input, the reasons the codec may give for it)
    bad_inputs = [
        (b"this is not avro at all", {"bad_magic"}),
        (b"\xc3\x01" + b"\x99" * 8 + valid[10:], {"unknown_fingerprint"}),
        (valid[: len(valid) // 2], {"truncated", "schema_mismatch"}),
        (b"\xc3\x01" + b"\x00" * (MAX_RECORD + 1), {"oversized"}),
        (unknown_type, {"unknown_command"}),
    ]
    producer = AIOKafkaProducer(bootstrap_servers=owner_settings.kafka_bootstrap,
                                max_request_size=4 * MAX_RECORD)
    await producer.start()
    try:
        for value, _ in bad_inputs:
            await producer.send_and_wait(plan.name(COMMANDS), value, key=stream.encode())
    finally:
        await producer.stop()
    # Served after all that: the reply proves every bad record before it was handled.
    assert await client.append(stream, [note(1)], expected_version=0) == 1

    letters = [DeadLetter.from_record(r.key, r.value, r.headers)
               for r in await drain_records(owner_settings.kafka_bootstrap, plan.name(DLQ),
                                            partitions=plan.topic(DLQ).partitions)
               if r.key == stream.encode()]
    assert len(letters) == len(bad_inputs)
    by_value = {letter.value: letter for letter in letters}
    for value, reasons in bad_inputs:
        letter = by_value[value]  # the original bytes, whole
        assert letter.reason in reasons
        assert letter.source_topic == plan.name(COMMANDS)
        assert letter.detail
        assert letter.source_offset >= 0


async def test_no_owner_means_a_clear_unavailable_error(kafka_bootstrap: str) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"noown-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=1) as plan, \
            Client(settings, plan) as lonely:
        with pytest.raises(UnavailableError, match="ares run runtime-manager"):
            await lonely.append("agent-x", [note(1)], timeout_s=2)


def _command_with_type(stream: str, command_type: str) -> bytes:
    """Valid Avro of the Command schema whose type names no known command."""
    schema = registry().get(COMMAND)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema.parsed, {
        "id": str(uuid.uuid4()), "stream_id": stream, "type": command_type, "issuer": "test",
        "timestamp": 0, "payload": ("ares.v1.command.StopAgent", {"reason": ""}),
        "reply_to": None, "metadata": {},
    })
    return b"\xc3\x01" + schema.fingerprint + buffer.getvalue()


async def test_a_command_found_past_its_deadline_is_answered_and_dead_lettered_not_run(
    client: Client, owner_settings: Settings, plan: TopicPlan
) -> None:
    """A command found after the deadline its sender asked for is refused, not run:
    answered "expired" and dead-lettered with its reason."""
    stream = f"agent-{uuid.uuid4().hex[:8]}"
    stale = replace(append_command(stream, [note(1)], 0, issuer="test"),
                    reply_to=str(client.reply_partition),
                    metadata={DEADLINE: str(int(time.time() * 1000) - 1)})
    waiter = client.expect_reply(stale.id)
    producer = AIOKafkaProducer(bootstrap_servers=owner_settings.kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(plan.name(COMMANDS), stale.encode(), key=stream.encode())
    finally:
        await producer.stop()
    reply = await wait_for(waiter, 30)
    assert reply.status == "rejected"
    assert reply.message == EXPIRED_REPLY
    assert await client.append(stream, [note(2)], expected_version=0) == 1  # nothing ran
    # Answered and kept: the dead letter has the reason and the original bytes.
    records = await drain_records(owner_settings.kafka_bootstrap, plan.name(DLQ),
                                  partitions=plan.topic(DLQ).partitions)
    [letter] = [d for d in (DeadLetter.from_record(r.key, r.value, r.headers) for r in records)
                if d.key == stream.encode()]
    assert letter.reason == EXPIRED_REASON
    assert letter.value == stale.encode()
    assert "the sender's deadline" in letter.detail
