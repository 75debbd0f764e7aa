"""Runtime-manager worker processes, the fleet's events and the evidence ledgers, for the
worker-death and recovery tests.

Workers are real ``ares run runtime-manager`` processes, each with its own ``--instance-id``
(static membership) and its own log file, so a test can SIGKILL, SIGSTOP and SIGCONT one of
them and tell from an agent's lifecycle events (``worker`` in ``agent.started`` /
``agent.resurrected``) which one hosted it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from ares.agents.host_api import AgentServices
from ares.config import Settings
from ares.events.kafka import groups
from ares.events.model import Event
from ares.events.wire.codec import decode_event
from ares.examples import evidence
from ares.runtime_manager.service import RuntimeManager
from ares.tasks import wait_for
from ares.topics import EVENTS, TopicPlan
from tests.support.kafka import admin_client, drain_records
from tests.support.processes import ares_env

TEST_AGENTS = "tests.support.agents:REGISTRY"
HOSTING_EVENTS = ("agent.started", "agent.resurrected")


# -- worker processes ---------------------------------------------------------------------


@dataclass
class Worker:
    """One ``ares run runtime-manager`` process."""

    instance_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def kill(self) -> float:
        """SIGKILL the process (no goodbye to the group); the epoch time of the kill."""
        killed_at = time.time()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        return killed_at

    def pause(self) -> float:
        paused_at = time.time()
        os.killpg(self.proc.pid, signal.SIGSTOP)
        return paused_at

    def resume(self) -> float:
        resumed_at = time.time()
        os.killpg(self.proc.pid, signal.SIGCONT)
        return resumed_at

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_worker(env: Mapping[str, str], log_dir: Path, instance_id: str, *,
                 session_timeout_ms: int, extra_args: Sequence[str] = ()) -> Worker:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{instance_id}-{time.monotonic_ns()}.log"
    args = ["--instance-id", instance_id, "--session-timeout-ms", str(session_timeout_ms),
            "--agents", TEST_AGENTS, *extra_args]
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ares", "run", "runtime-manager", *args],
                                env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return Worker(instance_id, proc, log_path)


def stop_worker(worker: Worker) -> None:
    """At the end of a test: whatever state it is in (even stopped), it goes."""
    if worker.proc.poll() is None:
        os.killpg(worker.proc.pid, signal.SIGCONT)
        os.killpg(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait(timeout=30)


@contextmanager
def workers(settings: Settings, partitions: int, log_dir: Path, instance_ids: Sequence[str],
            *, session_timeout_ms: int, extra_args: Sequence[str] = (),
            **env: str) -> Iterator[dict[str, Worker]]:
    """Worker processes by instance id, bound to ``settings``' broker and topics; ``env``
    adds variables (e.g. ``ARES_EXAMPLE_LEDGER_DIR``). All are killed at the end."""
    environment = ares_env(settings, partitions, **env)
    with ExitStack() as stack:
        started: dict[str, Worker] = {}
        for instance_id in instance_ids:
            worker = start_worker(environment, log_dir, instance_id,
                                  session_timeout_ms=session_timeout_ms, extra_args=extra_args)
            stack.callback(stop_worker, worker)
            started[instance_id] = worker
        yield started


# -- the runtime group --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupState:
    state: str
    assignments: tuple[frozenset[int], ...]  # per member: its partitions of the topic

    def stable_with(self, members: int, partitions: int) -> bool:
        """Stable, ``members`` members, every partition assigned to exactly one of them."""
        owned = [p for a in self.assignments for p in a]
        return (self.state == "Stable" and len(self.assignments) == members
                and all(self.assignments) and sorted(owned) == list(range(partitions)))


def runtime_group(settings: Settings) -> str:
    return f"{settings.topic_prefix}ares-runtime"


async def describe_group(settings: Settings, group_id: str, topic: str) -> GroupState:
    async with admin_client(settings.kafka_bootstrap) as admin:
        response = await admin.describe_consumer_groups([group_id])
    group = response[0].to_object()["groups"][0]
    assignments = []
    for member in group["members"]:
        raw = member["member_assignment"]
        owned: frozenset[int] = frozenset()
        if raw:
            decoded = ConsumerProtocolMemberAssignment.decode(raw)
            owned = frozenset(p for t, ps in decoded.assignment if t == topic for p in ps)
        assignments.append(owned)
    return GroupState(group["state"], tuple(assignments))


async def group_view(settings: Settings) -> groups.GroupView:
    """The runtime group now, as the coordinator describes it (members by client id)."""
    async with admin_client(settings.kafka_bootstrap) as admin:
        return await groups.describe_group(admin, groups.runtime_group(settings),
                                           settings=settings)


async def wait_group(settings: Settings, plan: TopicPlan, members: int,
                     timeout_s: float = 60.0) -> GroupState:
    """Until the runtime group is stable with ``members`` members sharing every partition
    of ``ares.commands``."""
    from ares.topics import COMMANDS

    topic, partitions = plan.name(COMMANDS), plan.topic(COMMANDS).partitions
    deadline = time.monotonic() + timeout_s
    state = GroupState("unknown", ())
    while time.monotonic() < deadline:
        state = await describe_group(settings, runtime_group(settings), topic)
        if state.stable_with(members, partitions):
            return state
        await asyncio.sleep(0.25)
    raise AssertionError(f"the runtime group did not settle on {members} members in "
                         f"{timeout_s}s: {state}")


# -- the fleet's events -------------------------------------------------------------------


async def fleet_events(settings: Settings, plan: TopicPlan, *,
                       isolation_level: str = "read_committed") -> dict[str, list[Event]]:
    """Every stream of ``ares.events``, in log order (what a ``read_committed`` reader sees
    unless told otherwise)."""
    records = await drain_records(settings.kafka_bootstrap, plan.name(EVENTS),
                                  partitions=plan.topic(EVENTS).partitions,
                                  isolation_level=isolation_level)
    streams: dict[str, list[Event]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = decode_event(record.value)
        streams[event.stream_id].append(event)
    return dict(streams)


async def wait_fleet(settings: Settings, plan: TopicPlan, agents: Sequence[str],
                     done: Callable[[list[Event]], bool], timeout_s: float,
                     what: str) -> dict[str, list[Event]]:
    """Poll until ``done(events)`` holds for every agent of ``agents``."""
    deadline = time.monotonic() + timeout_s
    lagging: list[str] = list(agents)
    while time.monotonic() < deadline:
        fleet = await fleet_events(settings, plan)
        lagging = [a for a in agents if not done(fleet.get(a, []))]
        if not lagging:
            return fleet
        await asyncio.sleep(0.3)
    fleet = await fleet_events(settings, plan)
    sample = {a: [f"{e.version}:{e.type}" for e in fleet.get(a, [])][-12:]
              for a in lagging[:3]}
    raise AssertionError(f"{len(lagging)} of {len(agents)} agents not {what} after "
                         f"{timeout_s}s, e.g. {sample}")


def has(event_type: str, count: int = 1) -> Callable[[list[Event]], bool]:
    return lambda events: sum(1 for e in events if e.type == event_type) >= count


def host_of(events: Sequence[Event]) -> str | None:
    """The worker of the agent's latest incarnation, from its lifecycle events."""
    for event in reversed(events):
        if event.type in HOSTING_EVENTS:
            worker = event.payload.get("worker")
            return None if worker is None else str(worker)
    return None


def epoch(ts: datetime) -> float:
    return ts.timestamp()


# -- what ran, from the evidence ledgers --------------------------------------------------


@dataclass
class StepAudit:
    """Executions of LLM steps (ledger) against the durable ``llm.call`` events."""

    problems: list[str] = field(default_factory=list)
    executions: int = 0
    durable: int = 0
    lost: int = 0  # executions whose result never became durable (the step in flight)


def incarnations_of(events: Sequence[Event]) -> list[tuple[int, Event]]:
    """Each event with the incarnation that was running when it was appended."""
    current = 0
    out = []
    for event in events:
        if event.type in HOSTING_EVENTS:
            current = int(event.payload.get("incarnation") or current + 1)
        out.append((current, event))
    return out


def of_type(events: Sequence[Event], event_type: str) -> list[Event]:
    """The ``event_type`` events of ``events``, in log order."""
    return [e for e in events if e.type == event_type]


def appended_by(events: Sequence[Event], event_type: str) -> list[int]:
    """The incarnation that appended each ``event_type`` event, in log order."""
    return [i for i, e in incarnations_of(events) if e.type == event_type]


def busy_then_moved(events: Sequence[Event], first: int = 1, *,
                    begun: str = "llm.call") -> bool:
    """The fault hit work and the work moved: incarnation ``first`` had begun the task (it
    appended a ``begun`` event: a recorded step, or the assignment when the first step is
    the one in flight), did not complete it, and a later incarnation did. A victim that had
    finished, or not yet begun, fails."""
    completed = appended_by(events, "task.completed")
    return (first in appended_by(events, begun) and first not in completed
            and any(i > first for i in completed))


def refused_steps(fleet: Mapping[str, Sequence[Event]], ledger_dir: Path, agent: str,
                  incarnation: int) -> list[tuple[str, int]]:
    """Steps ``incarnation`` of ``agent`` executed (a ledger line, written just before the
    step's append) whose durable ``llm.call`` another incarnation appended: the zombie's
    own record of them never reached the ``read_committed`` log."""
    durable = {(str(e.payload["task_id"]), int(str(e.payload["name"]).removeprefix("step-"))): i
               for i, e in incarnations_of(fleet.get(agent, [])) if e.type == "llm.call"}
    ran = {(str(line["task_id"]), int(line["step"]))
           for line in evidence.read_lines(ledger_dir / evidence.LLM_CALLS)
           if line["agent_id"] == agent and int(line["incarnation"]) == incarnation}
    return sorted(k for k in ran if k in durable and durable[k] != incarnation)


def partitions_lost(log_text: str, since: float, events_topic: str) -> dict[int, str]:
    """What a zombie's log says of each partition it lost after ``since`` (epoch seconds):
    ``fenced`` (the broker refused its writer's transaction: a newer owner had taken over)
    or ``expelled`` (the group told it first, and it dropped the partition's agents before
    they wrote). The first word for each partition."""
    fenced = re.compile(rf"^writer of {re.escape(events_topic)}/(\d+) fenced")
    expelled = re.compile(r"^partition (\d+): expelled from the group")
    lost: dict[int, str] = {}
    for line in log_text.splitlines():
        try:
            doc = json.loads(line)
            at = datetime.fromisoformat(doc["time"]).timestamp()
        except (ValueError, KeyError, TypeError):
            continue  # not a log record (a traceback's lines, a partial last line)
        message = str(doc.get("message", ""))
        for how, pattern in (("fenced", fenced), ("expelled", expelled)):
            if at >= since and (found := pattern.match(message)):
                lost.setdefault(int(found.group(1)), how)
    return lost


def audit_steps(fleet: Mapping[str, Sequence[Event]], ledger_dir: Path,
                agents: Sequence[str]) -> StepAudit:
    """No LLM step executed again once its ``llm.call`` was durable.

    For every (agent, task, step): exactly one ``llm.call`` event, and at least one ledger
    line from the incarnation that made it durable; none from a later incarnation (a
    re-execution of a recorded step). Other lines are executions lost before their append
    committed: from an earlier incarnation (its worker died, or a zombie's step in flight),
    at most one step per agent and incarnation, since an agent runs its steps one at a time,
    each durable before the next; or from the same incarnation, redone after a rebalance
    paused the agent mid-step (a pause starts no new incarnation).
    """
    audit = StepAudit()
    lines: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for line in evidence.read_lines(ledger_dir / evidence.LLM_CALLS):
        lines[(str(line["agent_id"]), str(line["task_id"]), int(line["step"]))].append(
            int(line["incarnation"]))
    wanted = set(agents)
    audit.executions = sum(len(v) for k, v in lines.items() if k[0] in wanted)
    for agent in agents:
        durable: dict[tuple[str, int], list[int]] = defaultdict(list)
        for incarnation, event in incarnations_of(fleet.get(agent, [])):
            if event.type == "llm.call":
                step = int(str(event.payload["name"]).removeprefix("step-"))
                durable[(str(event.payload["task_id"]), step)].append(incarnation)
        lost_steps: dict[int, set[tuple[str, int]]] = defaultdict(set)
        for (task, step), incs in durable.items():
            audit.durable += 1
            if len(incs) != 1:
                audit.problems.append(f"{agent} {task} step {step}: {len(incs)} llm.call events")
                continue
            made = incs[0]
            ran = lines.get((agent, task, step), [])
            if made not in ran:
                audit.problems.append(f"{agent} {task} step {step}: recorded by incarnation "
                                      f"{made}, which has no ledger line of it")
            if later := [i for i in ran if i > made]:
                audit.problems.append(f"{agent} {task} step {step}: executed again by "
                                      f"incarnation(s) {later} after incarnation {made} "
                                      "recorded it")
            audit.lost += len(ran) - 1 if made in ran else len(ran)
            for incarnation in ran:
                if incarnation < made:
                    lost_steps[incarnation].add((task, step))
        for incarnation, steps in lost_steps.items():
            if len(steps) > 1:
                audit.problems.append(f"{agent}: incarnation {incarnation} lost {len(steps)} "
                                      f"executed steps {sorted(steps)} (at most the one in "
                                      "flight)")
        for (a, task, step), _ in lines.items():
            if a == agent and (task, step) not in durable:
                audit.problems.append(f"{agent} {task} step {step}: executed, never recorded")
    return audit


def emails_by_task(ledger_dir: Path) -> Counter[tuple[str, str]]:
    """E-mails really sent, per (agent, task)."""
    return Counter((str(line["agent_id"]), str(line["task_id"]))
                   for line in evidence.read_lines(ledger_dir / evidence.SIDE_EFFECTS))


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    return ordered[max(0, -(-int(q * 100) * len(ordered) // 100) - 1)]


def summary(samples: Sequence[float]) -> dict[str, Any]:
    return {"n": len(samples), "p50_s": round(percentile(samples, 0.50), 3),
            "p99_s": round(percentile(samples, 0.99), 3),
            "max_s": round(max(samples), 3) if samples else None}


@asynccontextmanager
async def in_process_manager(settings: Settings, topics: TopicPlan,
                             session_timeout_ms: int = 6000) -> AsyncIterator[RuntimeManager]:
    """A runtime manager in the test's own process, once it owns its partitions: for tests
    that reach into its owner (a rebalance by hand, a broken producer)."""
    manager = RuntimeManager(settings, topics, services=AgentServices(),
                             session_timeout_ms=session_timeout_ms)
    await manager.start()
    try:
        await wait_for(manager.owner.ready.wait(), 60)
        yield manager
    finally:
        await manager.stop()
