"""Teams: what a delegation costs per child, next to one owner command round trip.

Run alone: ``python bench/delegation.py [--leaders L] [--children N] [--max-parallel P]
[--workers W] [--quick] [--json]``.

``--workers`` real ``ares run runtime-manager`` processes (topics of their own) host this
module's two kinds (``--agents bench.delegation:REGISTRY``): ``bench.leader``, whose task is
one ``ctx.delegate_many`` of ``children`` ``bench.child`` sub-tasks (``max_parallel`` at a
time), and ``bench.child``, which returns at once (no step, no LLM: the delegation alone).
Two phases on the same workers: **paced** (the headline), ``--leaders`` leaders one at a
time, each team done before the next leader gets its task (the overhead of a delegation,
not the queueing of a saturated machine); **burst**, as many more leaders assigned their
task together. Per child, from the events the writers sealed (one timestamp per
transaction, read back after the run):

* **dispatch -> child running**: the child's ``task.assigned`` (its owner's transaction,
  with ``agent.started`` and ``task.delegated``) - the parent's ``delegation.dispatched``
  (the transaction that sends the child's start and assignment);
* **child done -> parent resumed**: the parent's ``wait.completed`` that consumed the
  child's outcome - the child's ``task.completed``; split into the child's
  ``delegation.reported`` (the transaction that sends the outcome), the parent's
  ``signal.received`` (its owner took the ``agent.signal``) and the ``wait.completed`` of
  the parent's re-run.

The ceiling is one **owner command round trip** on the same workers and broker: a client's
``task.assign`` to an idle ``bench.child`` (produce, the owner's consume, its transaction
with the reply, the reply's consume), one at a time, ``--probe-gap-ms`` apart, all through
each phase (its ceiling); and quiet, before the first leader (``quiet_round_trip``).
``one_way`` is the probe's send -> its ``task.assigned`` timestamp (the same hop as a
dispatch, from a plain client instead of a parent's transaction).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares.agents import records as r
from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.delegation import Delegation
from ares.agents.registry import AgentRegistry
from ares.client import Client
from ares.commands.model import ReplyStatus
from ares.config import Settings
from ares.demo.processes import ServiceProcess
from ares.events.model import Event
from ares.events.wire.codec import decode_event
from ares.lifecycle import events as ev
from ares.topics import TopicPlan, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/delegation.py: make ``bench`` importable
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
from bench.recovery import read_streams, wait_group
from bench.waits import EventTail
from bench.waits import Worker as TailedWorker

AGENTS_SPEC = "bench.delegation:REGISTRY"
LEADER = "bench.leader"
CHILD = "bench.child"
PROBES = 4  # idle bench.child agents the round-trip probe cycles through

# (leaders, children, max_parallel, workers, quiet probes)
FULL = (20, 8, 4, 2, 200)
QUICK = (3, 4, 2, 2, 30)


# -- the agent kinds (imported by the workers through --agents) ---------------------------


class Leader(Agent):
    """One ``ctx.delegate_many`` of ``input['children']`` trivial sub-tasks."""

    kind = LEADER

    async def handle(self, task: Task, ctx: Context) -> Any:
        spec = task.input if isinstance(task.input, Mapping) else {}
        children = int(spec.get("children", 8))
        results = await ctx.delegate_many(
            [Delegation(f"c{i}", CHILD, {"i": i}) for i in range(children)],
            max_parallel=int(spec.get("max_parallel", 4)), return_exceptions=True)
        return {"children": len(results),
                "failed": sum(1 for x in results if isinstance(x, BaseException))}


class Child(Agent):
    """Returns at once: what is measured is the delegation around it."""

    kind = CHILD

    async def handle(self, task: Task, ctx: Context) -> Any:
        spec = task.input if isinstance(task.input, Mapping) else {}
        return {"i": spec.get("i")}


REGISTRY = AgentRegistry([Leader, Child], source="bench.delegation")


# -- the workers --------------------------------------------------------------------------


@dataclass
class Team:
    settings: Settings
    plan: TopicPlan
    processes: list[ServiceProcess]
    client: Client


@contextlib.asynccontextmanager
async def team_workers(settings: Settings, *, workers: int, partitions: int,
                       workdir: Path) -> AsyncIterator[Team]:
    """``workers`` runtime managers with this module's kinds on topics of their own (as
    ``bench/recovery.py``'s kill round starts them); killed and the topics deleted after."""
    settings = bench_settings(settings).with_overrides(request_timeout_s=60.0)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    env = worker_env(settings, partitions)
    processes = [ServiceProcess(f"bench-team-{i}", [
        "runtime-manager", "--instance-id", f"bench-team-{i}", "--agents", AGENTS_SPEC],
        env, workdir / f"bench-team-{i}.log") for i in range(workers)]
    try:
        for process in processes:
            process.start()
        await wait_group(settings, plan, workers)
        async with Client(settings, plan, issuer="bench-delegation") as client:
            yield Team(settings, plan, processes, client)
    finally:
        for process in processes:
            process.kill()
        await delete_topics(plan, settings)


@dataclass
class Completions(EventTail):
    """``bench/waits.py``'s tail of the committed events, also noting every stream whose
    task completed (the leaders' end)."""

    finished: set[str] = field(default_factory=set)

    def _count(self, record: Any) -> None:
        super()._count(record)
        if any(k == "ares.type" and v == ev.TASK_COMPLETED.encode()
               for k, v in record.headers):
            self.finished.add(decode_event(record.value).stream_id)


# -- the round-trip probe -----------------------------------------------------------------


@dataclass
class Probe:
    """``task.assign`` round trips to idle children, one at a time: the latency of each
    and the epoch second it was sent (matched to its ``task.assigned`` afterwards)."""

    client: Client
    agents: Sequence[str]
    gap_s: float
    sent: dict[tuple[str, str], float] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    _n: int = 0

    async def one(self, phase: str) -> None:
        agent = self.agents[self._n % len(self.agents)]
        task_id = f"{phase}-{self._n}"
        self._n += 1
        sent_at = time.time()
        started = time.perf_counter()
        reply = await self.client.assign_task(agent, task_id, {"i": -1})
        elapsed = time.perf_counter() - started
        if reply.status is not ReplyStatus.OK:
            raise RuntimeError(f"probe {agent} {task_id}: {reply.status} {reply.message}")
        self.sent[(agent, task_id)] = sent_at
        self.samples.setdefault(phase, []).append(elapsed)
        await asyncio.sleep(self.gap_s)

    async def until(self, phase: str, done: asyncio.Event) -> None:
        while not done.is_set():
            await self.one(phase)

    def one_way(self, streams: Mapping[str, Sequence[Event]], phase: str) -> list[float]:
        """Send -> the probe's ``task.assigned`` timestamp, for ``phase``'s probes."""
        assigned = {(e.stream_id, str(e.payload.get("task_id"))): e.timestamp.timestamp()
                    for a in self.agents for e in streams.get(a, ())
                    if e.type == ev.TASK_ASSIGNED}
        return [assigned[key] - at for key, at in self.sent.items()
                if key[1].startswith(f"{phase}-") and key in assigned]


# -- the legs of each child ---------------------------------------------------------------


def _at(events: Sequence[Event], event_type: str, key: str, value: str) -> float | None:
    for event in events:
        if event.type == event_type and str(event.payload.get(key)) == value:
            return event.timestamp.timestamp()
    return None


def _resumed_between(parent: Sequence[Event], signal_id: str) -> bool:
    """Whether a ``task.resumed`` lies between the outcome's ``signal.received`` and the
    ``wait.completed`` that consumed it."""
    between = False
    for event in parent:
        if event.type == ev.SIGNAL_RECEIVED and event.payload.get("signal_id") == signal_id:
            between = True
        elif between and event.type == r.TASK_RESUMED:
            return True
        elif event.type == ev.WAIT_COMPLETED and event.payload.get("signal_id") == signal_id:
            return False
    return False


def child_legs(streams: Mapping[str, Sequence[Event]],
               leaders: Sequence[str]) -> dict[str, list[float]]:
    """Per dispatched child, in seconds: dispatch -> running, done -> resumed and its
    split (done -> reported, reported -> signal.received, signal.received -> resumed)."""
    legs: dict[str, list[float]] = {k: [] for k in (
        "dispatch", "resume", "report", "signal", "wake", "wake_parked", "wake_busy",
        "child_run")}
    for leader in leaders:
        parent = streams.get(leader, [])
        for dispatched in (e for e in parent if e.type == ev.DELEGATION_DISPATCHED):
            child_id = str(dispatched.payload["child_id"])
            task_id = str(dispatched.payload["child_task_id"])
            child = streams.get(child_id, [])
            signal_id = f"{child_id}/{task_id}"
            seen = [_at(child, ev.TASK_ASSIGNED, "task_id", task_id),
                    _at(child, ev.TASK_COMPLETED, "task_id", task_id),
                    _at(child, ev.DELEGATION_REPORTED, "task_id", task_id),
                    _at(parent, ev.SIGNAL_RECEIVED, "signal_id", signal_id),
                    _at(parent, ev.WAIT_COMPLETED, "signal_id", signal_id)]
            times = [t for t in seen if t is not None]
            if len(times) < len(seen):
                continue
            assigned, done, reported, received, resumed = times
            legs["dispatch"].append(assigned - dispatched.timestamp.timestamp())
            legs["child_run"].append(done - assigned)
            legs["resume"].append(resumed - done)
            legs["report"].append(reported - done)
            legs["signal"].append(received - reported)
            legs["wake"].append(resumed - received)
            # parked: the parent's run had ended on its wait, and a re-run (task.resumed)
            # consumed the outcome; busy: the outcome waited for the parent's run to reach
            # its next wait (it was recording another outcome or dispatching the next child)
            legs["wake_parked" if _resumed_between(parent, signal_id) else "wake_busy"].append(
                resumed - received)
    return legs


def p50_p99(samples: Sequence[float]) -> dict[str, float]:
    summary = latency_summary(samples or [0.0])
    return {"p50_ms": float(summary["p50_ms"]), "p99_ms": float(summary["p99_ms"])}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


# -- the run ------------------------------------------------------------------------------


def _finished(tail: Completions, names: Sequence[str]) -> int:
    return len(tail.finished.intersection(names))


async def team_phase(team: Team, tail: Completions, probe: Probe, phase: str, *,
                     leaders: int, children: int, max_parallel: int, paced: bool,
                     timeout_s: float) -> tuple[list[str], float]:
    """``leaders`` leaders each delegating ``children``: one at a time (``paced``: each
    team done before the next starts) or all assigned together; the probe's round trips
    run alongside. The leaders and the seconds it took."""
    client = team.client
    names = [f"{phase}-leader-{i:03d}" for i in range(leaders)]
    await asyncio.gather(*(client.start_agent(n, LEADER) for n in names))
    task = {"children": children, "max_parallel": max_parallel}
    done = asyncio.Event()
    probing = asyncio.create_task(probe.until(phase, done))
    started = time.monotonic()
    try:
        for batch in ([[n] for n in names] if paced else [names]):
            await asyncio.gather(*(client.assign_task(n, "t1", task) for n in batch))
            await tail.until(functools.partial(_finished, tail, batch), len(batch),
                             timeout_s, "completed their team's task")
    finally:
        done.set()
        await probing
    return names, time.monotonic() - started


async def measure(settings: Settings, *, leaders: int, children: int, max_parallel: int,
                  workers: int, partitions: int, quiet_probes: int, gap_s: float,
                  timeout_s: float, workdir: Path) -> dict[str, Any]:
    async with team_workers(settings, workers=workers, partitions=partitions,
                            workdir=workdir) as team:
        client = team.client
        tail_worker = TailedWorker(team.settings, team.plan, team.processes[0], client)
        tail = Completions(tail_worker)
        async with tail:
            probes = [f"probe-{i}" for i in range(PROBES)]
            for agent in probes:
                await client.start_agent(agent, CHILD)
            probe = Probe(client, probes, gap_s)
            for _ in range(PROBES * 2):  # first-use costs of every probe's partition
                await probe.one("warmup")
            for _ in range(quiet_probes):
                await probe.one("quiet")
            phases: dict[str, tuple[list[str], float]] = {}
            for phase, paced in (("paced", True), ("burst", False)):
                phases[phase] = await team_phase(
                    team, tail, probe, phase, leaders=leaders, children=children,
                    max_parallel=max_parallel, paced=paced, timeout_s=timeout_s)
            types = dict(tail.types)
        streams = await read_streams(team.settings, team.plan)
    return {"phases": {phase: {
                "legs": child_legs(streams, names), "seconds": seconds,
                "round_trip": probe.samples.get(phase, []),
                "one_way": probe.one_way(streams, phase),
                "dispatched": sum(1 for n in names for e in streams.get(n, ())
                                  if e.type == ev.DELEGATION_DISPATCHED)}
                for phase, (names, seconds) in phases.items()},
            "quiet": {"round_trip": probe.samples.get("quiet", []),
                      "one_way": probe.one_way(streams, "quiet")},
            "events": types}


def phase_section(name: str, found: Mapping[str, Any], quiet_p50_ms: float,
                  shape: str) -> Section:
    """dispatch -> running (with ``resume`` as a part) against the round trips measured
    during the same phase."""
    legs = found["legs"]
    rt = latency_summary(found["round_trip"] or [0.0])
    dispatch = latency_summary(legs["dispatch"] or [0.0])
    resume = latency_summary(legs["resume"] or [0.0])
    split: dict[str, Any] = {leg: p50_p99(legs[leg]) for leg in ("report", "signal", "wake")}
    for leg in ("wake_parked", "wake_busy"):
        split[leg] = {**p50_p99(legs[leg]), "children": len(legs[leg])}
    report = section(
        name, "p50_ms", {**dispatch, "children": len(legs["dispatch"])}, rt,
        higher_is_better=False,
        what=f"{shape}: dispatch -> child running (parent's delegation.dispatched -> the "
             "child's task.assigned, sealed timestamps); ceiling: one task.assign round "
             "trip to an idle agent (client send -> owner's reply), same workers, during "
             "this phase")
    resume_part = section(
        f"{name}.resume", "p50_ms",
        {**resume, "children": len(legs["resume"]), "split": split}, rt,
        higher_is_better=False,
        what="child done -> parent resumed (child's task.completed -> the parent's "
             "wait.completed consuming its outcome; split: -> delegation.reported, -> "
             "signal.received, -> wait.completed, the last for a parked parent (a re-run) "
             "and a busy one); ceiling: the same round trips")
    report["parts"] = {"resume": resume_part}
    report["ratios"] = {
        "dispatch_p50_over_round_trip_p50": report["ratio"],
        "resume_p50_over_round_trip_p50": resume_part["ratio"],
        "dispatch_p99_over_round_trip_p99": _ratio(float(dispatch["p99_ms"]),
                                                   float(rt["p99_ms"])),
        "resume_p99_over_round_trip_p99": _ratio(float(resume["p99_ms"]),
                                                 float(rt["p99_ms"])),
        "dispatch_p50_over_quiet_round_trip_p50": _ratio(float(dispatch["p50_ms"]),
                                                         quiet_p50_ms),
        "resume_p50_over_quiet_round_trip_p50": _ratio(float(resume["p50_ms"]),
                                                       quiet_p50_ms),
    }
    report["one_way"] = p50_p99(found["one_way"])
    report["child_run"] = p50_p99(legs["child_run"])
    report["dispatched"] = found["dispatched"]
    report["seconds"] = round(found["seconds"], 2)
    return report


def report_of(found: Mapping[str, Any], config: Mapping[str, Any]) -> Section:
    quiet = latency_summary(found["quiet"]["round_trip"] or [0.0])
    quiet_p50 = float(quiet["p50_ms"])
    team = (f"{config['leaders']} leaders x {config['children']} children, max_parallel "
            f"{config['max_parallel']}, {config['workers']} workers")
    phases = found["phases"]
    report = phase_section("delegation", phases["paced"], quiet_p50,
                           f"{team}, one leader at a time")
    burst = phase_section("delegation.burst", phases["burst"], quiet_p50,
                          f"{team}, all leaders at once")
    report["parts"]["burst"] = burst
    report["quiet_round_trip"] = {**quiet, "one_way": p50_p99(found["quiet"]["one_way"])}
    report["events"] = found["events"]
    return report


async def run(settings: Settings, *, quick: bool = False, leaders: int | None = None,
              children: int | None = None, max_parallel: int | None = None,
              workers: int | None = None, quiet_probes: int | None = None,
              partitions: int = 12, probe_gap_ms: float = 50.0,
              timeout_s: float = 120.0) -> Section:
    """The ``delegation`` report section (workers and topics of its own)."""
    sizes = QUICK if quick else FULL
    leaders = leaders or sizes[0]
    children = children or sizes[1]
    max_parallel = max_parallel or sizes[2]
    workers = workers or sizes[3]
    quiet_probes = quiet_probes if quiet_probes is not None else sizes[4]
    config = {"leaders": leaders, "children": children, "max_parallel": max_parallel,
              "workers": workers, "quiet_probes": quiet_probes, "partitions": partitions,
              "probe_gap_ms": probe_gap_ms, "probes": PROBES}
    where = machine()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ares-bench-delegation-") as workdir:
        found = await measure(settings, leaders=leaders, children=children,
                              max_parallel=max_parallel, workers=workers,
                              partitions=partitions, quiet_probes=quiet_probes,
                              gap_s=probe_gap_ms / 1000, timeout_s=timeout_s,
                              workdir=Path(workdir))
    report = report_of(found, config)
    report["config"] = config
    report["total_s"] = round(time.monotonic() - started, 1)
    report["machine"] = where
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help=f"the smoke sizes: {QUICK[0]} leaders x {QUICK[1]} children")
    parser.add_argument("--leaders", type=int, help=f"leaders (default {FULL[0]})")
    parser.add_argument("--children", type=int, help=f"children per leader (default {FULL[1]})")
    parser.add_argument("--max-parallel", type=int,
                        help=f"children running at once per leader (default {FULL[2]})")
    parser.add_argument("--workers", type=int,
                        help=f"runtime-manager processes (default {FULL[3]})")
    parser.add_argument("--quiet-probes", type=int,
                        help=f"round trips before the leaders start (default {FULL[4]})")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--probe-gap-ms", type=float, default=50.0,
                        help="pause between two round trips of the probe")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="how long the leaders may take")


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], run, add_arguments)
