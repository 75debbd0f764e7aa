"""Durable waits: memory per waiting agent, and timer precision at 10,000 pending timers.

Run alone: ``python bench/waits.py [--agents N] [--timers T] [--window-start S]
[--window-end E] [--json]``.

Every agent is a ``test.waiter`` (``tests/support/agents.py``: one ``ctx.wait_for`` or one
``ctx.sleep``, nothing else) hosted by a real ``ares run runtime-manager`` process, started
and given its task through ``ares.commands`` as any client does.

* **memory** (one worker, its RSS: ``VmRSS`` of ``/proc/PID/status``, sampled until it
  settles): the empty worker (after a warm-up of every code path); ``--agents`` idle agents
  (started, no task); the same agents each waiting for a signal (``ctx.wait_for("go")``);
  then as many idle agents again, and those sleeping (``ctx.sleep`` of an hour). Bytes per
  agent are RSS deltas over ``--agents``: idle over the empty worker (the ceiling: the idle
  budget), waiting over idle (ours: idle + that extra), sleeping over its own idle batch.
  A separate in-process **model** rebuilds the same hosted agents from the same code
  (``HostedAgent``, ``run_open_tasks``, a sink that folds each sealed event back as the
  host does) under ``tracemalloc``: what the extra bytes of a waiting agent are.
* **timers** (a fresh worker and topics): ``--timers`` agents each sleep durably until a
  deadline spread evenly over ``--window-start``..``--window-end`` seconds after the first
  assignment. Lateness = the ``wait.completed`` timestamp (sealed by the partition writer)
  minus the deadline recorded in ``wait.started``: p50/p99/max, and how many woke early
  (never allowed). Ceiling: a bare asyncio ``call_at`` per deadline in this process, in
  the same minutes (what the event loop alone gives on this machine at this load).

Goals (reported, never asserted): <= 10 KB per waiting agent (idle's budget); every timer
within 1 s of its deadline at 10,000 pending timers on one worker, none early.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import random
import re
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from ares.agents.host_api import AgentServices, TaskOutcome
from ares.agents.registry import build_registry
from ares.client import Client
from ares.config import Settings
from ares.demo.processes import ServiceProcess
from ares.events.chain import seal_encoded
from ares.events.kafka.reader import new_consumer
from ares.events.model import NewEvent, StreamHead
from ares.events.wire.canonical import canonical_json
from ares.events.wire.codec import decode_event
from ares.lifecycle import events as ev
from ares.lifecycle.state import AgentLifecycle
from ares.runtime_manager.hosted import HostedAgent, run_open_tasks
from ares.tasks import wait_for
from ares.topics import EVENTS, TopicPlan, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/waits.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    Section,
    bench_plan,
    bench_settings,
    cli,
    latency_summary,
    machine,
    section,
    worker_env,
)
from bench.recovery import wait_group

KIND = "test.waiter"
AGENTS_SPEC = "tests.support.agents:REGISTRY"
WAITING_GOAL_BYTES = 10_240
LATENESS_GOAL_MS = 1000.0
SLEEP_S = 3600.0  # the memory phase's sleepers: an hour, far beyond the run
WARMUP_AGENTS = 20
MODULE = "runtime-manager"  # what the host's own events carry


# -- the worker ---------------------------------------------------------------------------


@dataclass
class Worker:
    """One ``ares run runtime-manager`` on topics of its own, with the test agent kinds."""

    settings: Settings
    plan: TopicPlan
    process: ServiceProcess
    client: Client

    @property
    def pid(self) -> int:
        assert self.process.proc is not None
        return self.process.proc.pid

    def log_tail(self, lines: int = 15) -> str:
        text = self.process.log.read_text(errors="replace") if self.process.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.asynccontextmanager
async def worker(settings: Settings, partitions: int, workdir: Path,
                 name: str) -> AsyncIterator[Worker]:
    """A worker process and a client (long reply timeouts: bursts of thousands of
    commands); the process SIGKILLed and the topics deleted at the end."""
    settings = bench_settings(settings).with_overrides(request_timeout_s=120.0)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    env = worker_env(settings, partitions)
    process = ServiceProcess(name, ["runtime-manager", "--instance-id", name, "--agents",
                                    AGENTS_SPEC], env, workdir / f"{name}.log")
    try:
        process.start()
        await wait_group(settings, plan, 1)
        async with Client(settings, plan, issuer="bench-waits") as client:
            yield Worker(settings, plan, process, client)
    finally:
        process.kill()
        await delete_topics(plan, settings)


async def each(items: Iterable[str], send: Callable[[str], Awaitable[object]],
               concurrency: int) -> float:
    """``send(item)`` for every item, ``concurrency`` in flight; the seconds it took."""
    gate = asyncio.Semaphore(concurrency)
    started = time.perf_counter()

    async def one(item: str) -> None:
        async with gate:
            await send(item)

    await asyncio.gather(*(one(i) for i in items))
    return time.perf_counter() - started


# -- what the worker committed ------------------------------------------------------------


@dataclass(slots=True)
class WaitSeen:
    kind: str
    deadline: float | None
    started_at: float
    completed_at: float | None = None
    outcome: str | None = None


@dataclass
class EventTail:
    """Every committed record of ``ares.events``, counted by type (its ``ares.type``
    header) as the worker commits it; only the waits are decoded."""

    worker: Worker
    types: Counter[str] = field(default_factory=Counter)
    waits: dict[tuple[str, str], WaitSeen] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> EventTail:
        plan = self.worker.plan
        consumer = new_consumer(self.worker.settings, fetch_max_wait_ms=100)
        await consumer.start()
        tps = [TopicPartition(plan.name(EVENTS), p) for p in range(plan.topic(EVENTS).partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._read(consumer))
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self, consumer: Any) -> None:
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    for record in records:
                        self._count(record)
        finally:
            await consumer.stop()

    def _count(self, record: Any) -> None:
        kind = next((v.decode() for k, v in record.headers if k == "ares.type"), "")
        self.types[kind] += 1
        if kind not in (ev.WAIT_STARTED, ev.WAIT_COMPLETED):
            return
        event = decode_event(record.value)
        key = (event.stream_id, str(event.payload.get("task_id")))
        at = event.timestamp.timestamp()
        if kind == ev.WAIT_STARTED:
            deadline = event.payload.get("deadline")
            self.waits[key] = WaitSeen(str(event.payload.get("kind")),
                                       None if deadline is None else float(deadline), at)
        elif (seen := self.waits.get(key)) is not None:
            seen.completed_at = at
            seen.outcome = str(event.payload.get("outcome"))

    def started(self, agents: Iterable[str], task_id: str) -> int:
        return sum(1 for a in agents if (a, task_id) in self.waits)

    def completed(self, agents: Iterable[str], task_id: str) -> int:
        return sum(1 for a in agents if (w := self.waits.get((a, task_id))) is not None
                   and w.completed_at is not None)

    async def until(self, count: Callable[[], int], expected: int, timeout_s: float,
                    what: str) -> float:
        """Wait until ``count() >= expected``; the seconds it took."""
        started = time.monotonic()
        while count() < expected:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{count()} of {expected} agents {what} after {timeout_s:g}"
                                   f" s; the worker's log ends:\n{self.worker.log_tail()}")
            await asyncio.sleep(0.2)
        return time.monotonic() - started


# -- memory: RSS of the worker ------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``RssAnon`` of a process, in bytes."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            found[key] = int(value.split()[0]) * 1024
    return found


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settled_rss(pid: int, *, interval_s: float, window: int,
                      max_s: float) -> dict[str, Any]:
    """RSS once it stops moving: ``window`` samples ``interval_s`` apart within 256 KiB
    (or 0.5 %), at most ``max_s``; the median of the last ``window``."""
    samples: list[dict[str, int]] = []
    started = time.monotonic()
    settled = False
    while True:
        samples.append(proc_status(pid))
        last = [s["VmRSS"] for s in samples[-window:]]
        if len(last) == window and max(last) - min(last) <= max(262_144, 0.005 * max(last)):
            settled = True
            break
        if time.monotonic() - started > max_s:
            break
        await asyncio.sleep(interval_s)
    tail = samples[-window:]
    return {"rss_bytes": int(statistics.median(s["VmRSS"] for s in tail)),
            "anon_bytes": int(statistics.median(s["RssAnon"] for s in tail)),
            "spread_bytes": max(s["VmRSS"] for s in tail) - min(s["VmRSS"] for s in tail),
            "samples": len(samples), "settled": settled}


@dataclass(frozen=True, slots=True)
class Settle:
    interval_s: float = 1.0
    window: int = 5
    max_s: float = 60.0


async def memory(settings: Settings, *, agents: int, partitions: int, concurrency: int,
                 settle: Settle, workdir: Path) -> dict[str, Any]:
    """The four RSS phases on one worker; the figures and the seconds of each phase."""
    waiters = [f"wait-{i:05d}" for i in range(agents)]
    sleepers = [f"sleep-{i:05d}" for i in range(agents)]
    phases: dict[str, float] = {}
    rss: dict[str, dict[str, Any]] = {}
    async with worker(settings, partitions, workdir, "bench-waits-memory") as w, \
            EventTail(w) as tail:
        client = w.client

        async def start(agent: str) -> None:
            await client.start_agent(agent, KIND)

        def assign(task_input: Mapping[str, Any]) -> Callable[[str], Awaitable[object]]:
            return lambda agent: client.assign_task(agent, "t1", dict(task_input))

        async def measure(name: str) -> None:
            rss[name] = await settled_rss(w.pid, interval_s=settle.interval_s,
                                          window=settle.window, max_s=settle.max_s)

        await warm_up(w, tail, concurrency)
        await measure("empty")
        phases["start_idle"] = await each(waiters, start, concurrency)
        await measure("idle")
        phases["assign_waits"] = await each(waiters, assign({"signal": "go"}), concurrency)
        phases["until_waiting"] = await tail.until(lambda: tail.started(waiters, "t1"),
                                                   agents, 300, "waiting for a signal")
        await measure("waiting")
        phases["start_idle_2"] = await each(sleepers, start, concurrency)
        await measure("idle_2")
        phases["assign_sleeps"] = await each(sleepers, assign({"seconds": SLEEP_S}),
                                             concurrency)
        phases["until_sleeping"] = await tail.until(lambda: tail.started(sleepers, "t1"),
                                                    agents, 300, "sleeping")
        await measure("sleeping")
        kinds = Counter(seen.kind for seen in tail.waits.values())
        woken = sum(1 for a in [*waiters, *sleepers] if tail.waits[(a, "t1")].completed_at)
        events = dict(tail.types)
    return {"rss": rss, "phases_s": {k: round(v, 2) for k, v in phases.items()},
            "waits_seen": dict(kinds), "woken_meanwhile": woken, "events": events}


async def warm_up(w: Worker, tail: EventTail, concurrency: int) -> None:
    """Every code path once before the empty worker is measured: start, a signal wait and
    its signal, a short sleep; so that first-use costs (imports, caches, buffers) do not
    land on the agents measured."""
    agents = [f"warm-{i:02d}" for i in range(WARMUP_AGENTS)]
    client = w.client
    await each(agents, lambda a: client.start_agent(a, KIND), concurrency)
    await each(agents, lambda a: client.assign_task(a, "t1", {"signal": "go"}), concurrency)
    await tail.until(lambda: tail.started(agents, "t1"), len(agents), 120, "warm-up waiting")
    await each(agents, lambda a: client.command("agent.signal", a, name="go",
                                                 signal_id=f"{a}-go", payload_json="null"),
               concurrency)
    await each(agents, lambda a: client.assign_task(a, "t2", {"seconds": 0.5}), concurrency)
    await tail.until(lambda: tail.completed(agents, "t2"), len(agents), 120, "warm-up woken")


def per_agent(after: Mapping[str, Any], before: Mapping[str, Any], agents: int) -> int:
    return round((int(after["rss_bytes"]) - int(before["rss_bytes"])) / agents)


# -- memory: the in-process model under tracemalloc ---------------------------------------


class LocalSink:
    """The model's partition writer: seals each event after the stream's head and folds it
    into the hosted agent, as the host does with every committed event."""

    def __init__(self, hosted: HostedAgent) -> None:
        self._hosted = hosted
        self._head = StreamHead()

    async def append(self, events: Sequence[NewEvent], alerts: Sequence[Any] = ()) -> int:
        for new in events:
            event, _ = seal_encoded(self._hosted.agent_id, self._head, new,
                                    self._head.version + 1)
            self._head = StreamHead(event.version, event.hash)
            self._hosted.on_event(event, event.version)
        return self._head.version

    def heartbeat(self, progress: str | None = None) -> None:
        self._hosted.last_progress = time.monotonic()
        if progress is not None and self._hosted.beat is not None:
            self._hosted.beat.progress = progress


async def _nothing(_hosted: HostedAgent, _outcome: TaskOutcome) -> None:
    return None


async def _supervise(hosted: HostedAgent, sink: LocalSink, services: AgentServices) -> None:
    """The host's supervisor around one incarnation (``supervision.supervise``)."""
    hosted.incarnation_task = asyncio.create_task(
        run_open_tasks(hosted, sink, services, _nothing))  # type: ignore[arg-type]
    await hosted.incarnation_task


# tracemalloc's own allocations (the snapshots themselves) are not the agents'.
OWN = (tracemalloc.Filter(False, tracemalloc.__file__),)


def total(snapshot: tracemalloc.Snapshot) -> int:
    return sum(s.size for s in snapshot.statistics("filename"))


def _where(stat: tracemalloc.StatisticDiff) -> str:
    """An allocation site as ``package/module.py:line``. The compiled append path
    allocates in C, so the sealed events show up at the model's call of ``seal_encoded``."""
    frame = stat.traceback[0]
    if frame.filename == __file__:
        return f"sealed events (Event, payload, hash: seal_encoded, {Path(__file__).name}:" \
               f"{frame.lineno})"
    path = re.sub(r"^.*?/(services|site-packages|lib/python3\.\d+)/", "", frame.filename)
    return f"{path}:{frame.lineno}"


async def model(count: int, task_input: Mapping[str, Any]) -> dict[str, Any]:
    """``count`` hosted agents built by the host's own code, idle and then each running a
    task that waits on ``task_input``: bytes per agent under tracemalloc, the cyclic
    garbage the wait leaves for the collector, and the biggest allocation sites."""
    registry = build_registry([AGENTS_SPEC])
    services = AgentServices()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.take_snapshot()
        hosted: list[tuple[HostedAgent, LocalSink]] = []
        for i in range(count):
            agent_id = f"model-{i:05d}"
            entry = HostedAgent(agent_id, i % 12, AgentLifecycle(agent_id))
            sink = LocalSink(entry)
            await sink.append([NewEvent(ev.AGENT_STARTED, MODULE, {
                "kind": KIND, "config_json": "{}", "incarnation": 1, "worker": "bench-model"})])
            entry.agent = registry.create(KIND, agent_id, {})
            entry.supervisor = asyncio.create_task(_supervise(entry, sink, services))
            hosted.append((entry, sink))
        await asyncio.sleep(0.01)  # every incarnation parked on its wake-up event
        gc.collect()
        idle = tracemalloc.take_snapshot()
        input_json = canonical_json(dict(task_input))
        for _, sink in hosted:
            await sink.append([NewEvent(ev.TASK_ASSIGNED, MODULE, {
                "task_id": "t1", "input_json": input_json})])
        for _ in range(60_000):  # every task's run ended on its wait (at most 10 min)
            if all(entry.waiting for entry, _ in hosted):
                break
            await asyncio.sleep(0.01)
        else:
            raise TimeoutError("the model's agents did not all reach their wait")
        await asyncio.sleep(0.01)
        before_gc = tracemalloc.get_traced_memory()[0]
        gc.collect()
        after_gc = tracemalloc.get_traced_memory()[0]
        waiting = tracemalloc.take_snapshot()
        base, idle, waiting = (s.filter_traces(OWN) for s in (base, idle, waiting))
        sites = waiting.compare_to(idle, "lineno")
    finally:
        tracemalloc.stop()
    for entry, _ in hosted:
        entry.stop_waiting(wake=False)
        if entry.supervisor is not None:
            entry.supervisor.cancel()
    await asyncio.gather(*(e.supervisor for e, _ in hosted if e.supervisor),
                         return_exceptions=True)

    idle_bytes, waiting_bytes = total(idle) - total(base), total(waiting) - total(idle)
    return {
        "agents": count,
        "idle_bytes": idle_bytes // count,
        "extra_bytes": waiting_bytes // count,
        "cyclic_garbage_bytes": (before_gc - after_gc) // count,
        "top_sites": [{"where": _where(s), "bytes": s.size_diff // count,
                       "blocks": round(s.count_diff / count, 2)}
                      for s in sites[:10] if s.size_diff > 0],
    }


# -- timers -------------------------------------------------------------------------------


def bare_timers(deadlines: Sequence[float]) -> tuple[list[float], asyncio.Future[None]]:
    """The ceiling: one ``loop.call_at`` per deadline (epoch seconds) in this process; the
    lateness of each as it fires, and a future done when all have."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    done: asyncio.Future[None] = loop.create_future()

    def fire(deadline: float) -> None:
        late.append(time.time() - deadline)
        if len(late) == len(deadlines) and not done.done():
            done.set_result(None)

    offset = time.time() - loop.time()
    for deadline in deadlines:
        loop.call_at(deadline - offset, fire, deadline)
    return late, done


def peak_pending(waits: Iterable[WaitSeen]) -> int:
    """The most timers pending at once (recorded, not yet completed), from the events."""
    changes = sorted([(w.started_at, 1) for w in waits]
                     + [(w.completed_at, -1) for w in waits if w.completed_at is not None],
                     key=lambda c: (c[0], c[1]))
    pending = peak = 0
    for _, change in changes:
        pending += change
        peak = max(peak, pending)
    return peak


async def timers(settings: Settings, *, count: int, window: tuple[float, float],
                 partitions: int, concurrency: int, workdir: Path) -> dict[str, Any]:
    """``count`` durable sleeps on one fresh worker, due evenly over ``window`` seconds
    after the first assignment; lateness from their events, and the bare loop's."""
    agents = [f"timer-{i:05d}" for i in range(count)]
    spread = [window[0] + (window[1] - window[0]) * k / max(1, count - 1)
              for k in range(count)]
    random.Random(27).shuffle(spread)
    async with worker(settings, partitions, workdir, "bench-waits-timers") as w, \
            EventTail(w) as tail:
        client = w.client
        start_s = await each(agents, lambda a: client.start_agent(a, KIND), concurrency)
        origin = time.time()
        deadlines = {a: origin + s for a, s in zip(agents, spread, strict=True)}
        late, ceiling_done = bare_timers(list(deadlines.values()))
        cpu = [proc_cpu_s(w.pid)]
        clamped = 0

        def sleep_until(agent: str) -> Awaitable[object]:
            nonlocal clamped
            seconds = deadlines[agent] - time.time()
            if seconds < 1.0:  # the assignments ran past the window's start
                clamped += 1
            return client.assign_task(agent, "t1", {"seconds": max(1.0, seconds)})

        assign_s = await each(agents, sleep_until, concurrency)
        cpu.append(proc_cpu_s(w.pid))
        timeout = max(0.0, origin + window[1] - time.time()) + 180
        with contextlib.suppress(TimeoutError):
            await tail.until(lambda: tail.completed(agents, "t1"), count, timeout, "woken")
        cpu.append(proc_cpu_s(w.pid))
        with contextlib.suppress(TimeoutError):
            await wait_for(ceiling_done, 10)
        waits = [tail.waits[(a, "t1")] for a in agents if (a, "t1") in tail.waits]
    woken = [(x.completed_at, x.deadline) for x in waits
             if x.completed_at is not None and x.deadline is not None]
    lateness = [at - deadline for at, deadline in woken]
    first_wake = min((at for at, _ in woken), default=None)
    return {"lateness": lateness, "ceiling": late, "recorded": len(waits),
            "completed": len(woken), "early": sum(1 for x in lateness if x < 0),
            "outcomes": dict(Counter(x.outcome for x in waits if x.outcome is not None)),
            "peak_pending": peak_pending(waits),
            "pending_at_first_wake": sum(1 for x in waits if first_wake is not None
                                         and x.started_at < first_wake),
            "seconds": {"start": round(start_s, 2), "assign": round(assign_s, 2),
                        "window": list(window)},
            # the worker's CPU while assigning, then until the last timer woke
            "worker_cpu_s": {"assign": round(cpu[1] - cpu[0], 2),
                             "until_woken": round(cpu[2] - cpu[1], 2)},
            "deadlines_clamped": clamped}


# -- the report ---------------------------------------------------------------------------


def memory_sections(found: Mapping[str, Any], agents: int,
                    models: Mapping[str, Mapping[str, Any]]) -> tuple[Section, Section]:
    rss = found["rss"]
    idle = per_agent(rss["idle"], rss["empty"], agents)
    idle_2 = per_agent(rss["idle_2"], rss["waiting"], agents)
    extra_wait = per_agent(rss["waiting"], rss["idle"], agents)
    extra_sleep = per_agent(rss["sleeping"], rss["idle_2"], agents)

    def figures(bytes_per_agent: int, extra: int | None, after: Mapping[str, Any]
                ) -> dict[str, Any]:
        shown: dict[str, Any] = {"agents": agents, "bytes_per_agent": bytes_per_agent}
        if extra is not None:
            shown["extra_over_idle"] = extra
        shown["rss_mb"] = round(after["rss_bytes"] / 2**20, 1)
        return shown

    waiting = section(
        "waits", "bytes_per_agent", figures(idle + extra_wait, extra_wait, rss["waiting"]),
        figures(idle, None, rss["idle"]), higher_is_better=False,
        what=f"one worker's RSS per agent: {agents} agents each waiting for a signal "
             "(ctx.wait_for) vs the same agents idle (started, no task), over the empty "
             "worker",
    )
    waiting["goal"] = {"ours.bytes_per_agent": WAITING_GOAL_BYTES,
                       "met": idle + extra_wait <= WAITING_GOAL_BYTES}
    waiting["rss"] = rss
    waiting["phases_s"] = found["phases_s"]
    waiting["events"] = found["events"]
    waiting["waits_seen"] = found["waits_seen"]
    waiting["woken_meanwhile"] = found["woken_meanwhile"]
    if "signal" in models:
        waiting["model"] = models["signal"]
    sleeping = section(
        "waits.sleeping", "bytes_per_agent",
        figures(idle_2 + extra_sleep, extra_sleep, rss["sleeping"]),
        figures(idle_2, None, rss["idle_2"]), higher_is_better=False,
        what=f"{agents} more agents on the same worker, each in a durable ctx.sleep of an "
             "hour (a timer handle in the loop) vs the same agents idle",
    )
    sleeping["goal"] = {"ours.bytes_per_agent": WAITING_GOAL_BYTES,
                        "met": idle_2 + extra_sleep <= WAITING_GOAL_BYTES}
    if "timer" in models:
        sleeping["model"] = models["timer"]
    return waiting, sleeping


def timer_section(found: Mapping[str, Any], count: int) -> Section:
    ours = {**latency_summary(found["lateness"] or [0.0]), "early": found["early"],
            "completed": found["completed"], "peak_pending": found["peak_pending"]}
    ceiling = {**latency_summary(found["ceiling"] or [0.0]),
               "early": sum(1 for x in found["ceiling"] if x < 0)}
    window = found["seconds"]["window"]
    report = section(
        "waits.timers", "p99_ms", ours, ceiling, higher_is_better=False,
        what=f"{count} durable ctx.sleep on one worker, due evenly {window[0]:g}-"
             f"{window[1]:g} s after the first assignment: wait.completed timestamp - "
             "recorded deadline; ceiling: a bare asyncio call_at per deadline",
    )
    report["goal"] = {"ours.max_ms": LATENESS_GOAL_MS, "early": 0,
                      "met": bool(found["lateness"]) and found["completed"] == count
                      and ours["max_ms"] <= LATENESS_GOAL_MS and found["early"] == 0}
    report.update({k: found[k] for k in ("recorded", "outcomes", "pending_at_first_wake",
                                         "seconds", "worker_cpu_s",
                                         "deadlines_clamped")})
    return report


async def run(settings: Settings, *, agents: int = 10_000, timers_count: int = 10_000,
              window_start: float = 60.0, window_end: float = 90.0, partitions: int = 12,
              concurrency: int = 200, model_agents: int = 2000,
              settle_interval_s: float = 1.0, settle_window: int = 5,
              settle_max_s: float = 60.0) -> Section:
    """The ``waits`` report section (a worker and topics of its own per part)."""
    where = machine()
    started = time.monotonic()
    settle = Settle(settle_interval_s, settle_window, settle_max_s)
    with tempfile.TemporaryDirectory(prefix="ares-bench-waits-") as workdir:
        found = await memory(settings, agents=agents, partitions=partitions,
                             concurrency=concurrency, settle=settle, workdir=Path(workdir))
        memory_s = time.monotonic() - started
        models = {}
        if model_agents > 0:
            await model(min(20, model_agents), {"signal": "go"})  # first-use costs
            models["signal"] = await model(model_agents, {"signal": "go"})
            models["timer"] = await model(model_agents, {"seconds": SLEEP_S})
        report, sleeping = memory_sections(found, agents, models)
        parts: dict[str, Section] = {"sleeping": sleeping}
        if timers_count > 0:
            timed = await timers(settings, count=timers_count,
                                 window=(window_start, window_end), partitions=partitions,
                                 concurrency=concurrency, workdir=Path(workdir))
            parts["timers"] = timer_section(timed, timers_count)
    report["parts"] = parts
    report["config"] = {"agents": agents, "timers": timers_count,
                        "window_s": [window_start, window_end], "partitions": partitions,
                        "concurrency": concurrency, "model_agents": model_agents,
                        "settle": {"interval_s": settle_interval_s, "window": settle_window,
                                   "max_s": settle_max_s}}
    report["seconds"] = {"memory": round(memory_s, 1),
                         "total": round(time.monotonic() - started, 1)}
    report["machine"] = where
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=10_000,
                        help="agents of each memory phase (waiting, then sleeping)")
    parser.add_argument("--timers", dest="timers_count", type=int, default=10_000,
                        help="durable sleeps of the precision run (0: skip)")
    parser.add_argument("--window-start", type=float, default=60.0,
                        help="the first deadline, seconds after the first assignment")
    parser.add_argument("--window-end", type=float, default=90.0,
                        help="the last deadline, seconds after the first assignment")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--concurrency", type=int, default=200,
                        help="commands in flight while starting and assigning")
    parser.add_argument("--model-agents", type=int, default=2000,
                        help="agents of the in-process tracemalloc model (0: skip)")
    parser.add_argument("--settle-interval-s", type=float, default=1.0)
    parser.add_argument("--settle-window", type=int, default=5)
    parser.add_argument("--settle-max-s", type=float, default=60.0)


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], run, add_arguments)
