"""Scale-out and scale-in without a stall: runtime managers join, leave and die under load.

Run alone: ``python bench/scaling.py [--agents N] [--partitions P] [--step-ms M] [--json]``.

``--agents`` ``example.pipeline`` agents (one endless task each: an offline LLM step every
``--step-ms``) run on ``--initial`` ``ares run runtime-manager`` processes (static members
``sc-w1``, ``sc-w2``..., sticky assignor). Then, one step at a time, each followed by
``--observe-s`` of steady running:

* **scale_out**: ``--add`` more workers start;
* **scale_in**: the workers named by ``--remove`` (numbers: ``3`` is ``sc-w3``) get SIGTERM
  (graceful: hand-off, final snapshots; with ``--leave-on-stop`` they then leave the group,
  ``ares run runtime-manager --leave-group-on-stop``, instead of waiting out their session);
* **kill**: the workers named by ``--kill`` get SIGKILL (the group waits out their session).

Per step: the group's assignment before and after (from the coordinator's description)
says which partitions moved; ``rebalance_ms`` is action -> the group stable with the new
members (a new worker's start-up and a dead one's session timeout included),
``join_sync_ms`` the group first seen rebalancing -> stable (both polled every 50 ms). An
agent's **stall** is the longest gap between two consecutive ``llm.call`` events of its
stream (writer timestamps) that overlaps the step's window (action -> group stable),
reported apart for agents on moved and on unmoved partitions, next to the steady gaps of
the ``--steady-s`` before the action. ``stalled`` counts agents whose gap exceeds the
longest steady gap of the whole fleet.

The **ceiling** (same run, before ours): a raw aiokafka consumer group of the same members
(subprocesses with the same instance ids, sticky assignor, session timeout and group
heartbeat, a listener that does nothing) consuming a steady stream (one record per
partition every ``RAW_TICK_S``), put through the same steps: its rebalance, and each
partition's longest consumption gap over the window (moved / unmoved). That is the stall the
consumer group itself imposes (aiokafka's eager protocol stops fetching during the
join/sync); what ours adds on top is the owner's reaction (holding commits, taking over,
resuming agents). A SIGTERMed raw member also leaves the group by its instance id (unless
``--raw-static-close``), which a runtime manager does not do: the scale-in ceiling is what
the group could do at best.

The pace is a knob because 2 cores shared with the broker cannot hold 2,000 agents at a fast
one: the steady gaps in the report say whether a run held its ``--step-ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocol

from ares.client import Client
from ares.config import Settings
from ares.demo.processes import ServiceProcess
from ares.events.kafka.groups import describe_group, remove_member, runtime_group
from ares.events.kafka.retry import connect
from ares.events.kafka.routing import partition_for
from ares.events.model import Event
from ares.topics import TopicPlan, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/scaling.py: make ``bench`` importable
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
from bench.recovery import KIND, read_streams, settled_at

STEP_EVENT = "llm.call"
RAW_TICK_S = 0.05  # the ceiling's stream: one record per partition this often
POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Step:
    name: str  # scale_out, scale_in, kill
    workers: tuple[str, ...]  # instance ids started, stopped or killed


def plan_steps(initial: int, add: int, remove: Sequence[int],
               kill: Sequence[int]) -> list[Step]:
    """The scenario: worker numbers are 1-based (``sc-w1`` is the first started)."""
    steps: list[Step] = []
    if add:
        steps.append(Step("scale_out", tuple(worker(i) for i in
                                             range(initial + 1, initial + add + 1))))
    if remove:
        steps.append(Step("scale_in", tuple(worker(i) for i in remove)))
    if kill:
        steps.append(Step("kill", tuple(worker(i) for i in kill)))
    members = initial + add - len(remove) - len(kill)
    if members < 1 or len({*remove, *kill}) != len(remove) + len(kill):
        raise ValueError("the steps must leave at least one worker, each removed once")
    return steps


def worker(number: int) -> str:
    return f"sc-w{number}"


@dataclass(slots=True)
class StepRecord:
    """What happened in one step, as seen from outside."""

    step: Step
    action_at: float
    settled_at: float
    before: dict[int, str]  # partition -> owner (instance id)
    after: dict[int, str]
    began_at: float | None = None  # first seen rebalancing (join/sync)

    @property
    def moved(self) -> set[int]:
        return {p for p, owner in self.before.items() if self.after.get(p) != owner}

    def to_dict(self, partitions: int) -> dict[str, Any]:
        moved = self.moved
        return {"workers": list(self.step.workers),
                # action -> stable: a new worker's start-up, a dead one's session timeout
                "rebalance_ms": round((self.settled_at - self.action_at) * 1000, 1),
                # first seen rebalancing -> stable: the join/sync itself and the members'
                # callbacks (None: over between two polls)
                "join_sync_ms": None if self.began_at is None else round(
                    (self.settled_at - self.began_at) * 1000, 1),
                "partitions_moved": len(moved), "partitions_unmoved": partitions - len(moved),
                "moved": sorted(moved),
                "members_before": sorted(set(self.before.values())),
                "members_after": sorted(set(self.after.values()))}


# -- the group's assignment ---------------------------------------------------------------


async def assignment(admin: AIOKafkaAdminClient, group: str) -> dict[int, str]:
    """partition -> the client id of the member it is assigned to (one topic per group)."""
    [response] = await admin.describe_consumer_groups([group])
    owners: dict[int, str] = {}
    for described in response.to_object()["groups"]:
        for member in described["members"]:
            if not member["member_assignment"]:
                continue
            decoded = ConsumerProtocol.ASSIGNMENT.decode(member["member_assignment"])
            for tp in decoded.partitions():
                owners[tp.partition] = str(member["client_id"])
    return owners


@dataclass(slots=True)
class Fleet:
    """Member processes by instance id, and how to change them (ours or the raw group)."""

    spawn: Callable[[str], ServiceProcess]  # instance id -> its started process
    admin: AIOKafkaAdminClient
    group: str
    settings: Settings
    procs: dict[str, ServiceProcess] = field(default_factory=dict)

    def start(self, ids: Sequence[str]) -> None:
        for instance in ids:
            self.procs[instance] = self.spawn(instance)

    @property
    def members(self) -> int:
        return sum(1 for p in self.procs.values() if p.alive)

    async def settle(self) -> float:
        return await settled_at(self.admin, self.group, self.members, self.settings,
                                timeout_s=120.0)

    async def apply(self, step: Step) -> StepRecord:
        before = await assignment(self.admin, self.group)
        alive = {name for name, proc in self.procs.items() if proc.alive}
        expected = len(alive | set(step.workers)) if step.name == "scale_out" else len(
            alive - set(step.workers))
        action_at = time.time()
        stopping: list[ServiceProcess] = []
        if step.name == "scale_out":
            self.start(step.workers)
        for instance in step.workers:
            proc = self.procs[instance]
            if step.name == "scale_in" and proc.proc is not None:
                os.killpg(proc.proc.pid, signal.SIGTERM)  # graceful; reaped below
                stopping.append(proc)
            elif step.name == "kill":
                proc.kill()
        try:
            began, settled = await self._rebalanced(expected)
        except TimeoutError as exc:  # say why: a worker that never joined left its log
            raise TimeoutError(f"{exc}; {self._tails(step.workers)}") from None
        for proc in stopping:
            await asyncio.to_thread(proc.stop, 60.0)
        return StepRecord(step, action_at, settled, before,
                          await assignment(self.admin, self.group), began)

    async def _rebalanced(self, members: int,
                          timeout_s: float = 120.0) -> tuple[float | None, float]:
        """Polled every 50 ms: when the group was first seen rebalancing (None if it
        finished between two polls), and when it was stable with ``members`` members."""
        began: float | None = None
        deadline = time.monotonic() + timeout_s
        while True:
            view = await describe_group(self.admin, self.group, settings=self.settings)
            now = time.time()
            if began is None and view.state != "Stable":
                began = now
            if view.settled_with(members, exactly=True):
                return began, now
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.group} did not settle on {members}: {view}")
            await asyncio.sleep(POLL_S)

    def _tails(self, ids: Sequence[str], lines: int = 5) -> str:
        tails = []
        for instance in ids:
            proc = self.procs[instance]
            code = None if proc.proc is None else proc.proc.poll()
            text = proc.log.read_text(errors="replace") if proc.log.exists() else ""
            tails.append(f"{instance} (exit code {code}): "
                         + " | ".join(text.splitlines()[-lines:]))
        return "; ".join(tails)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.kill()


# -- gaps ---------------------------------------------------------------------------------


def gaps_over(times: Sequence[float], start: float, end: float,
              until: float) -> float | None:
    """The longest gap between consecutive ``times`` (sorted) that overlaps
    [``start``, ``end``]; a stream that went quiet counts until ``until``."""
    longest: float | None = None
    for before, after in zip(times, [*times[1:], until], strict=True):
        if before <= end and after >= start:
            longest = max(longest or 0.0, after - before)
    return longest


def steady_gaps(times: Sequence[float], start: float, end: float) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times) if a >= start and b < end]


def summary(gaps_s: Sequence[float]) -> dict[str, Any]:
    if not gaps_s:
        return {"samples": 0}
    figures = latency_summary(gaps_s)
    return {k: v for k, v in figures.items() if k in ("samples", "p50_ms", "p99_ms", "max_ms")}


def step_figures(record: StepRecord, timelines: Mapping[int, Sequence[Sequence[float]]],
                 steady_s: float, until: float) -> dict[str, Any]:
    """Stall of moved and unmoved units (agents, or the raw group's partitions) in one
    step, against the steady gaps before it. ``timelines``: per partition, each unit's
    sorted step times."""
    start, end = record.action_at, record.settled_at
    steady = [g for lines in timelines.values() for times in lines
              for g in steady_gaps(times, start - steady_s, start)]
    ceiling_gap = max(steady, default=0.0)
    out: dict[str, Any] = {**record.to_dict(len(timelines)), "steady_gap": summary(steady)}
    everyone: list[float] = []
    for label, chosen in (("moved", record.moved), ("unmoved", set(timelines) - record.moved)):
        stalls = [g for p in chosen for times in timelines[p]
                  if (g := gaps_over(times, start, end, until)) is not None]
        everyone += stalls
        out[label] = {**summary(stalls),
                      "stalled": sum(1 for g in stalls if g > ceiling_gap)}
    out.update({k: v for k, v in summary(everyone).items() if k != "samples"})
    out.setdefault("p99_ms", 0.0)
    out["stall_p99_ms"] = out["p99_ms"]
    return out


# -- ours ---------------------------------------------------------------------------------


async def launch(settings: Settings, plan: TopicPlan, fleet: Sequence[str], step_ms: int,
                 concurrency: int) -> None:
    """Each agent started with one endless task (bench/recovery.py's launch_fleet gives a
    fixed 40-step task, too short for the scenario)."""
    async with Client(settings, plan, issuer="bench") as client:
        gate = asyncio.Semaphore(concurrency)

        async def one(agent: str) -> None:
            async with gate:
                await client.start_agent(agent, KIND)
                await client.assign_task(agent, "t1", {"steps": 1_000_000, "step_ms": step_ms})

        await asyncio.gather(*(one(a) for a in fleet))


async def ours(settings: Settings, *, agents: int, partitions: int, initial: int,
               steps: Sequence[Step], step_ms: int, steady_s: float, observe_s: float,
               session_timeout_ms: int, group_heartbeat_ms: int, concurrency: int,
               workdir: Path, leave_on_stop: bool = False) -> dict[str, Any]:
    settings = bench_settings(settings)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    env = worker_env(settings, partitions)

    def spawn(instance: str) -> ServiceProcess:
        proc = ServiceProcess(instance, [
            "runtime-manager", "--instance-id", instance, "--session-timeout-ms",
            str(session_timeout_ms), "--group-heartbeat-ms", str(group_heartbeat_ms),
            *(["--leave-group-on-stop"] if leave_on_stop else [])],
            env, workdir / f"{instance}.log")
        proc.start()
        return proc

    admin = await connect(lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap),
                          what="watching the runtime group", settings=settings)
    fleet = Fleet(spawn, admin, runtime_group(settings), settings)
    records: list[StepRecord] = []
    try:
        fleet.start([worker(i) for i in range(1, initial + 1)])
        await fleet.settle()
        names = [f"sc-{i:05d}" for i in range(agents)]
        launched = time.monotonic()
        await launch(settings, plan, names, step_ms, concurrency)
        launch_s = time.monotonic() - launched
        # Every agent has stepped a few times before the first steady window begins.
        await asyncio.sleep(steady_s + 2 * step_ms / 1000)
        for step in steps:
            records.append(await fleet.apply(step))
            await asyncio.sleep(observe_s)
        until = time.time()
        streams = await read_streams(settings, plan)
    finally:
        fleet.close()
        await admin.close()
        await delete_topics(plan, settings)
    timelines: dict[int, list[list[float]]] = {p: [] for p in range(partitions)}
    for agent in names:
        times = sorted(e.timestamp.timestamp() for e in streams.get(agent, ())
                       if e.type == STEP_EVENT)
        timelines[partition_for(agent, partitions)].append(times)
    return {"launch_s": round(launch_s, 1), "events": sum(len(s) for s in streams.values()),
            "resurrected": _count(streams, "agent.resurrected"),
            "handed_off": _count(streams, "agent.handed_off"),
            "steps": {r.step.name: step_figures(r, timelines, steady_s, until)
                      for r in records}}


def _count(streams: Mapping[str, Sequence[Event]], event_type: str) -> int:
    return sum(1 for events in streams.values() for e in events if e.type == event_type)


# -- the ceiling: a raw aiokafka group of the same members --------------------------------


def raw_member() -> None:
    """A raw group member (run as a subprocess by ``ceiling``): consumes its partitions and
    writes ``partition offset time`` per record. SIGTERM closes the consumer, which sends no
    LeaveGroup for a static member (nor does a runtime manager's graceful stop); with
    ``leave`` it then sends one by its instance id (KIP-345), the fastest a group can
    hand a stopped member's partitions over."""
    bootstrap, group, topic, instance, session_ms, heartbeat_ms, out, leave = sys.argv[1:9]
    asyncio.run(_raw_member(bootstrap, group, topic, instance, int(session_ms),
                            int(heartbeat_ms), Path(out), leave == "1"))


async def _raw_member(bootstrap: str, group: str, topic: str, instance: str, session_ms: int,
                      heartbeat_ms: int, out: Path, leave: bool) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance,
        client_id=instance, partition_assignment_strategy=(StickyPartitionAssignor,),
        session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms,
        auto_offset_reset="earliest")
    await consumer.start()
    try:
        with out.open("a") as sink:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                now = time.time()
                for tp, batch in batches.items():
                    sink.writelines(f"{tp.partition} {r.offset} {now:.4f}\n" for r in batch)
                sink.flush()
    finally:
        await consumer.stop()
    if leave:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await remove_member(admin, group, instance)
        finally:
            await admin.close()


async def ceiling(settings: Settings, *, partitions: int, initial: int, steps: Sequence[Step],
                  steady_s: float, observe_s: float, session_timeout_ms: int,
                  group_heartbeat_ms: int, leave: bool, workdir: Path) -> dict[str, Any]:
    settings = bench_settings(settings)
    topic, group = f"{settings.topic_prefix}raw", f"{settings.topic_prefix}raw-group"
    env = worker_env(settings, partitions)  # PYTHONPATH: the member imports bench.scaling
    admin = await connect(lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap),
                          what="creating the raw group's topic", settings=settings)
    await admin.create_topics([NewTopic(topic, partitions, 1)])
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, linger_ms=0)
    await producer.start()

    async def tick() -> None:
        while True:
            for p in range(partitions):
                await producer.send(topic, b"x", partition=p)
            await asyncio.sleep(RAW_TICK_S)

    def spawn(instance: str) -> ServiceProcess:
        # ServiceProcess runs `ares <args>`; the member is a plain Python process instead.
        proc = _PythonProcess(instance, [
            "-c", "from bench.scaling import raw_member; raw_member()",
            settings.kafka_bootstrap, group, topic, instance, str(session_timeout_ms),
            str(group_heartbeat_ms), str(workdir / "raw.lines"), "1" if leave else "0"],
            env, workdir / f"raw-{instance}.log")
        proc.start()
        return proc

    fleet = Fleet(spawn, admin, group, settings)
    ticker = asyncio.create_task(tick())
    records: list[StepRecord] = []
    try:
        fleet.start([worker(i) for i in range(1, initial + 1)])
        await fleet.settle()
        await asyncio.sleep(steady_s + 1.0)
        for step in steps:
            records.append(await fleet.apply(step))
            await asyncio.sleep(observe_s)
        until = time.time()
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        fleet.close()
        await producer.stop()
        with contextlib.suppress(Exception):
            await admin.delete_topics([topic])
            await admin.delete_consumer_groups([group])
        await admin.close()
    first: dict[tuple[int, int], float] = {}  # a re-read record counts once, when first read
    for line in (workdir / "raw.lines").read_text().splitlines():
        partition, offset, at = line.split()
        first.setdefault((int(partition), int(offset)), float(at))
    per_partition: dict[int, list[list[float]]] = {p: [[]] for p in range(partitions)}
    for (partition_, _), seen in first.items():
        per_partition[partition_][0].append(seen)
    for lines in per_partition.values():
        lines[0].sort()
    return {"records": len(first),
            "steps": {r.step.name: step_figures(r, per_partition, steady_s, until)
                      for r in records}}


class _PythonProcess(ServiceProcess):
    """A ``ServiceProcess`` that runs ``python <args>`` instead of ``ares run <args>``."""

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, *self.args], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)


# -- the report ---------------------------------------------------------------------------


async def run(settings: Settings, *, agents: int = 2000, partitions: int = 12, initial: int = 2,
              add: int = 2, remove: Sequence[int] | str = (3,), kill: Sequence[int] | str = (1,),
              step_ms: int = 2000, steady_s: float = 10.0, observe_s: float = 15.0,
              session_timeout_ms: int = 10_000, group_heartbeat_ms: int = 1000,
              concurrency: int = 100, raw: bool = True, raw_leave: bool = True,
              leave_on_stop: bool = False) -> Section:
    """The ``scaling`` report section (topics and groups of its own, deleted at the end)."""
    where = machine()
    removed, killed = _numbers(remove), _numbers(kill)
    steps = plan_steps(initial, add, removed, killed)
    with tempfile.TemporaryDirectory(prefix="ares-bench-scaling-") as tmp:
        workdir = Path(tmp)
        raw_run = await ceiling(
            settings, partitions=partitions, initial=initial, steps=steps,
            steady_s=min(steady_s, 5.0), observe_s=min(observe_s, 5.0),
            session_timeout_ms=session_timeout_ms, group_heartbeat_ms=group_heartbeat_ms,
            leave=raw_leave, workdir=workdir) if raw else {"steps": {}}
        our_run = await ours(settings, agents=agents, partitions=partitions, initial=initial,
                             steps=steps, step_ms=step_ms, steady_s=steady_s,
                             observe_s=observe_s, session_timeout_ms=session_timeout_ms,
                             group_heartbeat_ms=group_heartbeat_ms, concurrency=concurrency,
                             workdir=workdir, leave_on_stop=leave_on_stop)
    parts: dict[str, Section] = {}
    for step in steps:
        mine = our_run["steps"][step.name]
        theirs = raw_run["steps"].get(step.name, {"stall_p99_ms": 0.0})
        parts[step.name] = section(
            f"scaling.{step.name}", "stall_p99_ms", mine, theirs, higher_is_better=False,
            what=f"{step.name} {', '.join(step.workers)}: per agent, the longest gap between "
                 f"two {STEP_EVENT} events overlapping action -> group stable; ceiling: a raw "
                 "aiokafka group of the same members, per partition, the longest gap between "
                 "two records consumed")
    pooled_ours = max((p["ours"]["stall_p99_ms"] for p in parts.values()), default=0.0)
    pooled_raw = max((p["ceiling"]["stall_p99_ms"] for p in parts.values()), default=0.0)
    report = section(
        "scaling", "stall_p99_ms",
        {"stall_p99_ms": pooled_ours, "agents": agents, "launch_s": our_run["launch_s"],
         "events": our_run["events"], "resurrected": our_run["resurrected"],
         "handed_off": our_run["handed_off"],
         "unmoved_stalled": {n: p["ours"]["unmoved"]["stalled"] for n, p in parts.items()}},
        {"stall_p99_ms": pooled_raw, "records": raw_run.get("records", 0)},
        higher_is_better=False,
        what=f"{agents} example.pipeline agents (an LLM step every {step_ms} ms) on "
             f"{initial} runtime managers, {partitions} partitions: the worst step's p99 "
             "stall (the longest gap between an agent's step events over the rebalance) vs "
             "a raw aiokafka group's worst p99 consumption gap through the same steps")
    report["parts"] = parts
    report["config"] = {"agents": agents, "partitions": partitions, "initial": initial,
                        "add": add, "remove": removed, "kill": killed, "step_ms": step_ms,
                        "steady_s": steady_s, "observe_s": observe_s,
                        "session_timeout_ms": session_timeout_ms,
                        "group_heartbeat_ms": group_heartbeat_ms, "raw_leave": raw_leave,
                        "leave_on_stop": leave_on_stop}
    report["machine"] = where
    return report


def _numbers(value: Sequence[int] | str) -> list[int]:
    if isinstance(value, str):
        return [int(v) for v in value.split(",") if v.strip()]
    return list(value)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=2000, help="agents of the fleet")
    parser.add_argument("--partitions", type=int, default=12, help="partitions of the topics")
    parser.add_argument("--initial", type=int, default=2, help="runtime managers at first")
    parser.add_argument("--add", type=int, default=2, help="workers started in scale_out")
    parser.add_argument("--remove", default="3",
                        help="workers SIGTERMed in scale_in, by number (1-based; '' skips)")
    parser.add_argument("--kill", default="1",
                        help="workers SIGKILLed in the kill step, by number ('' skips)")
    parser.add_argument("--step-ms", type=int, default=2000,
                        help="each agent's pace: one offline LLM step this long")
    parser.add_argument("--steady-s", type=float, default=10.0,
                        help="the steady window before each step")
    parser.add_argument("--observe-s", type=float, default=15.0,
                        help="running time after each step settled")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000,
                        help="the workers' session timeout (bounds the kill step)")
    parser.add_argument("--group-heartbeat-ms", type=int, default=1000,
                        help="the workers' consumer-group heartbeat")
    parser.add_argument("--concurrency", type=int, default=100,
                        help="agent starts and assignments in flight while launching")
    parser.add_argument("--no-raw", dest="raw", action="store_false",
                        help="skip the raw aiokafka group (the ceiling)")
    parser.add_argument("--raw-static-close", dest="raw_leave", action="store_false",
                        help="raw members close without a LeaveGroup on SIGTERM (aiokafka's "
                             "default for static members)")
    parser.add_argument("--leave-on-stop", dest="leave_on_stop", action="store_true",
                        help="our workers run with --leave-group-on-stop: a scale in's "
                             "partitions move at the stop, not after the session timeout")


if __name__ == "__main__":
    cli("Scale-out and scale-in: per-agent stall through rebalances vs a raw aiokafka group",
        run, _arguments)
