"""A late EndTxn cannot land in the next transaction (KIP-890's lesson, issue 40).

aiokafka 0.14 speaks the old transaction protocol: every transaction of a producer epoch
looks alike to the broker, so an EndTxn that timed out on the client but is still on its
way would commit (or abort) whatever transaction the same epoch has open when it arrives.
Here the writer's route to the broker, a proxy of the test's own broker, delays the EndTxn
of one transaction far past the producer's request timeout. The writer gives up waiting,
retires its producer, and a new producer with the same transactional id (the owner's
takeover) bumps the epoch and goes on writing transactions while the late EndTxn reaches
the broker. read_committed then shows every transaction's records exactly once, and the
old producer, heard again, is refused as fenced.

The old producer is deliberately left running after its writer retired (the owner would
stop it): its late request stays in flight, and its retry after the heal brings the
broker's answer back, which is the evidence that the late request met a newer epoch.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import errors as kafka

from ares.chaos.cluster import ChaosCluster, ServiceSpec
from ares.config import Settings
from ares.errors import AresError, WriterRetired
from ares.events.chain import verify_chain
from ares.events.kafka.partition_writer import PartitionWriter, transactional_id
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.store import KafkaEventStore, open_writer
from ares.events.kafka.transactions import CoordinatorView, describe_transaction
from ares.events.model import NewEvent
from ares.tasks import wait_for
from tests.support.kafka import temp_topics

OLD, NEW = "old-writer", "new-writer"  # one proxied route each to the broker
REQUEST_TIMEOUT_S = 2.0
# The route's delay once the commit starts: toxiproxy holds each direction half of it, give
# or take an eighth (its jitter). The EndTxn thus reaches the broker 15 to 25 s later, long
# after the writer gave up (2 s) and its successor took over.
LATENCY_MS = 40_000
LATEST_ARRIVAL_S = LATENCY_MS / 2000 + LATENCY_MS / 8000
STREAM = "agent-late"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ChaosCluster]:
    """A broker of the test's own, reached by each writer through a proxy of its own
    (toxiproxy when it can be built, else the built-in proxy)."""
    made = ChaosCluster(tmp_path, [ServiceSpec(OLD, [], proxied=True),
                                   ServiceSpec(NEW, [], proxied=True)], with_postgres=False)
    try:
        try:
            await made.start_broker()
        except AresError as exc:
            pytest.fail(f"the test's broker did not start: {exc}", pytrace=False)
        await made.start_proxies()
        yield made
    finally:
        await made.close()


def _events(label: str, count: int = 2) -> list[NewEvent]:
    return [NewEvent("test.step", "tests", {"txn": label, "n": n}) for n in range(count)]


async def _described(scanner: PartitionScanner, tid: str) -> CoordinatorView:
    view = await describe_transaction(scanner.client, tid)
    assert view is not None, f"the coordinator does not describe {tid}"
    return view


async def _retired_by_a_late_commit(old: PartitionWriter, cluster: ChaosCluster
                                     ) -> tuple[asyncio.Future[Any], float]:
    """Append transaction B with its commit delayed on the way: the writer retires. Returns
    the producer's own commit, still waiting for the late EndTxn, and when it was sent."""
    commit = old.producer.commit_transaction
    late: list[asyncio.Future[Any]] = []
    sent: list[float] = []

    async def delayed() -> None:
        await cluster.proxies.latency(OLD, LATENCY_MS)
        sent.append(time.monotonic())
        # Kept apart from the writer's wait: the writer stops waiting, the producer not.
        late.append(asyncio.ensure_future(commit()))
        await asyncio.shield(late[0])

    old.producer.commit_transaction = delayed
    with pytest.raises(WriterRetired) as retired:
        await old.append(STREAM, _events("B"), 2)
    assert late, "the fault never hit the commit"
    assert "EndTxn (commit)" in str(retired.value)
    assert f"got no answer within {REQUEST_TIMEOUT_S:g} s" in str(retired.value)
    assert old.retired
    assert not late[0].done(), "the EndTxn was answered: nothing is late"
    return late[0], sent[0]


async def _fenced_takeover(settings: Settings, topic: str, scanner: PartitionScanner,
                           before: CoordinatorView) -> PartitionWriter:
    """The owner's takeover: a new producer whose init_transactions bumps the epoch."""
    new = await open_writer(settings, topic, 0, scanner)
    after = await _described(scanner, transactional_id(topic, 0))
    assert (after.producer_id, after.producer_epoch) != (before.producer_id,
                                                         before.producer_epoch)
    if after.producer_id == before.producer_id:
        assert after.producer_epoch > before.producer_epoch
    return new


async def test_a_late_end_txn_cannot_land_in_the_next_transaction(
    cluster: ChaosCluster,
) -> None:
    direct = Settings(kafka_bootstrap=cluster.bootstrap, request_timeout_s=REQUEST_TIMEOUT_S)
    topic = f"late-{uuid.uuid4().hex[:8]}"
    async with temp_topics(cluster.bootstrap, [topic]):
        scanner = await PartitionScanner.open(direct)
        old = await open_writer(replace(direct, kafka_bootstrap=cluster.mesh.bootstrap(OLD)),
                                topic, 0, scanner)
        new: PartitionWriter | None = None
        try:
            # Busy before the fault: transaction A committed through the proxy.
            assert await old.append(STREAM, _events("A"), 0) == 2
            before = await _described(scanner, transactional_id(topic, 0))
            late, sent_at = await _retired_by_a_late_commit(old, cluster)
            new = await _fenced_takeover(
                replace(direct, kafka_bootstrap=cluster.mesh.bootstrap(NEW)), topic, scanner,
                before)
            # B was aborted by the fence, unless its EndTxn arrived before it: the new
            # writer's scan says which, and the log must agree below.
            version = new.table.head(STREAM).version
            assert version in (2, 4)
            expected = ["A", "A"] + (["B", "B"] if version == 4 else [])

            # Transactions C0, C1, ... back to back until after the late EndTxn arrived.
            k = 0
            while k < 3 or time.monotonic() < sent_at + LATEST_ARRIVAL_S + 2:
                version = await new.append(STREAM, _events(f"C{k}"), version)
                expected += [f"C{k}"] * 2
                k += 1
            assert not late.done(), "the late EndTxn must be in flight all along"

            # Healed, the old producer hears from the broker: its epoch is fenced.
            await cluster.proxies.heal(OLD)
            with pytest.raises((kafka.ProducerFenced, kafka.InvalidProducerEpoch)):
                await wait_for(late, 60)
            assert await new.append(STREAM, _events(f"C{k}"), version) == version + 2
            expected += [f"C{k}"] * 2
        finally:
            for writer in (old, new):
                if writer is not None:
                    await writer.stop()
            await scanner.close()

        reader = await KafkaEventStore.open(direct, owned=[], topic=topic)
        try:
            events = await reader.read(STREAM)
        finally:
            await reader.close()
    verify_chain(events)  # contiguous versions, one chain: nothing of B mixed into a C
    assert [e.payload["txn"] for e in events] == expected
    assert [e.payload["n"] for e in events] == [0, 1] * (len(expected) // 2)
