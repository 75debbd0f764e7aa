"""A fleet's history written straight to the real broker, as a runtime manager leaves it.

``write_fleet`` appends ``events`` events for each of ``agents`` agents through the Kafka
event store (group commit), then what the host would have written to ``ares.snapshots``:
a snapshot of every agent but the ones in ``without_snapshot`` at ``snapshot_lag`` events
before its head (offset after the covered event, lifecycle + agent state + journal), and a
partition checkpoint (every stream head) for each partition except those in
``without_checkpoint``. It keeps the events of each stream as Kafka holds them and their
offsets (from the writers' commit listeners): the tests compute their expectations from
them.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer

from ares.config import Settings
from ares.events.kafka.routing import partition_for
from ares.events.kafka.snapshots import Snapshot
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event
from ares.events.writer import AppendPlan
from ares.lifecycle.recovery import CHECKPOINT_KEY, state_hash
from ares.topics import EVENTS, SNAPSHOTS, TopicPlan
from tests.unit.compaction.workload import KIND, agent_events, snapshot_state

APPEND_BATCH = 250


@dataclass
class Fleet:
    plan: TopicPlan
    partitions: int
    events: dict[str, list[Event]] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    checkpoints: dict[int, int] = field(default_factory=dict)  # partition -> events_offset
    ends: dict[int, int] = field(default_factory=dict)  # partition -> end offset

    def partition_of(self, stream_id: str) -> int:
        return partition_for(stream_id, self.partitions)

    def streams_of(self, partition: int) -> list[str]:
        return sorted(s for s in self.events if self.partition_of(s) == partition)

    def expected_state_hash(self, stream_id: str) -> str:
        return state_hash(snapshot_state(self.events[stream_id]))


async def write_fleet(settings: Settings, plan: TopicPlan, *, agents: int, events: int,
                      snapshot_lag: int, without_snapshot: set[str],
                      without_checkpoint: set[int]) -> Fleet:
    names = [f"agent-{i:02d}" for i in range(agents)]
    news = {name: agent_events(name, events) for name in names}
    fleet = Fleet(plan, plan.partitions)
    streams: dict[str, list[Event]] = defaultdict(list)

    def committed(append: AppendPlan, offsets: list[int]) -> None:
        # The sealed events equal what Kafka returns: no need to read them back.
        for event, offset in zip(append.events, offsets, strict=True):
            streams[event.stream_id].append(event)
            fleet.offsets[(event.stream_id, event.version)] = offset

    store = await KafkaEventStore.open(settings, topic=plan.name(EVENTS))
    try:
        for partition in store.owned:
            writer = store.writer(partition)
            assert writer is not None
            writer.listeners.append(committed)
        for start in range(0, events, APPEND_BATCH):
            await asyncio.gather(*(store.append(name, batch[start:start + APPEND_BATCH])
                                   for name, batch in news.items()))
        for partition in store.owned:
            writer = store.writer(partition)
            assert writer is not None
            fleet.ends[partition] = writer.committed_end
    finally:
        await store.close()
    fleet.events = dict(streams)
    await _write_snapshots(settings, fleet, snapshot_lag, without_snapshot, without_checkpoint)
    return fleet


async def _write_snapshots(settings: Settings, fleet: Fleet, lag: int,
                           without_snapshot: set[str], without_checkpoint: set[int]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all",
                                max_request_size=4_194_304)
    await producer.start()
    topic = fleet.plan.name(SNAPSHOTS)
    try:
        for stream_id, stream in fleet.events.items():
            if stream_id in without_snapshot:
                continue
            version = len(stream) - lag
            covered = stream[:version]
            snapshot = Snapshot(stream_id, version, covered[-1].hash,
                                fleet.offsets[(stream_id, version)] + 1, KIND,
                                snapshot_state(covered), incarnation=1)
            fleet.snapshots[stream_id] = snapshot
            await producer.send(topic, snapshot.encode(), key=stream_id.encode(),
                                partition=fleet.partition_of(stream_id))
        for partition in range(fleet.partitions):
            if partition in without_checkpoint:
                continue
            heads = {s: [len(fleet.events[s]), fleet.events[s][-1].hash,
                         fleet.offsets[(s, 1)]] for s in fleet.streams_of(partition)}
            checkpoint = Snapshot(CHECKPOINT_KEY, 0, "", fleet.ends[partition],
                                  "ares.partition", {"heads": heads})
            fleet.checkpoints[partition] = fleet.ends[partition]
            await producer.send(topic, checkpoint.encode(), key=CHECKPOINT_KEY.encode(),
                                partition=partition)
        await producer.flush()
    finally:
        await producer.stop()
