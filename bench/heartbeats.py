"""Heartbeat cost for 10,000 agents per worker, and memory per idle hosted agent.

Run alone: ``python bench/heartbeats.py [--agents N] [--partitions P] [--beats B] [--json]``.

* **heartbeats**: the runtime's ``HeartbeatEmitter`` (one batched ``ares.v1.Heartbeat`` per
  owned partition per interval, listing every agent) sends ``--beats`` rounds for
  ``--agents`` agents; client CPU per round, as a share of one core at a 1 s interval.
  Ceiling: a raw aiokafka producer sending the same pre-encoded records (what remains is
  the cost of building and encoding the batch).
* **memory**: ``tracemalloc`` around creating ``--agents`` idle hosted agents the way the
  host keeps them (an ``example.chat`` instance, its folded lifecycle, its heartbeat entry
  and a supervisor task parked on its wake-up event): bytes per agent.

Targets (reported, never asserted): < 10 % of a core for 10,000 idle agents; <= 10 KB each.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from ares.config import Settings
from ares.examples.chat import ChatAgent
from ares.lifecycle.state import AgentLifecycle, Status
from ares.runtime_manager.heartbeats import AgentBeat, HeartbeatEmitter, heartbeat_records
from ares.runtime_manager.hosted import HostedAgent

if __package__ in (None, ""):  # python bench/heartbeats.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import bench_settings, bench_topics, cli, section, start_producer


async def run(settings: Settings, *, agents: int = 10_000, partitions: int = 12,
              beats: int = 20) -> dict[str, Any]:
    settings = bench_settings(settings)
    topic = settings.topic(f"bench.heartbeats.{uuid.uuid4().hex[:6]}")
    beats_list = [AgentBeat(f"agent-{i:05d}", i % partitions, version=i, incarnation=1)
                  for i in range(agents)]
    async with bench_topics(settings, [topic], partitions):
        producer = await start_producer(settings, acks=1, linger_ms=5)
        try:
            emitter = HeartbeatEmitter(producer, topic, "bench-worker", 1.0,
                                       partitions=lambda: range(partitions),
                                       beats=lambda: beats_list)
            ours = await _rounds(beats, emitter.beat_once, producer)
            records = heartbeat_records("bench-worker", 1000, range(partitions), beats_list)

            async def raw_round() -> None:
                for partition, value in records.items():
                    await producer.send(topic, value, key=b"bench-worker", partition=partition)

            ceiling = await _rounds(beats, raw_round, producer)
        finally:
            await producer.stop()
    per_agent = await _idle_agent_bytes(agents)
    cpu_share = ours["cpu_s_per_round"] / 1.0  # at a 1 s interval
    return section(
        "heartbeats", "cpu_s_per_round", ours, ceiling, higher_is_better=False,
        agents=agents, partitions=partitions,
        core_share_at_1s_interval=round(cpu_share, 4),
        idle_agent_bytes=per_agent,
        targets={"core_share": 0.10, "idle_agent_bytes": 10_240,
                 "met": cpu_share < 0.10 and per_agent <= 10_240},
    )


async def _rounds(count: int, send_round: Any, producer: Any) -> dict[str, Any]:
    await send_round()  # warm-up: connections, metadata
    await producer.flush()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(count):
        await send_round()
    await producer.flush()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"rounds": count, "seconds": round(wall, 4),
            "cpu_s_per_round": round(cpu / count, 6)}


async def _idle_agent_bytes(count: int) -> int:
    """Bytes per idle hosted agent, measured with tracemalloc."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    hosted: list[HostedAgent] = []
    for i in range(count):
        agent_id = f"agent-{i:05d}"
        lifecycle = AgentLifecycle(agent_id, kind="example.chat", status=Status.RUNNING,
                                   incarnation=1, version=3)
        entry = HostedAgent(agent_id, i % 12, lifecycle, agent=ChatAgent(agent_id, {}))
        entry.supervisor = asyncio.create_task(_parked(entry.wakeup))
        hosted.append(entry)
    await asyncio.sleep(0)  # every task parked on its event
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    for entry in hosted:
        assert entry.supervisor is not None
        entry.supervisor.cancel()
    await asyncio.gather(*(e.supervisor for e in hosted if e.supervisor),
                         return_exceptions=True)
    return used // count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--beats", type=int, default=20)


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], run, add_arguments)


async def _parked(wakeup: asyncio.Event) -> None:
    """An idle incarnation's supervisor: parked on its agent's wake-up event."""
    await wakeup.wait()
