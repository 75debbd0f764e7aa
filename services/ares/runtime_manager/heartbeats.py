"""Batched liveness: one record per owned partition per interval, listing its agents.

Per-agent heartbeat records would cost 10,000 records a second for a worker with 10,000
agents; one ``ares.v1.Heartbeat`` per partition carries them all (a few dozen bytes per
agent) and keeps partition p's heartbeats on partition p of ``ares.heartbeats``, where the
health checker that tracks p's agents reads them. A record with no agents still says the
worker is alive.

The interval (``ares run runtime-manager --heartbeat-interval``, default 0.25 s) bounds
how soon the health checker declares a worker lost (three silent intervals); the checker
then removes the lost worker from the runtime's consumer group at once (its
``--remove-lost-workers``, on by default): sub-second failover (docs/health.md). Beats
keep a fixed cadence (the time a send took is not added to the interval).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from ares.events.model import utc_now
from ares.events.wire.codec import encode
from ares.events.wire.schemas import HEARTBEAT
from ares.tasks import cancel_and_wait

log = logging.getLogger(__name__)
DEFAULT_INTERVAL_S = 1.0


@dataclass(slots=True)
class AgentBeat:
    """What the latest heartbeat says of one agent; updated in place, cheaply."""

    agent_id: str
    partition: int
    version: int = 0
    incarnation: int = 0
    status: str = "running"
    progress: str | None = None


def heartbeat_records(worker_id: str, interval_ms: int, partitions: Iterable[int],
                      beats: Iterable[AgentBeat]) -> dict[int, bytes]:
    """One encoded Heartbeat per partition (pure: the batching rule, testable alone)."""
    by_partition: dict[int, list[dict[str, object]]] = {p: [] for p in partitions}
    for beat in beats:
        if beat.partition in by_partition:
            by_partition[beat.partition].append({
                "agent_id": beat.agent_id, "version": beat.version,
                "incarnation": beat.incarnation, "status": beat.status,
                "progress": beat.progress,
            })
    now = utc_now()
    return {p: encode(HEARTBEAT, {"worker_id": worker_id, "timestamp": now,
                                  "interval_ms": interval_ms, "agents": agents})
            for p, agents in by_partition.items()}


class HeartbeatEmitter:
    """Sends the batched heartbeats of one worker every ``interval_s``."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, worker_id: str,
                 interval_s: float, partitions: Callable[[], Iterable[int]],
                 beats: Callable[[], Iterable[AgentBeat]]) -> None:
        self._producer = producer
        self._topic = topic
        self._worker_id = worker_id
        self._interval_s = interval_s
        self._partitions = partitions
        self._beats = beats
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="heartbeats")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def beat_once(self) -> None:
        records = heartbeat_records(self._worker_id, int(self._interval_s * 1000),
                                    self._partitions(), self._beats())
        key = self._worker_id.encode()
        for partition, value in records.items():
            await self._producer.send(self._topic, value, key=key, partition=partition)
        self.sent += len(records)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            try:
                await self.beat_once()
            except KafkaError as exc:  # liveness is best effort; the next beat may pass
                log.warning("heartbeat not sent: %s", exc)
            due = max(due + self._interval_s, loop.time())  # no burst after a stall
            await asyncio.sleep(due - loop.time())
