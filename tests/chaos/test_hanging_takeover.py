"""A runtime manager assigned a partition it must refuse (a hanging transaction holds its
LSO) stays a healthy member: it keeps its session through the long takeover, serves its
other partitions, holds the refused partition's commands, and takes it over by itself once
an operator has aborted the hanging transaction.

The chaos run that found this (seed 20261130, clean-clone CI): aiokafka sends no heartbeat
while an assignment callback runs, the hanging-transaction wait (10 s) outlasted the 6 s
session, so every member that got the partition was expelled mid-takeover, the group
rebalanced every 6 s for minutes, and the refusal was never logged. A foreign open
transaction stands in for the hanging one here, as in test_hanging_transaction.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from ares.client import Client
from ares.config import Settings
from ares.events.kafka import store as kafka_store
from ares.events.kafka.internals import group_generation
from ares.events.kafka.routing import partition_for
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.runtime_manager import owner as owner_module
from ares.runtime_manager.owner import PartitionOwner
from ares.tasks import wait_for
from ares.topics import EVENTS
from tests.support.kafka import applied_topics, undecided_record

SESSION_TIMEOUT_MS = 6000  # the broker's minimum
HANGING_WAIT_S = 8.0  # longer than the session: the takeover outlives it


def _stream_on(partition: int, partitions: int, tag: str) -> str:
    return next(s for i in range(10_000)
                if partition_for(s := f"{tag}-{i}", partitions) == partition)


async def _until(condition: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g}s")
        await asyncio.sleep(0.2)


async def test_a_refused_partition_waits_for_the_operator_and_its_member_stays(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(kafka_store, "HANGING_TRANSACTION_WAIT_S", HANGING_WAIT_S)
    monkeypatch.setattr(owner_module, "TAKEOVER_RETRY_S", 1.0)
    settings = Settings(kafka_bootstrap=kafka_bootstrap, request_timeout_s=15.0,
                        topic_prefix=f"hangto-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=2) as plan:
        topic = plan.name(EVENTS)
        blocked, free = _stream_on(0, 2, "agent-blocked"), _stream_on(1, 2, "agent-free")
        owner = PartitionOwner(settings, plan, session_timeout_ms=SESSION_TIMEOUT_MS)
        async with undecided_record(kafka_bootstrap, topic, blocked, 0) as intruder:
            try:
                await owner.start()
                await wait_for(owner.ready.wait(), 90)
                assert sorted(owner.writers) == [1], "partition 0 must be refused, 1 served"
                assert owner.waiting_partitions == {0}
                assert any("hanging) transaction" in r.getMessage() for r in caplog.records)
                assert owner._consumer is not None
                generation = group_generation(owner._consumer)

                async with Client(settings, plan, issuer="test") as client:
                    # The sibling partition is served while partition 0 waits.
                    assert await client.append(free, [NewEvent("test.noted", "t", {})], 0) == 1
                    # A command for the refused partition waits (paused, not skipped)...
                    waiting = asyncio.create_task(client.append(
                        blocked, [NewEvent("test.noted", "t", {"n": 1})], 0, timeout_s=90))
                    await asyncio.sleep(2 * SESSION_TIMEOUT_MS / 1000)
                    assert not waiting.done()
                    # ...until the operator aborts the hanging transaction: then it is served.
                    await intruder.abort_transaction()
                    assert await waiting == 1
                await _until(lambda: sorted(owner.writers) == [0, 1], "both partitions owned")
                assert owner.waiting_partitions == set()
                # One membership all along: never expelled by the long takeovers.
                assert group_generation(owner._consumer) == generation
            finally:
                await owner.stop()
        reader = await KafkaEventStore.open(settings, owned=[], topic=topic)
        try:
            events = await reader.read(blocked)
        finally:
            await reader.close()
        assert [(e.version, e.payload) for e in events] == [(1, {"n": 1})]
