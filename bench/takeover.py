"""Waiting work across a worker's death: how late a pending durable timer wakes, and how soon a
schedule's missed tick fires, when the worker that held them is SIGKILLed.

Run alone: ``python bench/takeover.py [--agents N] [--sleep-s S] [--kill-after-s K]
[--session-timeout-ms T] [--json]``.

Two ``ares run runtime-manager`` processes (static membership, ``--session-timeout-ms``) host
``--agents`` ``test.napper`` agents (``tests/support/agents.py``: a step, a durable
``ctx.sleep`` of ``--sleep-s``, a step), and a schedule firing every 5 s (catch-up once) on
one of the partitions of the worker hosting the most sleepers (the victim). ``--kill-after-s``
after the last sleep began, a second after a tick the victim fired, the victim is SIGKILLed:
its sleepers' deadlines are still ahead, and the schedule's next tick falls due while the
survivor takes the partitions over. From the committed log:

* **timers** (headline): lateness = the ``wait.completed`` timestamp minus the deadline
  recorded in ``wait.started``, for the sleepers the survivor took over (ours) and for its
  own sleepers that never moved (the ceiling: the same timers in the same minutes without a
  failover); how many woke early (never allowed); ``due_in_takeover``: how many deadlines
  fell before the survivor resumed their agent (late by the takeover itself: none with the
  defaults, unless starting the fleet took longer than ``--sleep-s`` leaves room for). A
  takeover that restarted the clock would wake them ``--kill-after-s`` late at least.
* **catch-up**: the SIGKILL to the survivor's first tick of the schedule (``catchup``: it was
  the catch-up, a tick had fallen due with no owner), against the SIGKILL to the group
  stable without the dead member (the consumer group's own failover: the ceiling); and how
  long after its tick time that tick fired.

What tests/integration/runtime/test_durable_waits.py and test_schedules.py check as facts
(woken once, never early, by the second incarnation; missed ticks fired once), this
measures as figures. Goal (reported, never asserted): every taken-over timer within 1 s of
its deadline (the takeover ends before the deadlines), none early.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ares.client import Client
from ares.commands.model import Command
from ares.config import Settings
from ares.demo.processes import ServiceProcess
from ares.errors import SchemaError
from ares.events.kafka.routing import partition_for
from ares.events.model import Event
from ares.schedules import model as sm
from ares.topics import COMMANDS, TopicPlan, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/takeover.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    Section,
    bench_plan,
    bench_settings,
    cli,
    committed_values,
    latency_summary,
    machine,
    section,
    worker_env,
)
from bench.recovery import host_of, wait_group, wait_streams

KIND = "test.napper"
AGENTS_SPEC = "tests.support.agents:REGISTRY"
WORKERS = ("bench-to-a", "bench-to-b")
EVERY_5S = "*/5 * * * * *"
TICK_S = 5
TICK_TARGET = "tick-target"  # the schedule's agent, apart from the measured sleepers
LATENESS_GOAL_MS = 1000.0
WAIT_S = 120.0  # a hang guard for each phase
TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # a tick as the schedules print it (sm.tick_text)


async def run(settings: Settings, *, agents: int = 200, sleep_s: float = 30.0,
              kill_after_s: float = 6.0, session_timeout_ms: int = 4000,
              partitions: int = 6) -> Section:
    """The ``takeover`` report section (topics and workers of its own)."""
    where = machine()
    started = time.monotonic()
    settings = bench_settings(settings)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    env = worker_env(settings, partitions)
    with tempfile.TemporaryDirectory(prefix="ares-bench-takeover-") as workdir:
        procs = {name: ServiceProcess(name, [
            "runtime-manager", "--instance-id", name, "--session-timeout-ms",
            str(session_timeout_ms), "--agents", AGENTS_SPEC], env, Path(workdir) / f"{name}.log")
            for name in WORKERS}
        try:
            for proc in procs.values():
                proc.start()
            await wait_group(settings, plan, len(WORKERS))
            found = await _kill_under_waits(settings, plan, procs, agents=agents,
                                            sleep_s=sleep_s, kill_after_s=kill_after_s)
        finally:
            for proc in procs.values():
                proc.kill()
            await delete_topics(plan, settings)
    report = _timer_section(found)
    report["parts"] = {"catchup": _catchup_section(found)}
    report["config"] = {"agents": agents, "sleep_s": sleep_s, "kill_after_s": kill_after_s,
                        "session_timeout_ms": session_timeout_ms, "partitions": partitions}
    report["seconds"] = {"total": round(time.monotonic() - started, 1)}
    report["machine"] = where
    return report


async def _kill_under_waits(settings: Settings, plan: TopicPlan,
                            procs: Mapping[str, ServiceProcess], *, agents: int,
                            sleep_s: float, kill_after_s: float) -> dict[str, Any]:
    """Sleepers and a schedule on both workers, one worker SIGKILLed; what the log says."""
    fleet = [f"napper-{i:04d}" for i in range(agents)]
    async with Client(settings, plan, issuer="bench-takeover") as client:
        gate = asyncio.Semaphore(50)

        async def launch(agent: str) -> None:
            async with gate:
                await client.start_agent(agent, KIND)
                await client.assign_task(agent, "t1", {"seconds": sleep_s})

        await asyncio.gather(*(launch(a) for a in fleet))
        streams = await wait_streams(settings, plan, fleet, "wait.started", WAIT_S)
        hosts = {a: host_of(streams[a]) for a in fleet}
        victim = max(WORKERS, key=lambda w: sum(1 for h in hosts.values() if h == w))
        orphans = [a for a in fleet if hosts[a] == victim]
        name = _schedule_on(orphans, plan.partitions)
        await client.start_agent(TICK_TARGET, KIND)  # its tasks: a 1 s nap each
        await client.command(sm.CREATE, sm.key_of(name), agent_id=TICK_TARGET, cron=EVERY_5S,
                             input_json="{}", catchup=sm.ONCE,
                             timezone=sm.DEFAULT_TIMEZONE)
        await _ticks(settings, plan, name, lambda cs: any(_worker(c) == victim for c in cs))
        latest_start = max(_started(streams[a]).timestamp.timestamp() for a in fleet)
        kill_at = latest_start + kill_after_s
        # A second after a tick: the next one falls due while the takeover is under way.
        kill_at = (kill_at // TICK_S + 1) * TICK_S + 1.0
        await asyncio.sleep(max(0.0, kill_at - time.time()))
        killed_at = time.time()
        procs[victim].kill()
        rebalanced_at = await wait_group(settings, plan, len(WORKERS) - 1)
        commands = await _ticks(settings, plan, name, lambda cs: any(
            c.timestamp.timestamp() > killed_at for c in cs))
        streams = await wait_streams(settings, plan, fleet, "wait.completed",
                                     sleep_s + WAIT_S)
    lateness = {a: _woke(streams[a]) - float(_started(streams[a]).payload["deadline"])
                for a in fleet}
    catchup = min((c for c in commands if c.timestamp.timestamp() > killed_at),
                  key=lambda c: c.timestamp)
    # A deadline that fell before the survivor resumed its agent is late by the takeover
    # itself: counted apart (the default sleep leaves every deadline after it).
    due_in_takeover = sum(
        1 for a in orphans if float(_started(streams[a]).payload["deadline"])
        < next(e for e in streams[a] if e.type == "agent.resurrected").timestamp.timestamp())
    return {"orphans": [lateness[a] for a in orphans], "due_in_takeover": due_in_takeover,
            "kept": [lateness[a] for a in fleet if a not in orphans],
            "killed_at": killed_at, "rebalance_s": rebalanced_at - killed_at,
            "catchup": catchup}


def _schedule_on(orphans: Sequence[str], partitions: int) -> str:
    """A schedule name on one of the victim's partitions (where its orphans live): the
    victim fires the schedule until the kill."""
    owned = {partition_for(a, partitions) for a in orphans}
    for i in range(10_000):
        if partition_for(sm.key_of(name := f"takeover-{i}"), partitions) in owned:
            return name
    raise RuntimeError(f"no schedule name lands on the victim's partitions {owned}")


def _started(events: Sequence[Event]) -> Event:
    return next(e for e in events if e.type == "wait.started")


def _woke(events: Sequence[Event]) -> float:
    return next(e for e in events if e.type == "wait.completed").timestamp.timestamp()


def _worker(command: Command) -> str:
    return command.metadata[sm.META_WORKER]


async def _ticks(settings: Settings, plan: TopicPlan, name: str,
                 done: Callable[[list[Command]], bool]) -> list[Command]:
    """Poll the schedule's committed tick commands until ``done(commands)``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        commands = await _tick_commands(settings, plan, name)
        if done(commands):
            return commands
        if time.monotonic() > deadline:
            raise TimeoutError(f"schedule {name}: {len(commands)} ticks, not the one awaited")
        await asyncio.sleep(0.2)


async def _tick_commands(settings: Settings, plan: TopicPlan, name: str) -> list[Command]:
    """The schedule's committed ``task.assign`` commands."""
    found = []
    for value in await committed_values(settings, plan.name(COMMANDS),
                                        plan.topic(COMMANDS).partitions):
        try:
            command = Command.decode(value)
        except SchemaError:
            continue  # not a command (none is expected; the test topics are ours)
        if command.type == "task.assign" and command.metadata.get(sm.META_SCHEDULE) == name:
            found.append(command)
    return found


def _timer_section(found: Mapping[str, Any]) -> Section:
    orphans, kept = found["orphans"], found["kept"]
    early = sum(1 for x in orphans + kept if x < 0)
    ours = {**latency_summary(orphans or [0.0]), "early": early}
    report = section(
        "takeover", "p99_ms", ours, latency_summary(kept or [0.0]), higher_is_better=False,
        what="durable ctx.sleep taken over after its worker's SIGKILL: wait.completed "
             "timestamp - recorded deadline; ceiling: the survivor's own sleepers, unmoved")
    report["agents"] = {"moved": len(orphans), "kept": len(kept),
                        "due_in_takeover": found["due_in_takeover"]}
    report["goal"] = {"ours.max_ms": LATENESS_GOAL_MS, "early": 0,
                      "met": bool(orphans) and ours["max_ms"] <= LATENESS_GOAL_MS
                      and early == 0}
    return report


def _catchup_section(found: Mapping[str, Any]) -> Section:
    catchup: Command = found["catchup"]
    fired_at = catchup.timestamp.timestamp()
    tick = datetime.strptime(catchup.metadata[sm.META_TICK], TICK_FORMAT).replace(
        tzinfo=UTC).timestamp()
    ours = {"s_after_kill": round(fired_at - found["killed_at"], 3),
            "s_after_its_tick": round(fired_at - tick, 3),
            # a tick fell due before the takeover: the first one fired is the catch-up
            "catchup": catchup.metadata[sm.META_CATCHUP] == "true"}
    return section(
        "takeover.catchup", "s_after_kill", ours,
        {"s_after_kill": round(found["rebalance_s"], 3)}, higher_is_better=False,
        what="SIGKILL -> the survivor's first tick of a 5 s schedule (catch-up once); "
             "ceiling: SIGKILL -> the runtime group stable without the dead member")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=200, help="sleeping agents")
    parser.add_argument("--sleep-s", type=float, default=30.0,
                        help="each agent's durable sleep")
    parser.add_argument("--kill-after-s", type=float, default=6.0,
                        help="the SIGKILL, this long after the last sleep began")
    parser.add_argument("--session-timeout-ms", type=int, default=4000,
                        help="the runtime managers' group session timeout")
    parser.add_argument("--partitions", type=int, default=6)


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], run, add_arguments)
