"""Recovery never trusts anything over the log, on the real broker.

* a corrupted snapshot is never trusted: one with a wrong hash is discarded for a full
  replay, one that is no snapshot at all is skipped for the previous one; either way the
  agent recovers the state the log holds;
* a tampered event (a forged copy of an existing event, or a forged successor) quarantines
  the agent with an ``integrity_failure`` alert instead of resuming it;
* recovery from snapshots plus the tail builds exactly the state a full replay builds.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from ares.agents.host_api import AgentServices
from ares.agents.registry import build_registry
from ares.client import Client
from ares.config import Settings
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.routing import partition_for
from ares.events.kafka.snapshots import Snapshot, load_snapshots
from ares.events.model import Event
from ares.events.wire.codec import decode, encode_event
from ares.lifecycle.recovery import CHECKPOINT_KEY, RecoveryRecord, state_hash
from ares.runtime_manager.host import AgentHost
from ares.runtime_manager.replay import snapshot_state
from ares.runtime_manager.service import RuntimeManager
from ares.tasks import wait_for
from ares.topics import ALERTS, EVENTS, SNAPSHOTS, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.runtime import read_stream, types_of, wait_for_events
from tests.support.workers import TEST_AGENTS, has, wait_fleet, workers

PARTITIONS = 2


@pytest.fixture(scope="module")
def ri_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"ri-{uuid.uuid4().hex[:8]}.",
                    request_timeout_s=20.0)


@pytest.fixture(scope="module")
async def plan(ri_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(ri_settings, partitions=PARTITIONS) as plan:
        yield plan


async def started_manager(settings: Settings, plan: TopicPlan) -> RuntimeManager:
    """An in-process runtime manager, once it owns (and recovered) every partition."""
    manager = RuntimeManager(settings, plan, agents=[TEST_AGENTS], services=AgentServices(),
                             session_timeout_ms=6000)
    await manager.start()
    await wait_for(manager.owner.ready.wait(), 60)
    return manager


async def run_counters(settings: Settings, plan: TopicPlan, agents: Sequence[str],
                       tasks: int, *, snapshot: bool = False) -> None:
    """Each ``test.counter`` agent gets ``tasks`` tasks and completes them; then a snapshot."""
    async with Client(settings, plan, issuer="test-recovery") as client:
        for agent in agents:
            await client.start_agent(agent, "test.counter")
            for i in range(1, tasks + 1):
                await client.assign_task(agent, f"t{i}", None)
        await wait_fleet(settings, plan, agents, has("task.completed", tasks), 60, "done")
        if snapshot:
            for agent in agents:
                await client.command("snapshot.request", agent)


async def produce(settings: Settings, topic: str, partition: int, key: str,
                  value: bytes | None, headers: Sequence[tuple[str, bytes]] = ()) -> None:
    """A plain, non-transactional producer: anyone with write access to the topic."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key.encode(), partition=partition,
                                     headers=list(headers))
    finally:
        await producer.stop()


async def latest_snapshot(settings: Settings, plan: TopicPlan, agent: str) -> Snapshot:
    scanner = await PartitionScanner.open(settings)
    try:
        found = await load_snapshots(scanner, plan.name(SNAPSHOTS), partition_of(plan, agent))
    finally:
        await scanner.close()
    return found[agent]


def partition_of(plan: TopicPlan, agent: str) -> int:
    return partition_for(agent, plan.topic(EVENTS).partitions)


def last_recovery(events: Sequence[Event]) -> RecoveryRecord:
    return RecoveryRecord.from_event([e for e in events if e.type == "agent.resurrected"][-1])


def hosted_counter(manager: RuntimeManager, plan: TopicPlan, agent: str) -> list[str]:
    hosted = manager.host.partitions[partition_of(plan, agent)].agents[agent]
    assert hosted.agent is not None
    return list(hosted.agent.snapshot()["seen"])


async def test_a_corrupted_snapshot_falls_back_to_full_replay(ri_settings: Settings,
                                                              plan: TopicPlan) -> None:
    forged, garbled = f"snap-{uuid.uuid4().hex[:6]}", f"snap-{uuid.uuid4().hex[:6]}"
    manager = await started_manager(ri_settings, plan)
    try:
        await run_counters(ri_settings, plan, [forged, garbled], tasks=4, snapshot=True)
    finally:
        await manager.stop()  # graceful: hand-off and final snapshots
    # The newest snapshot of `forged` now claims another chain head and another state;
    # the newest of `garbled` is not even a snapshot.
    good = await latest_snapshot(ri_settings, plan, forged)
    lie = dataclasses.replace(good, hash="f" * 64, state={**good.state, "agent": {"seen": ["x"]}})
    await produce(ri_settings, plan.name(SNAPSHOTS), partition_of(plan, forged), forged,
                  lie.encode())
    await produce(ri_settings, plan.name(SNAPSHOTS), partition_of(plan, garbled), garbled,
                  b"\xc3\x01not a snapshot at all")

    manager = await started_manager(ri_settings, plan)
    try:
        for agent in (forged, garbled):
            events = await wait_for_events(ri_settings, plan, agent,
                                           has("agent.resurrected"))
            record = last_recovery(events)
            assert record.verified is True, (agent, record)
            assert hosted_counter(manager, plan, agent) == ["t1", "t2", "t3", "t4"]
        record = last_recovery(await read_stream(ri_settings, plan, forged))
        assert record.snapshot_version is None  # full replay
        assert record.snapshot_discarded is not None
        assert "hash_mismatch" in record.snapshot_discarded
        # The state is the log's, not the forged snapshot's: the next task sees 5 tasks.
        async with Client(ri_settings, plan, issuer="test-recovery") as client:
            await client.assign_task(forged, "t5", None)
        events = await wait_for_events(ri_settings, plan, forged, has("task.completed", 5))
        assert [e.payload["output_json"] for e in events
                if e.type == "task.completed"][-1] == '{"seen":5}'
    finally:
        await manager.stop()


async def test_a_graceful_restart_resumes_from_the_final_snapshot_without_a_death(
    ri_settings: Settings, plan: TopicPlan
) -> None:
    agent = f"hand-{uuid.uuid4().hex[:6]}"
    manager = await started_manager(ri_settings, plan)
    try:
        await run_counters(ri_settings, plan, [agent], tasks=3)
    finally:
        await manager.stop()
    final = await latest_snapshot(ri_settings, plan, agent)
    manager = await started_manager(ri_settings, plan)
    try:
        events = await wait_for_events(ri_settings, plan, agent, has("agent.resurrected"))
        assert hosted_counter(manager, plan, agent) == ["t1", "t2", "t3"]
    finally:
        await manager.stop()
    record = last_recovery(events)
    assert record.snapshot_version == final.version
    assert record.verified is True
    assert "agent.dead" not in types_of(events), types_of(events)
    assert "agent.resurrecting" not in types_of(events), types_of(events)


def forged_copy(event: Event, **payload: Any) -> Event:
    """``event`` with a modified payload, same version, same hashes: a tampered record."""
    return dataclasses.replace(event, payload={**event.payload, **payload})


async def test_a_tampered_event_quarantines_the_agent_with_an_alert(ri_settings: Settings,
                                                                    plan: TopicPlan) -> None:
    rewritten, extended = f"tamp-{uuid.uuid4().hex[:6]}", f"tamp-{uuid.uuid4().hex[:6]}"
    manager = await started_manager(ri_settings, plan)
    try:
        await run_counters(ri_settings, plan, [rewritten, extended], tasks=3)
    finally:
        await manager.stop()
    # `rewritten`: an existing event re-encoded with another payload, same version.
    events = await read_stream(ri_settings, plan, rewritten)
    original = next(e for e in events if e.type == "task.assigned")
    await produce(ri_settings, plan.name(EVENTS), partition_of(plan, rewritten), rewritten,
                  encode_event(forged_copy(original, task_id="t-forged")),
                  [("ares.type", original.type.encode())])
    # `extended`: a forged successor of the head whose content does not match its hash.
    events = await read_stream(ri_settings, plan, extended)
    last = events[-1]
    forged_next = dataclasses.replace(original, id=str(uuid.uuid4()), stream_id=extended,
                                      version=last.version + 1, prev_hash=last.hash,
                                      payload={"task_id": "t-forged", "input_json": "null"})
    await produce(ri_settings, plan.name(EVENTS), partition_of(plan, extended), extended,
                  encode_event(forged_next), [("ares.type", b"task.assigned")])

    manager = await started_manager(ri_settings, plan)
    try:
        for agent, kind in ((rewritten, "duplicate"), (extended, "hash_mismatch")):
            events = await wait_for_events(ri_settings, plan, agent, has("agent.quarantined"))
            quarantined = events[-1]
            assert quarantined.type == "agent.quarantined", types_of(events)
            assert quarantined.payload["reason"] == f"integrity:{kind}"
            assert "agent.resurrected" not in types_of(events)
            hosted = manager.host.partitions[partition_of(plan, agent)].agents[agent]
            assert not hosted.running
            # The owner never writes a version the log already holds (its head must not
            # move back to a replayed copy of an old event).
            assert quarantined.version == max(e.version for e in events[:-1]) + 1, [
                f"{e.version}:{e.type}" for e in events]
    finally:
        await manager.stop()
    # Another restart finds the same forgery: the agent is already quarantined for it.
    manager = await started_manager(ri_settings, plan)
    await manager.stop()
    for agent in (rewritten, extended):
        events = await read_stream(ri_settings, plan, agent)
        assert types_of(events).count("agent.quarantined") == 1, types_of(events)
    alerts = [decode(r.value)[1] for r in await drain_records(
        ri_settings.kafka_bootstrap, plan.name(ALERTS), partitions=plan.topic(ALERTS).partitions)]
    for agent in (rewritten, extended):
        mine = [a for a in alerts if a["stream_id"] == agent]
        assert [a["kind"] for a in mine] == ["integrity_failure"], mine
        assert mine[0]["severity"] == "critical"


async def test_a_tampered_event_found_by_a_resurrection_quarantines_the_agent(
    ri_settings: Settings, plan: TopicPlan
) -> None:
    """Not a partition recovery this time: the owner runs on, the agent is killed, and its
    own resurrection (snapshot + its events) meets the forged record."""
    agent = f"tamk-{uuid.uuid4().hex[:6]}"
    manager = await started_manager(ri_settings, plan)
    try:
        await run_counters(ri_settings, plan, [agent], tasks=2)
        events = await read_stream(ri_settings, plan, agent)
        original = next(e for e in events if e.type == "task.assigned")
        await produce(ri_settings, plan.name(EVENTS), partition_of(plan, agent), agent,
                      encode_event(forged_copy(original, task_id="t-forged")),
                      [("ares.type", original.type.encode())])
        async with Client(ri_settings, plan, issuer="test-recovery") as client:
            await client.command("agent.kill", agent)
        events = await wait_for_events(ri_settings, plan, agent, has("agent.quarantined"),
                                       timeout_s=10)
        assert events[-1].payload["reason"] == "integrity:duplicate", types_of(events)
        assert "agent.resurrected" not in types_of(events)
    finally:
        await manager.stop()
    alerts = [decode(r.value)[1] for r in await drain_records(
        ri_settings.kafka_bootstrap, plan.name(ALERTS), partitions=plan.topic(ALERTS).partitions)]
    assert [a["kind"] for a in alerts if a["stream_id"] == agent] == ["integrity_failure"]


# -- snapshot + tail == full replay ------------------------------------------------------


async def recovered_states(settings: Settings, plan: TopicPlan,
                           agents: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Every partition recovered by a fresh host that resumes nothing (so writes nothing):
    each agent's version, chain head, lifecycle, own state and open-task journal."""
    host = AgentHost(settings, plan, build_registry([TEST_AGENTS]), "verifier",
                     services=AgentServices())
    host.stopping = True  # recover, verify and build the agents; do not resume them
    scanner = await PartitionScanner.open(settings)
    try:
        for partition in range(plan.topic(EVENTS).partitions):
            await host.open_partition(partition, scanner)
        states = {}
        for agent in agents:
            hosted = host.partitions[partition_of(plan, agent)].agents[agent]
            assert hosted.agent is not None
            states[agent] = {
                "version": hosted.lifecycle.version, "head": hosted.last_hash,
                "last_offset": hosted.last_offset, "lifecycle": hosted.lifecycle.to_json(),
                "agent": hosted.agent.snapshot(), "journal_from": hosted.journal_from_offset,
                "journal": [e.version for e in hosted.open_events],
                "state_hash": state_hash(snapshot_state(hosted)),
            }
        return states
    finally:
        for state in host.partitions.values():
            await state.writer.stop()
        await host.close()
        await scanner.close()


async def test_snapshot_plus_tail_recovers_what_a_full_replay_recovers(
    ri_settings: Settings, plan: TopicPlan, tmp_path: Path
) -> None:
    counters = [f"tail-{uuid.uuid4().hex[:6]}" for _ in range(4)]
    pipelines = [f"tailp-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    agents = [*counters, *pipelines]
    with workers(ri_settings, PARTITIONS, tmp_path / "logs", ["w-tail"],
                 session_timeout_ms=6000, extra_args=["--snapshot-every", "7"]) as procs:
        async with Client(ri_settings, plan, issuer="test-recovery") as client:
            for agent in pipelines:  # open tasks whose journals span snapshots
                await client.start_agent(agent, "example.pipeline")
                await client.assign_task(agent, "long", {"steps": 40, "step_ms": 150})
            await run_counters(ri_settings, plan, counters, tasks=10)
        await wait_fleet(ri_settings, plan, pipelines, has("snapshot.taken", 2), 60,
                         "snapshotted twice mid-task")
        assert procs["w-tail"].proc.poll() is None, "the worker was alive before the kill"
        procs["w-tail"].kill()  # a crash: no hand-off, no final snapshot

    scanner = await PartitionScanner.open(ri_settings)
    try:
        snapshots = {}
        for partition in range(PARTITIONS):
            snapshots.update(await load_snapshots(scanner, plan.name(SNAPSHOTS), partition))
    finally:
        await scanner.close()
    with_snapshots = await recovered_states(ri_settings, plan, agents)
    for agent in agents:  # a snapshot and a tail after it, for every agent
        assert 0 < snapshots[agent].version < with_snapshots[agent]["version"], agent
    # The pipelines were mid-task at the kill: their open task's journal begins before
    # the snapshot.
    for agent in pipelines:
        journal_from = with_snapshots[agent]["journal_from"]
        assert journal_from is not None
        assert journal_from < snapshots[agent].events_offset

    for partition in range(PARTITIONS):  # forget every snapshot and checkpoint
        keys = [a for a in agents if partition_of(plan, a) == partition] + [CHECKPOINT_KEY]
        for key in keys:
            await produce(ri_settings, plan.name(SNAPSHOTS), partition, key, None)
    full = await recovered_states(ri_settings, plan, agents)

    assert with_snapshots == full
