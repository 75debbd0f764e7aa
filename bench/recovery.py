"""Recovery benchmark: a partition's agents rebuilt from the log, and a worker's death.

Run alone: ``python bench/recovery.py [--agents N] [--events M] [--rounds R] [--json]``.

**Partition recovery** (each round on fresh topics, one partition): the log is filled with
``--agents`` streams of ``--events`` sealed events each (an ``agent.started`` and closed
``example.pipeline`` tasks of ten events: assignment, six LLM calls, a tool intent and its
outcome, completion), interleaved as a fleet writes them. Then ``AgentHost.open_partition``
of a fresh host (the path a new owner takes: snapshots, fence, scan, verify, fold, build,
resume) is timed twice:

* **without snapshots** (headline): every event is replayed. Our rate is the events
  replayed over the replay phase of the recovery records; the ceiling is a raw aiokafka
  ``read_committed`` consume of the same partition with a fastavro decode of every record
  into the same ``Event`` (``Codec(compiled=False).decode_event``: ``schemaless_reader``,
  where ours reads with the codec's compiled reader), with the scanner's consumer
  settings, in the same round;
* **after snapshots**: the host's graceful drain writes every agent's snapshot and the
  partition checkpoint, ``--tail`` more events per agent follow (a crash some time after
  the last snapshot), and a fresh host recovers again. Its ceiling is a raw read of what it
  must read: the snapshots partition and the events from the scan's start offset.

Phases come from the recovery records (load, replay) and the wall time (resume = the rest:
verification verdicts, guard decisions and the appends that resume every agent).

**Worker SIGKILL -> all resumed**: ``--kill-workers`` ``ares run runtime-manager``
processes (static membership, ``--session-timeout-ms``) host ``--kill-agents`` busy
``example.pipeline`` agents; one is SIGKILLed. Per agent: kill -> its ``agent.resurrected``
(ours), split into detection (kill -> the group stable without the dead member: the
consumer group's own failover, which is the ceiling), load, replay and resume.

**Worker SIGKILL with the health checker** (``recovery.failover``): ``--failover-workers``
(3) runtime managers (heartbeat every 250 ms, static membership, ``--failover-session-
timeout-ms`` 10 s: long enough that only the checker's removal moves the partitions) host
``--failover-agents`` (200) busy agents beside an ``ares run health-checker``; one worker is
SIGKILLed. Reported separately: detection (kill -> the checker's ``worker_lost`` verdict,
the alert's timestamp: silence + tick), rebalance (verdict -> the group stable without the
dead member: the checker's LeaveGroup, the survivors noticing it on their next group
heartbeat, join and sync; the group is polled every 50 ms) and resume (group stable -> each
agent's ``agent.resurrected``), and the total kill -> every agent resumed.

Targets (reported, never asserted): replay >= 0.7 x raw consume+decode; SIGKILL -> every
agent resumed p99 <= 5 s (session timeout only), <= 1.5 s with the health checker.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from ares.agents.host_api import AgentServices
from ares.agents.registry import build_registry
from ares.client import Client
from ares.config import Settings
from ares.demo.processes import ServiceProcess
from ares.events.chain import seal_encoded
from ares.events.kafka.groups import describe_group, runtime_group, until_group_settled
from ares.events.kafka.reader import PartitionScanner, new_consumer
from ares.events.kafka.retry import connect
from ares.events.kafka.snapshots import load_snapshots
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.wire.codec import Codec, decode_event
from ares.health_checker.alerts import read_alerts
from ares.lifecycle.recovery import CHECKPOINT_KEY, RecoveryRecord
from ares.runtime_manager.host import AgentHost
from ares.runtime_manager.replay import replay_start
from ares.topics import ALERTS, EVENTS, SNAPSHOTS, TopicPlan, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/recovery.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    Measurement,
    Section,
    Stopwatch,
    bench_plan,
    bench_settings,
    chunks,
    cli,
    committed_values,
    interleave,
    latency_summary,
    machine,
    produce_transactions,
    section,
    start_producer,
)
from bench.harness import Record as Sealed

REPLAY_RATIO_TARGET = 0.7
KILL_P99_GOAL_MS = 5000
FAILOVER_P99_GOAL_MS = 1500
KIND = "example.pipeline"
MODULE = "bench"
TASK_EVENTS = 10
TRANSACTION_SIZE = 100


# -- the workload -------------------------------------------------------------------------


def task_events(task_id: str) -> list[NewEvent]:
    """One closed ``example.pipeline`` task, as the SDK records it (ten events)."""
    module = f"agent.{KIND}"
    events = [NewEvent("task.assigned", "runtime-manager", {
        "task_id": task_id, "input_json": '{"email":true,"step_ms":250,"steps":6}'})]
    for step in range(6):
        output = hashlib.sha256(f"{task_id}/{step}".encode()).hexdigest() * 3
        events.append(NewEvent("llm.call", module, {
            "name": f"step-{step}", "model": "offline-1",
            "prompt_hash": hashlib.sha256(f"p/{task_id}/{step}".encode()).hexdigest(),
            "output": output, "prompt_tokens": 180 + step, "completion_tokens": 48,
            "occurrence": 0, "task_id": task_id}, {"ares.position": str(step)}))
    call_id = f"{task_id}:send_email:0:0"
    key = hashlib.sha256(f"{task_id}/send_email".encode()).hexdigest()
    events += [
        NewEvent("tool.call.intent", module, {
            "call_id": call_id, "tool": "send_email", "effect": "at_most_once",
            "idempotency_key": key, "args_json": '{"args":["ops@example.com"],"kwargs":{}}',
            "occurrence": 0, "task_id": task_id}, {"ares.position": "6"}),
        NewEvent("tool.call.completed", module, {
            "call_id": call_id, "tool": "send_email",
            "result_json": f'{{"message_id":"{key[:16]}","sent":true}}'}),
        NewEvent("task.completed", module, {
            "task_id": task_id, "output_json": f'{{"digest":"{key}","steps":6}}'}),
    ]
    return events


def agent_history(agent: str, events: int, first_task: int = 0) -> list[NewEvent]:
    """``events`` events of an agent: its start (when ``first_task`` is 0), closed tasks,
    and notes for a remainder under ten."""
    history: list[NewEvent] = []
    if first_task == 0:
        history.append(NewEvent("agent.started", "runtime-manager", {
            "kind": KIND, "config_json": "{}", "incarnation": 1, "worker": "bench-filler"}))
    task = first_task
    while events - len(history) >= TASK_EVENTS:
        history += task_events(f"t{task:05d}")
        task += 1
    while len(history) < events:
        history.append(NewEvent("agent.log", f"agent.{KIND}", {
            "level": "info", "message": f"note {len(history)}", "task_id": None}))
    return history


def seal_from(heads: Mapping[str, StreamHead],
              events: Mapping[str, Sequence[NewEvent]]) -> dict[str, list[Sealed]]:
    """Each stream's new events sealed after its head: the bytes an owner would append."""
    sealed: dict[str, list[Sealed]] = {}
    for stream_id, news in events.items():
        head, records = heads.get(stream_id, StreamHead()), []
        for new in news:
            event, wire = seal_encoded(stream_id, head, new, head.version + 1)
            head = StreamHead(event.version, event.hash)
            records.append(Sealed(0, stream_id.encode(), wire,
                                  (("ares.type", new.type.encode()),), None))
        sealed[stream_id] = records
    return sealed


async def produce(settings: Settings, topic: str, sealed: Mapping[str, Sequence[Sealed]],
                  name: str) -> None:
    """Interleaved, in transactions of ``TRANSACTION_SIZE`` (commit markers in between)."""
    records = interleave(sealed)
    producer = await start_producer(settings, transactional_id=f"{topic}.{name}")
    try:
        await produce_transactions(producer, topic, chunks(
            records, max(1, -(-len(records) // TRANSACTION_SIZE))))
    finally:
        await producer.stop()


# -- ours: a fresh owner recovers the partition -------------------------------------------


async def recover(settings: Settings, plan: TopicPlan) -> tuple[dict[str, Any],
                                                                dict[str, StreamHead]]:
    """``open_partition`` of a fresh host, timed; then its graceful drain (snapshots).
    The figures, and every stream's head after the drain."""
    host = AgentHost(settings, plan, build_registry(), "bench-owner", services=AgentServices())
    scanner = await PartitionScanner.open(settings)
    try:
        watch = Stopwatch()
        writer = await host.open_partition(0, scanner)
        records = list(host.recoveries)
        replayed = sum(r.events_replayed for r in records)
        spent = watch.stop(replayed)
        await host.drain()
        heads = {sid: writer.table.head(sid) for sid in writer.table.stream_ids()}
        await writer.stop()
    finally:
        await host.close()
        await scanner.close()
    return figures(spent, records), heads


def figures(spent: Measurement, records: Sequence[RecoveryRecord]) -> dict[str, Any]:
    first = records[0]
    load, replay = first.load_s or 0.0, first.replay_s or 0.0
    resume = max(spent.wall_s - load - replay, 0.0)
    replay_rate = spent.events / replay if replay else 0.0
    return {
        **spent.to_dict(),
        # the headline: events replayed per second of the replay phase
        "events_per_s": round(replay_rate, 1),
        "recovery_s": round(spent.wall_s, 4),
        "agents": len(records),
        "verified": all(r.verified for r in records),
        "snapshots_used": sum(1 for r in records if r.snapshot_version is not None),
        "phases_ms": {"load": round(load * 1000, 1), "replay": round(replay * 1000, 1),
                      "resume": round(resume * 1000, 1)},
    }


# -- the ceiling: raw consume + decode of what recovery reads -----------------------------


# The ceiling's decoder: fastavro's schemaless_reader, as a raw consumer would decode.
FASTAVRO = Codec(compiled=False)


async def raw_read(settings: Settings, topic: str, start: int = 0,
                   snapshots_topic: str | None = None) -> Measurement:
    """A raw ``read_committed`` consumer with the scanner's settings: ``topic``/0 from
    ``start`` to its end, every record decoded by fastavro into an ``Event`` (and, first,
    the whole snapshots partition, decoded by fastavro too, when given)."""
    consumer = new_consumer(settings, fetch_max_wait_ms=5)
    await consumer.start()
    try:
        watch = Stopwatch()
        if snapshots_topic is not None:
            await _drain(consumer, TopicPartition(snapshots_topic, 0), 0, decode=FASTAVRO.decode)
        count = await _drain(consumer, TopicPartition(topic, 0), start,
                             decode=FASTAVRO.decode_event)
        return watch.stop(count)
    finally:
        await consumer.stop()


async def _drain(consumer: Any, tp: TopicPartition, start: int, *,
                 decode: Callable[[bytes], object]) -> int:
    """Records of ``tp`` from ``start`` to its end, each value decoded; their count."""
    consumer.assign([tp])
    consumer.seek(tp, start)
    end = (await consumer.end_offsets([tp]))[tp]
    count = 0
    while await consumer.position(tp) < end:
        batch = await consumer.getmany(tp, timeout_ms=500)
        for record in batch.get(tp, ()):
            if record.value is not None:
                decode(record.value)
                count += 1
    return count


async def scan_start(settings: Settings, plan: TopicPlan) -> int:
    """Where a recovery of partition 0 starts scanning (what ``open_partition`` computes)."""
    scanner = await PartitionScanner.open(settings)
    try:
        found = await load_snapshots(scanner, plan.name(SNAPSHOTS), 0)
    finally:
        await scanner.close()
    checkpoint = found.pop(CHECKPOINT_KEY, None)
    if checkpoint is None:
        return 0
    starts = [checkpoint.events_offset, *(replay_start(s) or 0 for s in found.values())]
    return min(starts)


# -- partition recovery -------------------------------------------------------------------


async def partition_round(settings: Settings, history: Mapping[str, Sequence[Sealed]],
                          tail: int, first_tail_task: int) -> dict[str, Any]:
    settings = bench_settings(settings)
    plan = bench_plan(settings, 1)
    await apply_topics(plan, settings)
    try:
        topic = plan.name(EVENTS)
        await produce(settings, topic, history, "fill")
        full_ceiling = await raw_read(settings, topic)
        full, heads = await recover(settings, plan)
        more = {a: agent_history(a, tail, first_tail_task) for a in history}
        await produce(settings, topic, seal_from(heads, more), "tail")
        start = await scan_start(settings, plan)
        snap_ceiling = await raw_read(settings, topic, start, plan.name(SNAPSHOTS))
        snap, _ = await recover(settings, plan)
        snap["scan_start_offset"] = start
        return {"full": full, "full_ceiling": full_ceiling, "snap": snap,
                "snap_ceiling": snap_ceiling}
    finally:
        await delete_topics(plan, settings)


def median_dict(values: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Field by field median of figures (nested dicts too; first value for the rest)."""
    out: dict[str, Any] = {}
    for key, first in values[0].items():
        column = [v[key] for v in values]
        if isinstance(first, bool) or not isinstance(first, int | float | dict):
            out[key] = first if all(c == first for c in column) else column
        elif isinstance(first, dict):
            out[key] = median_dict(column)
        else:
            out[key] = round(statistics.median(column), 4)
    return out


# -- worker SIGKILL -> all resumed --------------------------------------------------------


async def kill_round(settings: Settings, *, agents: int, workers: int, partitions: int,
                     session_timeout_ms: int, workdir: Path) -> dict[str, Any]:
    settings = bench_settings(settings)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "ARES_TOPIC_PREFIX": settings.topic_prefix, "ARES_TOPIC_PARTITIONS": str(partitions),
           "ARES_HTTP_PORT": "0", "ARES_LOG_LEVEL": "warning"}
    env.pop("ARES_EXAMPLE_LEDGER_DIR", None)
    procs = [ServiceProcess(f"bench-w{i}", [
        "runtime-manager", "--instance-id", f"bench-w{i}", "--session-timeout-ms",
        str(session_timeout_ms)], env, workdir / f"bench-w{i}.log") for i in range(workers)]
    try:
        for proc in procs:
            proc.start()
        await wait_group(settings, plan, workers)
        fleet = [f"kill-{i:04d}" for i in range(agents)]
        await launch_fleet(settings, plan, fleet)
        streams = await wait_streams(settings, plan, fleet, "llm.call", 60)
        victim = procs[0]
        orphans = [a for a in fleet if host_of(streams[a]) == victim.name]
        killed_at = time.time()
        victim.kill()
        rebalanced_at = await wait_group(settings, plan, workers - 1)
        streams = await wait_streams(settings, plan, orphans, "agent.resurrected", 120)
    finally:
        for proc in procs:
            proc.kill()
        await delete_topics(plan, settings)
    detection = rebalanced_at - killed_at
    totals, loads, replays, resumes = [], [], [], []
    for agent in orphans:
        event = next(e for e in streams[agent] if e.type == "agent.resurrected")
        record = RecoveryRecord.from_event(event)
        total = event.timestamp.timestamp() - killed_at
        load, replay = record.load_s or 0.0, record.replay_s or 0.0
        totals.append(total)
        loads.append(load)
        replays.append(replay)
        resumes.append(max(total - detection - load - replay, 0.0))
    return {"agents": len(orphans), "detection_s": detection, "total": totals, "load": loads,
            "replay": replays, "resume": resumes}


async def failover_round(settings: Settings, *, agents: int, workers: int, partitions: int,
                         session_timeout_ms: int, heartbeat_s: float,
                         workdir: Path) -> dict[str, Any]:
    """One SIGKILL with the health checker running: detection, rebalance, resume."""
    settings = bench_settings(settings)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "ARES_TOPIC_PREFIX": settings.topic_prefix, "ARES_TOPIC_PARTITIONS": str(partitions),
           "ARES_HTTP_PORT": "0", "ARES_LOG_LEVEL": "warning"}
    env.pop("ARES_EXAMPLE_LEDGER_DIR", None)
    checker = ServiceProcess("bench-health", ["health-checker", "--remove-lost-workers", "true"],
                             env,
                             workdir / "bench-health.log")
    procs = [ServiceProcess(f"bench-fo{i}", [
        "runtime-manager", "--instance-id", f"bench-fo{i}", "--session-timeout-ms",
        str(session_timeout_ms), "--heartbeat-interval", f"{heartbeat_s:g}",
        "--group-heartbeat-ms", "250"], env,
        workdir / f"bench-fo{i}.log") for i in range(workers)]
    admin = await connect(lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap),
                          what="watching the runtime group", settings=settings)
    group = runtime_group(settings)
    try:
        checker.start()
        for proc in procs:
            proc.start()
        await wait_group(settings, plan, workers)
        fleet = [f"fo-{i:04d}" for i in range(agents)]
        await launch_fleet(settings, plan, fleet)
        streams = await wait_streams(settings, plan, fleet, "llm.call", 60)
        await asyncio.sleep(3.0)  # the checker has seen every worker beat for a while
        victim = procs[0]
        orphans = [a for a in fleet if host_of(streams[a]) == victim.name]
        killed_at = time.time()
        victim.kill()
        rebalanced_at = await settled_at(admin, group, workers - 1, settings)
        streams = await wait_streams(settings, plan, orphans, "agent.resurrected", 120)
        lost_at = await worker_lost_at(settings, plan, victim.name, killed_at)
        alive = checker.alive
    finally:
        await admin.close()
        for proc in procs:
            proc.kill()
        checker.kill()
        await delete_topics(plan, settings)
    if lost_at is None or not alive:
        raise RuntimeError(f"no worker_lost verdict for {victim.name} (checker alive: {alive})")
    removed_by_checker = rebalanced_at - killed_at < session_timeout_ms / 1000
    totals, resumes = [], []
    for agent in orphans:
        event = next(e for e in streams[agent] if e.type == "agent.resurrected")
        total = event.timestamp.timestamp() - killed_at
        totals.append(total)
        resumes.append(max(event.timestamp.timestamp() - rebalanced_at, 0.0))
    return {"agents": len(orphans), "detection_s": lost_at - killed_at,
            "rebalance_s": rebalanced_at - lost_at, "total": totals, "resume": resumes,
            "removed_by_checker": removed_by_checker}


async def launch_fleet(settings: Settings, plan: TopicPlan, fleet: Sequence[str]) -> None:
    async with Client(settings, plan, issuer="bench") as client:
        gate = asyncio.Semaphore(50)

        async def launch(agent: str) -> None:
            async with gate:
                await client.start_agent(agent, KIND)
                await client.assign_task(agent, "t1", {"steps": 40, "step_ms": 300})

        await asyncio.gather(*(launch(a) for a in fleet))


async def settled_at(admin: AIOKafkaAdminClient, group: str, members: int,
                     settings: Settings, timeout_s: float = 60.0) -> float:
    """Polled every 50 ms: when ``group`` is stable with exactly ``members`` members."""
    deadline = time.monotonic() + timeout_s
    while True:
        view = await describe_group(admin, group, settings=settings)
        if view.settled_with(members, exactly=True):
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the runtime group did not settle: {view}")
        await asyncio.sleep(0.05)


async def worker_lost_at(settings: Settings, plan: TopicPlan, worker: str,
                         since: float) -> float | None:
    """When the checker declared ``worker`` lost (the alert's own timestamp)."""
    consumer = new_consumer(settings, fetch_max_wait_ms=5)
    await consumer.start()
    try:
        async for alert in read_alerts(consumer, plan.name(ALERTS),
                                       plan.topic(ALERTS).partitions, since - 1.0):
            details = alert.get("details") or {}
            if alert.get("kind") == "worker_lost" and details.get("worker") == worker:
                return float(alert["timestamp"].timestamp())
    finally:
        await consumer.stop()
    return None


def failover_section(rounds: Sequence[Mapping[str, Any]], session_timeout_ms: int,
                     workers: int, heartbeat_s: float) -> Section:
    """All rounds' agents together: kill -> resumed, with detection and rebalance apart;
    the ceiling is the group's own failover (kill -> stable without the member)."""
    total = latency_summary([x for r in rounds for x in r["total"]])
    detection = latency_summary([r["detection_s"] for r in rounds])
    rebalance = latency_summary([r["rebalance_s"] for r in rounds])
    resume = latency_summary([x for r in rounds for x in r["resume"]])
    ceiling = latency_summary([r["detection_s"] + r["rebalance_s"] for r in rounds])

    def brief(summary: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in summary.items() if k in ("p50_ms", "p99_ms", "max_ms")}

    result = section(
        "recovery.failover", "p99_ms",
        {**total, "agents": sum(r["agents"] for r in rounds),
         "phases": {"detection_ms": brief(detection), "rebalance_ms": brief(rebalance),
                    "resume_ms": brief(resume)}},
        ceiling, higher_is_better=False,
        what=f"worker SIGKILL -> every agent it hosted resumed (agent.resurrected), "
             f"{workers} workers, heartbeat {heartbeat_s:g}s, the health checker removing "
             f"the lost worker from the group (session timeout {session_timeout_ms} ms); "
             "ceiling: SIGKILL -> the group stable without the dead member",
    )
    result["goal"] = {"ours.p99_ms": FAILOVER_P99_GOAL_MS,
                      "met": total["p99_ms"] <= FAILOVER_P99_GOAL_MS}
    result["removed_by_checker"] = all(r["removed_by_checker"] for r in rounds)
    result["rounds"] = len(rounds)
    return result


async def wait_group(settings: Settings, plan: TopicPlan, members: int,
                     timeout_s: float = 60.0) -> float:
    """Poll until the runtime group is stable with ``members`` members; that epoch time."""
    admin = await connect(lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap),
                          what="waiting for the runtime managers", settings=settings)
    try:
        await until_group_settled(admin, runtime_group(settings), members, settings=settings,
                                  timeout_s=timeout_s, exactly=True)
    finally:
        await admin.close()
    return time.time()


async def read_streams(settings: Settings, plan: TopicPlan) -> dict[str, list[Event]]:
    streams: dict[str, list[Event]] = {}
    for value in await committed_values(settings, plan.name(EVENTS),
                                        plan.topic(EVENTS).partitions):
        event = decode_event(value)
        streams.setdefault(event.stream_id, []).append(event)
    return streams


async def wait_streams(settings: Settings, plan: TopicPlan, agents: Sequence[str],
                       event_type: str, timeout_s: float) -> dict[str, list[Event]]:
    deadline = time.monotonic() + timeout_s
    while True:
        streams = await read_streams(settings, plan)
        missing = [a for a in agents if not any(e.type == event_type
                                                for e in streams.get(a, ()))]
        if not missing:
            return streams
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(missing)} agents without {event_type} after "
                               f"{timeout_s}s, e.g. {missing[:3]}")
        await asyncio.sleep(0.2)


def host_of(events: Sequence[Event]) -> str | None:
    for event in reversed(events):
        if event.type in ("agent.started", "agent.resurrected"):
            worker = event.payload.get("worker")
            return None if worker is None else str(worker)
    return None


def kill_section(kills: Sequence[Mapping[str, Any]], session_timeout_ms: int,
                 workers: int) -> Section:
    """All kills' agents together: p50/p99 per phase; detection is the ceiling."""
    def pooled(name: str) -> list[float]:
        return [x for k in kills for x in k[name]]

    total = latency_summary(pooled("total"))
    detection = [k["detection_s"] for k in kills]
    ceiling = latency_summary(detection)
    phases = {"detection_ms": round(statistics.median(detection) * 1000, 1),
              **{f"{name}_ms": {key: value for key, value in latency_summary(pooled(name)).items()
                                if key in ("p50_ms", "p99_ms")}
                 for name in ("load", "replay", "resume")}}
    result = section(
        "recovery.kill", "p99_ms", {**total, "agents": sum(k["agents"] for k in kills),
                                    "phases": phases},
        ceiling, higher_is_better=False,
        what=f"worker SIGKILL -> every agent it hosted resumed on the survivor "
             f"(agent.resurrected), {workers} workers, session timeout {session_timeout_ms} "
             "ms; ceiling: SIGKILL -> the consumer group stable without the dead member",
    )
    result["goal"] = {"ours.p99_ms": KILL_P99_GOAL_MS, "met": total["p99_ms"] <= KILL_P99_GOAL_MS}
    result["session_timeout_ms"] = session_timeout_ms
    return result


# -- the report ---------------------------------------------------------------------------


async def run(settings: Settings, *, agents: int = 100, events: int = 1000, tail: int = 100,
              rounds: int = 3, kill_agents: int = 100, kill_workers: int = 2,
              kill_partitions: int = 6, kill_rounds: int = 1,
              session_timeout_ms: int = 3000, failover_agents: int = 200,
              failover_workers: int = 3, failover_rounds: int = 1,
              failover_session_timeout_ms: int = 10_000,
              failover_heartbeat_s: float = 0.25) -> Section:
    """The ``recovery`` report section (topics of its own, deleted at the end)."""
    where = machine()
    names = [f"agent-{i:04d}" for i in range(agents)]
    history = seal_from({}, {a: agent_history(a, events) for a in names})
    first_tail_task = events // TASK_EVENTS + 1
    results = [await partition_round(settings, history, tail, first_tail_task)
               for _ in range(max(1, rounds))]
    full = median_dict([r["full"] for r in results])
    snap = median_dict([r["snap"] for r in results])
    full_ceiling = median_dict([r["full_ceiling"].to_dict() for r in results])
    report = section(
        "recovery", "events_per_s", full, full_ceiling, target=REPLAY_RATIO_TARGET,
        what=f"one partition, {agents} agents x {events} events, no snapshots: events "
             "replayed per second of the replay phase (AgentHost.open_partition: fence, "
             "scan, verify chains, fold, build agents) vs raw aiokafka read_committed "
             "consume + fastavro decode of the same records into Events",
        round_ratios=[round(r["full"]["events_per_s"] / r["full_ceiling"].to_dict()[
            "events_per_s"], 3) for r in results],
    )
    snap_ceiling = median_dict([r["snap_ceiling"].to_dict() for r in results])
    snap["seconds"] = snap["recovery_s"]
    parts = {"snapshots": section(
        "recovery.snapshots", "seconds", snap, snap_ceiling, higher_is_better=False,
        what=f"the same partition after every agent's snapshot and {tail} more events each: "
             "whole recovery (load snapshots, scan from the checkpoint, verify, fold, "
             "resume) vs raw read of the snapshots partition + the events from the scan's "
             "start offset",
        speedup_vs_full=round(full["recovery_s"] / snap["recovery_s"], 2)
        if snap["recovery_s"] else None,
    )}
    if kill_rounds > 0:
        with tempfile.TemporaryDirectory(prefix="ares-bench-recovery-") as workdir:
            kills = [await kill_round(settings, agents=kill_agents, workers=kill_workers,
                                      partitions=kill_partitions,
                                      session_timeout_ms=session_timeout_ms,
                                      workdir=Path(workdir)) for _ in range(kill_rounds)]
        parts["kill"] = kill_section(kills, session_timeout_ms, kill_workers)
    if failover_rounds > 0:
        with tempfile.TemporaryDirectory(prefix="ares-bench-failover-") as workdir:
            failovers = [await failover_round(
                settings, agents=failover_agents, workers=failover_workers,
                partitions=kill_partitions, session_timeout_ms=failover_session_timeout_ms,
                heartbeat_s=failover_heartbeat_s, workdir=Path(workdir))
                for _ in range(failover_rounds)]
        parts["failover"] = failover_section(failovers, failover_session_timeout_ms,
                                             failover_workers, failover_heartbeat_s)
    report["parts"] = parts
    report["goal"] = {"ratio": REPLAY_RATIO_TARGET, "met": bool(
        report["ratio"] is not None and report["ratio"] >= REPLAY_RATIO_TARGET)}
    report["config"] = {"agents": agents, "events_per_agent": events, "tail": tail,
                        "rounds": max(1, rounds), "kill_agents": kill_agents,
                        "kill_workers": kill_workers, "kill_partitions": kill_partitions,
                        "kill_rounds": kill_rounds, "session_timeout_ms": session_timeout_ms,
                        "failover_agents": failover_agents,
                        "failover_workers": failover_workers,
                        "failover_rounds": failover_rounds,
                        "failover_session_timeout_ms": failover_session_timeout_ms,
                        "failover_heartbeat_s": failover_heartbeat_s,
                        "transaction_size": TRANSACTION_SIZE}
    report["machine"] = where
    return report


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=100, help="agents in the partition")
    parser.add_argument("--events", type=int, default=1000, help="events per agent")
    parser.add_argument("--tail", type=int, default=100,
                        help="events per agent after the snapshots (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="partition recovery rounds")
    parser.add_argument("--kill-agents", type=int, default=100,
                        help="agents over the workers of the SIGKILL measurement")
    parser.add_argument("--kill-workers", type=int, default=2,
                        help="runtime-manager processes (one is killed)")
    parser.add_argument("--kill-partitions", type=int, default=6,
                        help="partitions of the SIGKILL measurement's topics")
    parser.add_argument("--kill-rounds", type=int, default=1,
                        help="SIGKILL measurements (0: skip)")
    parser.add_argument("--session-timeout-ms", type=int, default=3000,
                        help="the workers' session timeout: bounds detection")
    parser.add_argument("--failover-agents", type=int, default=200,
                        help="agents of the SIGKILL-with-health-checker measurement")
    parser.add_argument("--failover-workers", type=int, default=3,
                        help="runtime-manager processes there (one is killed)")
    parser.add_argument("--failover-rounds", type=int, default=1,
                        help="SIGKILL-with-health-checker measurements (0: skip)")
    parser.add_argument("--failover-session-timeout-ms", type=int, default=10_000,
                        help="the workers' session timeout there (the checker beats it)")
    parser.add_argument("--failover-heartbeat-s", type=float, default=0.25,
                        help="the workers' heartbeat interval there")


if __name__ == "__main__":
    cli("Recovery: partition replay vs raw consume+decode; worker SIGKILL -> all resumed",
        run, _arguments)
