"""Dashboard live updates: commit -> the fleet page's SSE client, beside a raw consumer.

Run alone: ``python bench/dashboard_live.py [--agents N] [--followed F] [--events E]
[--gap-ms G] [--json]`` (ARES_KAFKA_BOOTSTRAP, ARES_POSTGRES_DSN).

Topics and a projections schema of its own; the schema gets ``--agents`` agents (rows made
by the projection's own ``AgentRow.record()``, as bench/dashboard.py), of which ``--followed``
are started by events instead, so the projector makes their rows. A real
``ares run replay-reader`` process (projector on) serves the dashboard; one SSE client
follows the followed agents on the fleet page's live endpoint (``GET /ui/live?agent=...``,
what ``ui.js`` opens for the rows of a page), and a raw aiokafka ``read_committed``
consumer of every partition (positioned at the end first, decoding each value with the
same codec) reads the same topic in the same process.

Then ``--events`` events (``llm.call``, round robin over the followed agents after their
``agent.started`` and ``task.assigned``, which warm both readers up and are not counted)
are appended one at a time through ``KafkaEventStore.append`` (the runtime's own
transactional path), ``--gap-ms`` apart. Per event (matched by agent and version), from
the moment ``append`` returned (the producer's commit acknowledged) to its arrival at the
SSE client (ours) and at the raw consumer (the ceiling); ``from_sealed`` gives the same
from the event's sealed timestamp (set before the transaction: the commit included).
The goal (issue 29, reported, never asserted): p99 <= 1000 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiokafka import AIOKafkaConsumer, TopicPartition

from ares.config import Settings
from ares.demo.processes import ServiceProcess
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.events.wire.codec import decode_event
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projection import AGENT_COLUMNS
from ares.tasks import cancel_and_wait, wait_for
from ares.topics import EVENTS, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/dashboard_live.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dashboard import agent as agent_row
from bench.harness import (
    Section,
    bench_plan,
    bench_settings,
    cli,
    latency_summary,
    machine,
    section,
)

GOAL_P99_MS = 1000.0
AGENTS, FOLLOWED, EVENTS_MEASURED, GAP_MS = 10_000, 40, 400, 20.0


Key = tuple[str, int]  # (agent id, version)
# The wall clock minus the monotonic one: a sealed timestamp on the monotonic clock.
WALL_OFFSET = time.time() - time.monotonic()


class Arrivals:
    """When each event (by agent and version) reached a reader, on this process's monotonic
    clock; and its sealed timestamp (on that clock too)."""

    def __init__(self) -> None:
        self.at: dict[Key, float] = {}
        self.sealed: dict[Key, float] = {}
        self.changed = asyncio.Event()

    def saw(self, key: Key, sealed_at: float) -> None:
        if key not in self.at:
            self.at[key] = time.monotonic()
            self.sealed[key] = sealed_at - WALL_OFFSET
        self.changed.set()

    async def until(self, keys: Sequence[Key], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(k in self.at for k in keys) and time.monotonic() < deadline:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))


async def follow_sse(session: aiohttp.ClientSession, url: str, arrivals: Arrivals,
                     subscribed: asyncio.Event) -> None:
    """The dashboard's SSE client: every ``event: agent`` message (its agent's row and the
    event)."""
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as response:
        response.raise_for_status()
        kind = ""
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith(": subscribed"):
                subscribed.set()
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "agent":
                message = json.loads(line[6:])
                if message["agent"] is not None:
                    event = message["event"]
                    arrivals.saw((message["agent"]["agent_id"], event["version"]),
                                 datetime.fromisoformat(event["timestamp"]).timestamp())
            elif not line:
                kind = ""


async def follow_raw(consumer: AIOKafkaConsumer, arrivals: Arrivals) -> None:
    """The ceiling: raw ``read_committed`` reads of every partition, each value decoded."""
    while True:
        batches = await consumer.getmany(timeout_ms=500)
        for records in batches.values():
            for record in records:
                assert record.value is not None
                event = decode_event(record.value)
                arrivals.saw((event.stream_id, event.version), event.timestamp.timestamp())


@contextlib.asynccontextmanager
async def raw_consumer(settings: Settings, topic: str,
                       partitions: int) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                isolation_level="read_committed", enable_auto_commit=False,
                                fetch_max_wait_ms=500, **settings.kafka_options())
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_end(*assigned)
        for tp in assigned:  # positioned before the first append
            await consumer.position(tp)
        yield consumer
    finally:
        await consumer.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def until_ready(session: aiohttp.ClientSession, base: str, service: ServiceProcess,
                      timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if not service.alive:
            raise RuntimeError(f"the replay reader exited; its log: {service.log}")
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(f"{base}/readyz") as reply:
                if reply.status == 200:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the replay reader is not ready; its log: {service.log}")
        await asyncio.sleep(0.3)


def timeline(followed: Sequence[str], events: int) -> tuple[list[tuple[str, NewEvent]],
                                                             list[tuple[str, NewEvent]]]:
    """The warm-up (each followed agent started and given a task) and the measured events
    (``llm.call``, round robin)."""
    warm: list[tuple[str, NewEvent]] = []
    for agent_id in followed:
        warm.append((agent_id, NewEvent("agent.started", "runtime-manager", {
            "kind": "bench.live", "config_json": "{}", "incarnation": 1, "worker": "w-1"})))
        warm.append((agent_id, NewEvent("task.assigned", "runtime-manager", {
            "task_id": "t1", "input_json": "{}"})))
    measured = [(followed[i % len(followed)], NewEvent("llm.call", "agent.bench.live", {
        "task_id": "t1", "name": f"step-{i}", "occurrence": 0, "model": "offline",
        "prompt_hash": "h", "output": "{}", "prompt_tokens": 11, "completion_tokens": 7}))
        for i in range(events)]
    return warm, measured


async def measure(settings: Settings, *, agents: int, followed: int, events: int,
                  gap_ms: float, partitions: int, schema: str,
                  workdir: Path) -> dict[str, Any]:
    settings = bench_settings(settings)
    plan = bench_plan(settings, partitions)
    topic = plan.name(EVENTS)
    live_ids = [f"live-{i:03d}" for i in range(followed)]
    await apply_topics(plan, settings)
    store = ProjectionStore(settings.postgres_dsn, schema, events_topic=topic)
    try:
        await store.migrate()
        async with store.connection() as conn:  # the others: rows as the projection makes
            await conn.copy_records_to_table("agents", columns=AGENT_COLUMNS, records=[
                agent_row(i) for i in range(agents - followed)])
            await conn.execute("ANALYZE agents")
        port = free_port()
        env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
               "ARES_TOPIC_PREFIX": settings.topic_prefix,
               "ARES_TOPIC_PARTITIONS": str(partitions), "ARES_LOG_LEVEL": "warning",
               "ARES_POSTGRES_DSN": settings.postgres_dsn or ""}
        reader = ServiceProcess("bench-replay-reader", [
            "replay-reader", "--http-port", str(port), "--schema", schema], env,
            workdir / "replay-reader.log")
        reader.start()
        try:
            return await _measure_live(settings, reader, port, topic, partitions, live_ids,
                                       events, gap_ms / 1000)
        finally:
            reader.stop()
    finally:
        with contextlib.suppress(Exception):
            await store.drop()
        await store.close()
        await delete_topics(plan, settings)


async def _measure_live(settings: Settings, reader: ServiceProcess, port: int, topic: str,
                        partitions: int, live_ids: Sequence[str], events: int,
                        gap_s: float) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    ours, raw = Arrivals(), Arrivals()
    warm, measured = timeline(live_ids, events)
    async with aiohttp.ClientSession() as session, \
            raw_consumer(settings, topic, partitions) as consumer:
        await until_ready(session, base, reader)
        subscribed = asyncio.Event()
        url = f"{base}/ui/live?" + "&".join(f"agent={a}" for a in live_ids)
        sse = asyncio.create_task(follow_sse(session, url, ours, subscribed))
        tail = asyncio.create_task(follow_raw(consumer, raw))
        appender = await KafkaEventStore.open(settings, topic=topic)
        try:
            await wait_for(subscribed.wait(), 30)
            versions: dict[str, int] = {}

            async def append(agent_id: str, event: NewEvent) -> tuple[Key, float]:
                version = await appender.append(agent_id, [event],
                                                expected_version=versions.get(agent_id, 0))
                acked = time.monotonic()  # the transaction's commit acknowledged
                versions[agent_id] = version
                return (agent_id, version), acked

            warm_keys = [(await append(a, e))[0] for a, e in warm]
            await ours.until(warm_keys, 30)
            await raw.until(warm_keys, 30)
            sent: list[tuple[Key, float]] = []
            started = time.monotonic()
            for agent_id, event in measured:
                sent.append(await append(agent_id, event))
                await asyncio.sleep(gap_s)
            append_s = time.monotonic() - started
            keys = [k for k, _ in sent]
            await ours.until(keys, 30)
            await raw.until(keys, 30)
        finally:
            await appender.close()
            for task in (sse, tail):
                await cancel_and_wait(task, ignore_errors=True)
    return {"sent": sent, "ours": ours, "raw": raw, "append_s": append_s,
            "warm_up": len(warm)}


def _figures(sent: Sequence[tuple[Key, float]], arrivals: Arrivals) -> dict[str, Any]:
    arrived = arrivals.at
    from_ack = [arrived[k] - acked for k, acked in sent if k in arrived]
    from_sealed = [arrived[k] - arrivals.sealed[k] for k, _ in sent if k in arrived]
    if not from_ack:
        return {"samples": 0, "p50_ms": 0.0, "p99_ms": 0.0, "missing": len(sent)}
    return {**latency_summary(from_ack), "missing": len(sent) - len(from_ack),
            "from_sealed": latency_summary(from_sealed)}


async def run(settings: Settings, *, agents: int = AGENTS, followed: int = FOLLOWED,
              events: int = EVENTS_MEASURED, gap_ms: float = GAP_MS,
              partitions: int = 12) -> Section:
    """The ``dashboard_live`` report section (topics, schema and replay reader of its own)."""
    if not settings.postgres_dsn:
        raise RuntimeError("the dashboard_live benchmark needs ARES_POSTGRES_DSN")
    followed = max(1, min(followed, agents, 500))
    schema = f"bench_live_{uuid.uuid4().hex[:8]}"  # dropped at the end
    config = {"agents": agents, "followed": followed, "events": events, "gap_ms": gap_ms,
              "partitions": partitions, "schema": schema}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ares-bench-dashboard-live-") as workdir:
        found = await measure(settings, agents=agents, followed=followed, events=events,
                              gap_ms=gap_ms, partitions=partitions, schema=schema,
                              workdir=Path(workdir))
    ours = _figures(found["sent"], found["ours"])
    ceiling = _figures(found["sent"], found["raw"])
    report = section("dashboard_live", "p50_ms", ours, ceiling, higher_is_better=False,
                     p99_ratio=round(ours["p99_ms"] / ceiling["p99_ms"], 3)
                     if ceiling["p99_ms"] else None,
                     goal={"p99_ms": GOAL_P99_MS,
                           "met": ours["samples"] == events and ours["p99_ms"] <= GOAL_P99_MS})
    report["config"] = config
    report["warm_up_events"] = found["warm_up"]
    report["append_s"] = round(found["append_s"], 2)
    report["total_s"] = round(time.monotonic() - started, 1)
    report["machine"] = machine()
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=AGENTS,
                        help="agents in the projection (the followed ones included)")
    parser.add_argument("--followed", type=int, default=FOLLOWED,
                        help="agents the SSE client follows (the fleet page: up to 500)")
    parser.add_argument("--events", type=int, default=EVENTS_MEASURED,
                        help="measured events, round robin over the followed agents")
    parser.add_argument("--gap-ms", type=float, default=GAP_MS,
                        help="pause after each append")
    parser.add_argument("--partitions", type=int, default=12)


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], run, add_arguments)
