"""What every benchmark shares: timing, the report section, topics, workloads, the CLI.

A benchmark measures OUR path and its raw CEILING in the same run, on the same broker, with
the same bytes and producer/consumer settings, and reports ``ratio = ours / ceiling`` of one
``metric``. Client CPU is ``time.process_time()`` (every thread of this process; the broker
is another process) divided by the events handled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ares import native
from ares.config import Settings
from ares.events.chain import seal_encoded
from ares.events.kafka.reader import new_consumer
from ares.events.kafka.retry import connect
from ares.events.kafka.routing import partition_for
from ares.events.model import Event, NewEvent, StreamHead
from ares.gc_policy import apply_gc_policy
from ares.topics.loader import ENV_ENVIRONMENT, ENV_PARTITIONS, load_topics
from ares.topics.spec import TopicPlan, TopicSpec

Section = dict[str, Any]
BenchRun = Callable[..., Coroutine[Any, Any, Section]]

# The module of every benchmark event, and the JSON size of a step payload.
MODULE = "bench"
PAYLOAD_BYTES = 300


# -- timing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measurement:
    """Wall and client CPU time spent on ``events`` events, and the part of that CPU time
    the garbage collector took."""

    events: int
    wall_s: float
    cpu_s: float
    gc_s: float = 0.0

    def to_dict(self, **extra: Any) -> dict[str, Any]:
        return {
            "events": self.events,
            "seconds": round(self.wall_s, 4),
            "events_per_s": round(self.events / self.wall_s, 1) if self.wall_s else 0.0,
            "cpu_us_per_event": round(self.cpu_s / self.events * 1e6, 2) if self.events else 0.0,
            # What one saturated core would sustain: unlike events_per_s, this does not
            # drop when other processes take the CPU away.
            "events_per_cpu_s": round(self.events / self.cpu_s, 1) if self.cpu_s else 0.0,
            # Cores this process kept busy on average (1.0 = one core saturated).
            "cores": round(self.cpu_s / self.wall_s, 3) if self.wall_s else 0.0,
            # Of cpu_us_per_event: the collector's share (ares.gc_policy sets its thresholds).
            "gc_us_per_event": round(self.gc_s / self.events * 1e6, 2) if self.events else 0.0,
            **extra,
        }


def combine(parts: Sequence[Measurement]) -> Measurement:
    """Several measured rounds as one: total events over total time."""
    return Measurement(sum(m.events for m in parts), sum(m.wall_s for m in parts),
                       sum(m.cpu_s for m in parts), sum(m.gc_s for m in parts))


def rate_ratios(ours: Sequence[Measurement], ceiling: Sequence[Measurement]) -> list[float]:
    """events/s ratio of each round: their spread shows how noisy the machine was."""
    return [round((o.events / o.wall_s) / (c.events / c.wall_s), 3)
            for o, c in zip(ours, ceiling, strict=True) if o.wall_s and c.wall_s and c.events]


class CollectorClock:
    """CPU time this process spent in garbage collections, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.total_s += time.process_time() - self._started

    @classmethod
    def installed(cls) -> CollectorClock:
        """The process's clock, registered with the collector on first use."""
        for callback in gc.callbacks:
            if isinstance(callback, cls):
                return callback
        clock = cls()
        gc.callbacks.append(clock)
        return clock


class Stopwatch:
    """Wall (``perf_counter``), CPU (``process_time``) and collector time from ``start``
    to ``stop``."""

    def __init__(self) -> None:
        self._collector = CollectorClock.installed()
        self._gc = self._collector.total_s
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def stop(self, events: int) -> Measurement:
        return Measurement(events, time.perf_counter() - self._wall,
                           time.process_time() - self._cpu,
                           self._collector.total_s - self._gc)


def best_of(repeats: int, events: int, work: Callable[[], object]) -> Measurement:
    """The cheapest of ``repeats`` runs of CPU-only ``work`` over ``events`` events (the
    least disturbed by other processes, as ``timeit`` recommends)."""
    runs = []
    for _ in range(repeats):
        watch = Stopwatch()
        work()
        runs.append(watch.stop(events))
    return min(runs, key=lambda m: m.cpu_s)


def latency_summary(samples_s: Sequence[float]) -> dict[str, float | int]:
    """p50/p95/p99 (nearest rank), mean and max of latencies given in seconds, in ms."""
    ordered = sorted(samples_s)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1000

    return {
        "samples": len(ordered),
        "p50_ms": round(rank(0.50), 3),
        "p95_ms": round(rank(0.95), 3),
        "p99_ms": round(rank(0.99), 3),
        "mean_ms": round(sum(ordered) / len(ordered) * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


# -- the report ---------------------------------------------------------------------------


def section(name: str, metric: str, ours: Mapping[str, Any], ceiling: Mapping[str, Any], *,
            higher_is_better: bool = True, target: float | None = None,
            **extra: Any) -> Section:
    """One report section: our figure, its ceiling and ``ratio = ours[metric] / ceiling[metric]``.

    With ``higher_is_better`` (throughput) a ratio of 1.0 means "as fast as the raw client";
    for latencies it is the other way round. ``target`` is the ratio to report against
    (never asserted): ``met`` says whether this run reached it.
    """
    denominator = float(ceiling[metric])
    ratio = round(float(ours[metric]) / denominator, 3) if denominator else None
    result: Section = {
        "name": name,
        "metric": metric,
        "higher_is_better": higher_is_better,
        "ours": dict(ours),
        "ceiling": dict(ceiling),
        "ratio": ratio,
    }
    if target is not None:
        met = ratio is not None and (ratio >= target if higher_is_better else ratio <= target)
        result["target"] = {"ratio": target, "met": met}
    result.update(extra)
    return result


def render(report: Section, indent: str = "") -> str:
    """A section as aligned text lines: ours, ceiling, ratio, then its parts."""
    metric = report["metric"]
    lines = [f"{indent}{report['name']}  ({report.get('what', metric)})"]
    if (where := report.get("cluster")) is not None:
        lines.append(f"{indent}  on       {where['brokers']} broker(s), replication factor "
                     f"{where['replication_factor']}, min ISR {where['min_insync_replicas']}, "
                     f"acks={where['acks']}")
    for who in ("ours", "ceiling"):
        figures = report[who]
        shown = ", ".join(f"{k}={_short(v)}" for k, v in figures.items()
                          if not isinstance(v, dict | list))
        lines.append(f"{indent}  {who:<8} {shown}")
        lines.extend(f"{indent}  {'':<8} {k}: " + ", ".join(f"{kk}={_short(vv)}"
                                                            for kk, vv in v.items())
                     for k, v in figures.items() if isinstance(v, dict))
    target = report.get("target")
    verdict = ""
    if target is not None:
        relation = ">=" if report["higher_is_better"] else "<="
        verdict = (f"   target {relation} {target['ratio']}: "
                   f"{'met' if target['met'] else 'NOT met'}")
    lines.append(f"{indent}  ratio    {report['ratio']} ({metric}, ours/ceiling){verdict}")
    if report.get("round_ratio_median") is not None:
        by_order = "".join(f", {order.replace('_', ' ')} {median}"
                           for order, median in report.get("round_ratio_median_by_order",
                                                           {}).items())
        lines.append(f"{indent}  rounds   median {report['round_ratio_median']}{by_order} "
                     f"(of {len(report['round_ratios'])})")
    for note in report.get("notes", ()):
        lines.append(f"{indent}  note     {note}")
    for part in report.get("parts", {}).values():
        lines.append(render(part, indent + "  "))
    return "\n".join(lines)


def _short(value: Any) -> str:
    return f"{value:,.6g}" if isinstance(value, float) else str(value)


def machine() -> dict[str, Any]:
    """Where a figure was measured: the same code differs by machine and by load."""
    return {
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),  # other processes compete for the cores
        "python": platform.python_version(),
        "aiokafka": version("aiokafka"),
        "fastavro": version("fastavro"),
        # compiled (mypyc) or pure Python: the same code differs by about a sixth of the CPU
        "append_path": native.summary(),
        # the services' collector policy (ares.gc_policy), which both sides run under
        "gc_thresholds": list(gc.get_threshold()),
    }


# -- topics -------------------------------------------------------------------------------


def bench_settings(settings: Settings) -> Settings:
    """``settings`` with a topic prefix of this run's own: runs never see each other."""
    return settings.with_overrides(
        topic_prefix=f"{settings.topic_prefix}bench-{uuid.uuid4().hex[:8]}."
    )


def worker_env(settings: Settings, partitions: int) -> dict[str, str]:
    """The environment of a benchmark's ``ares run runtime-manager`` process: bound to
    ``settings``' broker and topics, quiet, no probe port, no example ledgers, and the
    repository on ``PYTHONPATH`` (its ``--agents`` kinds live in tests/ or bench/, wherever
    the benchmark is started from)."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "ARES_TOPIC_PREFIX": settings.topic_prefix, "ARES_TOPIC_PARTITIONS": str(partitions),
           "ARES_HTTP_PORT": "0", "ARES_LOG_LEVEL": "warning",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    env.pop("ARES_EXAMPLE_LEDGER_DIR", None)
    return env


def events_topic(settings: Settings) -> TopicSpec:
    """``ares.events`` as topics.yaml gives it in the topic environment of this process
    (``ARES_TOPIC_ENVIRONMENT``: ``ares bench --cluster 3`` selects ``cluster``, RF 3 and
    min ISR 2), so that every benchmark's topics replicate as production's would."""
    return load_topics(settings).topic("ares.events")


def events_topic_configs(settings: Settings) -> tuple[int, dict[str, str]]:
    """Partition count and configs of ``ares.events`` from topics.yaml (what production runs)."""
    spec = events_topic(settings)
    return spec.partitions, dict(spec.configs)


def bench_plan(settings: Settings, partitions: int) -> TopicPlan:
    """Every ares topic with ``partitions`` partitions, in this process's topic environment
    (replication factor and min ISR with it); other ``ARES_TOPIC_*`` knobs are not read."""
    return load_topics(settings, environment=os.environ.get(ENV_ENVIRONMENT, ""),
                       env={ENV_PARTITIONS: str(partitions)})


async def topology(settings: Settings) -> dict[str, Any]:
    """What the figures were measured on: brokers in the cluster, and the replication of the
    benchmark topics (every producer, ours and the ceilings', uses ``acks=all``)."""
    spec = events_topic(settings)
    admin = await connect(lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap,
                                                      client_id="ares-bench"),
                          what="describing the cluster", settings=settings)
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
    finally:
        await admin.close()
    return {"brokers": brokers, "replication_factor": spec.replication_factor,
            "min_insync_replicas": int(spec.configs.get("min.insync.replicas", "1")),
            "acks": producer_options(settings)["acks"]}


@asynccontextmanager
async def bench_topics(settings: Settings, names: Sequence[str],
                       partitions: int) -> AsyncIterator[list[str]]:
    """Create ``names`` like ``ares.events`` (replication and configs from topics.yaml);
    delete them after."""
    spec = events_topic(settings)
    admin = await connect(lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap,
                                                      client_id="ares-bench"),
                          what="creating the benchmark's topics", settings=settings)
    try:
        await admin.create_topics([NewTopic(name, partitions, spec.replication_factor,
                                            topic_configs=dict(spec.configs))
                                   for name in names])
        try:
            await _until_led(admin, settings.kafka_bootstrap, names, partitions)
            yield list(names)
        finally:
            await admin.delete_topics(list(names))
    finally:
        await admin.close()


async def _until_led(admin: AIOKafkaAdminClient, bootstrap: str, names: Sequence[str],
                     partitions: int, timeout_s: float = 30.0) -> None:
    """Wait until every partition of new topics has a leader that answers ListOffsets.

    The metadata names a leader a moment before that broker serves the partition; a client
    starting in between logs NotLeaderForPartition errors (and retries). The probe's own
    retries are silenced: they are expected here.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described = await admin.describe_topics(list(names))
        led = sum(1 for topic in described if topic["error_code"] == 0
                  for p in topic["partitions"] if p["leader"] >= 0)
        if led == len(names) * partitions:
            break
        await asyncio.sleep(0.1)
    else:
        raise TimeoutError(f"topics {list(names)} got no partition leaders in {timeout_s}s")
    logger = logging.getLogger("aiokafka")
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    try:
        await probe.start()
        await probe.end_offsets([TopicPartition(n, p) for n in names for p in range(partitions)])
    finally:
        await probe.stop()
        logger.setLevel(previous)


async def settled_end_offsets(settings: Settings, topic: str,
                              partitions: int) -> dict[int, int]:
    """End offset of every partition once the last transaction's markers are written.

    Commit markers are written after ``commit_transaction`` returns; until then the last
    stable offset (read_committed end) trails the high watermark. Each committed
    transaction adds one marker per partition, so ``end - data records`` counts them.
    """
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    committed = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                 isolation_level="read_committed")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                   isolation_level="read_uncommitted")
    await committed.start()
    await uncommitted.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            stable = await committed.end_offsets(tps)
            high = await uncommitted.end_offsets(tps)
            if stable == high or time.monotonic() > deadline:
                return {tp.partition: int(high[tp]) for tp in tps}
            await asyncio.sleep(0.05)
    finally:
        await committed.stop()
        await uncommitted.stop()


async def committed_values(settings: Settings, topic: str, partitions: int) -> list[bytes]:
    """Every committed record value of ``topic`` up to its end when called, partition by
    partition in offset order (what a benchmark reads back to measure from the log)."""
    consumer = new_consumer(settings, fetch_max_wait_ms=5)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        found: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(*tps, timeout_ms=500)
            for tp, records in batch.items():
                found[tp.partition].extend(r.value for r in records if r.value is not None)
        return [value for p in range(partitions) for value in found[p]]
    finally:
        await consumer.stop()


def producer_options(settings: Settings) -> dict[str, Any]:
    """The producer settings of a partition writer (``kafka_store.open_writer``): a ceiling
    must batch and acknowledge exactly like our path."""
    return {
        "bootstrap_servers": settings.kafka_bootstrap,
        "acks": "all",
        "linger_ms": 1,
        "max_batch_size": 1_048_576,
        "max_request_size": max(settings.max_record_bytes * 2, 1_048_576),
        "request_timeout_ms": int(settings.request_timeout_s * 1000),
    }


async def start_producer(settings: Settings, **overrides: Any) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(**{**producer_options(settings), **overrides})
    await producer.start()
    return producer


# -- workloads ----------------------------------------------------------------------------


def step_payload(stream_id: str, step: int) -> dict[str, Any]:
    """A realistic agent step: ~``PAYLOAD_BYTES`` of canonical JSON."""
    payload: dict[str, Any] = {
        "agent": stream_id,
        "step": step,
        "tool": "web.search",
        "input": {"query": f"quarterly revenue of supplier {step % 97} in region {step % 7}"},
        "tokens": {"prompt": 812 + step % 50, "completion": 164 + step % 13},
        "latency_ms": 1200 + step % 300,
        "output": "",
    }
    size = len(json.dumps(payload, sort_keys=True, separators=(",", ":")))
    payload["output"] = "x" * max(0, PAYLOAD_BYTES - size)
    return payload


def stream_ids(count: int, tag: str = "agent") -> list[str]:
    return [f"{tag}-{i:05d}" for i in range(count)]


def step_events(streams: Sequence[str], per_stream: int,
                event_type: str = "bench.step") -> dict[str, list[NewEvent]]:
    """``per_stream`` new events for each stream (a custom type: a JsonPayload)."""
    return {s: [NewEvent(type=event_type, module=MODULE, payload=step_payload(s, i))
                for i in range(per_stream)] for s in streams}


@dataclass(frozen=True, slots=True)
class Record:
    """One sealed event as a raw client sends it: our wire bytes, key, headers, partition;
    and the sealed ``Event``, unless the benchmark drops it (bench/recovery.py keeps 100,000
    records for a whole run: as Events they would be a million objects that every full
    garbage collection in the process walks, ours and the ceiling's alike)."""

    partition: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    event: Event | None


def seal_all(events: Mapping[str, Sequence[NewEvent]], partitions: int) -> dict[str, list[Record]]:
    """Every stream's events sealed (versions from 1, hash chain) into the records our
    partition writer would send: the ceilings' "same bytes", encoded once beforehand."""
    sealed: dict[str, list[Record]] = {}
    for stream_id, news in events.items():
        head = StreamHead()
        partition = partition_for(stream_id, partitions)
        key = stream_id.encode()
        records: list[Record] = []
        for new in news:
            event, wire = seal_encoded(stream_id, head, new, head.version + 1)
            head = StreamHead(event.version, event.hash)
            records.append(Record(partition, key, wire, (("ares.type", new.type.encode()),),
                                  event))
        sealed[stream_id] = records
    return sealed


def interleave(per_stream: Mapping[str, Sequence[Record]]) -> list[Record]:
    """Round robin over streams: the log order of a fleet whose agents step together."""
    queues = [list(records) for records in per_stream.values()]
    out: list[Record] = []
    depth = max((len(q) for q in queues), default=0)
    for i in range(depth):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def by_partition(records: Sequence[Record], partitions: int) -> list[list[Record]]:
    split: list[list[Record]] = [[] for _ in range(partitions)]
    for record in records:
        split[record.partition].append(record)
    return split


def chunks(items: Sequence[Record], count: int) -> list[Sequence[Record]]:
    """``items`` in ``count`` consecutive chunks whose sizes differ by at most one."""
    count = max(1, min(count, len(items)))
    size, extra = divmod(len(items), count)
    out: list[Sequence[Record]] = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


async def produce_transactions(producer: AIOKafkaProducer, topic: str,
                               transactions: Sequence[Sequence[Record]]) -> None:
    """begin, send every record, commit: the raw client's transactional append."""
    for records in transactions:
        await producer.begin_transaction()
        for r in records:
            await producer.send(topic, r.value, key=r.key, partition=r.partition,
                                headers=list(r.headers))
        await producer.commit_transaction()


# -- command line -------------------------------------------------------------------------


def cli(description: str, run: BenchRun,
        add_arguments: Callable[[argparse.ArgumentParser], None], *,
        postgres: bool = False) -> None:
    """``python bench/<name>.py [options] [--json] [--cluster N]``: run against ``ARES_*``
    settings, or a fresh cluster of its own (``postgres``: the benchmark needs PostgreSQL,
    which such a run brings when the configured one does not answer)."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report section as JSON")
    parser.add_argument("--cluster", type=int, default=1, choices=range(1, 6), metavar="N",
                        help="run on a fresh N-node Kafka cluster of its own (RF 3, min ISR 2 "
                             "from 3 nodes), stopped at the end; 1: ARES_KAFKA_BOOTSTRAP")
    args = vars(parser.parse_args())
    as_json = args.pop("json")
    nodes = args.pop("cluster")
    logging.basicConfig(level=logging.ERROR)
    settings = Settings.from_env()
    # The collector policy of `ares run <service>`: ours and the ceiling share this process,
    # so both run under it.
    apply_gc_policy(settings.gc_threshold)
    with contextlib.ExitStack() as stack:
        if nodes > 1:
            from bench.cluster import private_cluster

            settings = stack.enter_context(private_cluster(
                settings, nodes, postgres=postgres,
                progress=lambda line: print(line, file=sys.stderr)))
        report = asyncio.run(run(settings, **args))
        report["cluster"] = asyncio.run(topology(settings))
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(report))

