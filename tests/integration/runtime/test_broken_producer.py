"""A partition writer whose producer broke beyond repair, on the real broker.

aiokafka answers an error it does not expect from the transaction coordinator (an
``UnknownError`` to EndTxn while a broker restarts, seen in the chaos run) by putting the
producer in a fatal state: every later begin and abort raises. These tests put a real
producer in that state the way aiokafka does (``fatal_error`` on its transaction manager:
the one private name used, because no broker fault reproduces the coordinator's answer on
demand) and check the way out: the writer retires, its appends fail at once instead of
forever, and the runtime manager takes the partition over again with a new producer, so
the agents that were working finish, no recorded step run twice.
"""

from __future__ import annotations

import asyncio
import uuid

from aiokafka.errors import UnknownError

from ares.config import Settings
from ares.errors import AresError, WriterRetired
from ares.events.kafka.partition_writer import PartitionWriter
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.store import open_writer
from ares.events.model import ANY_VERSION, NewEvent
from tests.integration.runtime.test_worker_death import (
    assert_streams_intact,
    start_fleet,
)
from tests.support.kafka import applied_topics, temp_topics
from tests.support.workers import has, in_process_manager, wait_fleet


def break_producer(writer: PartitionWriter) -> None:
    """What aiokafka's sender does when the coordinator answers EndTxn unexpectedly."""
    writer.producer._txn_manager.fatal_error(UnknownError())


async def test_a_writer_whose_producer_broke_retires_and_a_new_one_carries_on(
    kafka_bootstrap: str,
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap)
    topic = f"bp-writer-{uuid.uuid4().hex[:8]}"
    async with temp_topics(kafka_bootstrap, [topic]):
        scanner = await PartitionScanner.open(settings)
        broken = await open_writer(settings, topic, 0, scanner)
        try:
            assert await broken.append("s", [NewEvent("test.step", "test")], ANY_VERSION) == 1
            break_producer(broken)
            first = asyncio.ensure_future(
                broken.append("s", [NewEvent("test.step", "test")], 1))
            _done, hung = await asyncio.wait([first], timeout=30)
            assert not hung, "an append on a broken producer never ended"
            assert isinstance(first.exception(), AresError)
            assert broken.retired
            assert broken.fenced
            later = asyncio.ensure_future(
                broken.append("s", [NewEvent("test.step", "test")], 1))
            _done, hung = await asyncio.wait([later], timeout=30)
            assert not hung
            assert isinstance(later.exception(), WriterRetired)
        finally:
            await broken.stop()  # a producer in a fatal state stops without raising
        successor = await open_writer(settings, topic, 0, scanner)
        try:
            # The failed append left nothing: the stream goes on at version 2.
            assert await successor.append("s", [NewEvent("test.step", "test")], 1) == 2
        finally:
            await successor.stop()
            await scanner.close()


async def test_the_owner_takes_a_partition_over_again_when_its_producer_broke(
    kafka_bootstrap: str,
) -> None:
    """The producer breaks while every agent is mid-task and no command is coming: the
    owner notices the retired writer by itself, and a second writer finishes the work."""
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"bp-{uuid.uuid4().hex[:8]}.", request_timeout_s=30.0)
    agents = [f"bp-{i:02d}" for i in range(8)]
    async with (applied_topics(settings, partitions=1) as topics,
                in_process_manager(settings, topics) as manager):
        await start_fleet(settings, topics, agents, {"steps": 40, "step_ms": 50})
        busy = await wait_fleet(settings, topics, agents, has("llm.call"), 60,
                                "working")
        assert all(not has("task.completed")(busy[a]) for a in agents), \
            "the fault must hit agents in the middle of their task"
        broken = manager.owner.writers[0]
        break_producer(broken)
        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 90,
                                 "done with their task")
        renewed = manager.owner.writers[0]
    assert broken.retired
    assert renewed is not broken
    assert not renewed.fenced
    assert renewed.committed_end > broken.committed_end  # the new producer did the rest
    assert_streams_intact(fleet, agents)
    for agent in agents:
        steps = [str(e.payload["name"]) for e in fleet[agent] if e.type == "llm.call"]
        assert sorted(steps) == sorted(f"step-{i}" for i in range(40)), (agent, steps)
