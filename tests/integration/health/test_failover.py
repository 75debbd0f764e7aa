"""Sub-second worker failover: the health checker removes a lost worker's static member
from the runtime managers' group (KIP-345 LeaveGroup by ``group.instance.id``), so its
partitions move at once instead of after the session timeout.

The session timeout here is long (30 s): within it, only the checker's removal can take
the member out of the group, so the group's membership (not a clock) shows who did it.
A worker that was only paused (SIGSTOP, then SIGCONT after its agents were taken over) is
fenced by the new owners and does not host twice. Latencies are logged, never asserted.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ares.client import Client
from ares.config import Settings
from ares.events.chain import verify_chain
from ares.events.kafka.routing import partition_for
from ares.events.model import Event
from ares.health_checker.config import HealthConfig
from ares.health_checker.service import HealthChecker, wait_ready
from ares.topics import EVENTS, TopicPlan
from tests.support.kafka import applied_topics
from tests.support.workers import (
    appended_by,
    busy_then_moved,
    epoch,
    group_view,
    has,
    host_of,
    partitions_lost,
    refused_steps,
    wait_fleet,
    wait_group,
    workers,
)

log = logging.getLogger(__name__)
PARTITIONS = 6
SESSION_TIMEOUT_MS = 30_000  # never expires during a test: only the checker removes
WORKERS = ("fo-a", "fo-b")
# The sub-second failover settings of docs/health.md: beats every 250 ms (a lost worker is
# 0.75 s of silence), group heartbeats every 250 ms (survivors hear of the rebalance).
FAST_FAILOVER = ("--heartbeat-interval", "0.25", "--group-heartbeat-ms", "250")
CONFIG = HealthConfig(resurrection_deadline_s=30.0, retry_s=2.0, remove_lost_workers=True)


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"fo-{uuid.uuid4().hex[:8]}.", request_timeout_s=20.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


@pytest.fixture
async def checker(plan: tuple[Settings, TopicPlan]) -> AsyncIterator[HealthChecker]:
    settings, topics = plan
    checker = HealthChecker(settings, topics, CONFIG, registry=CollectorRegistry())
    await checker.start()
    await wait_ready(checker)
    yield checker
    await checker.stop()


async def start_fleet(settings: Settings, plan: TopicPlan, agents: Sequence[str],
                      task: Mapping[str, object]) -> None:
    async with Client(settings, plan, issuer="test-failover") as client:
        gate = asyncio.Semaphore(50)

        async def launch(agent: str) -> None:
            async with gate:
                await client.start_agent(agent, "example.pipeline")
                await client.assign_task(agent, "t1", dict(task))

        await asyncio.gather(*(launch(a) for a in agents))


async def until_removed(checker: HealthChecker, worker: str,
                        timeout_s: float = 25.0) -> tuple[str, float]:
    """How and when the checker removed ``worker`` from the group (fails after
    ``timeout_s``, still inside the session timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = [(how, at) for w, how, at in checker.removed if w == worker]
        if done:
            return done[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"the checker did not remove {worker}: {checker.removed}")


def assert_streams_intact(fleet: Mapping[str, Sequence[Event]], agents: Sequence[str]) -> None:
    for agent in agents:
        events = list(fleet[agent])
        assert [e.version for e in events] == list(range(1, len(events) + 1)), agent
        verify_chain(events)


async def test_the_checker_removes_a_killed_worker_and_its_agents_resume(
        plan: tuple[Settings, TopicPlan], checker: HealthChecker, tmp_path: Path) -> None:
    settings, topics = plan
    agents = [f"fo-kill-{i:03d}" for i in range(60)]
    victim_id, survivor = WORKERS
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS, extra_args=FAST_FAILOVER,
                 ARES_EXAMPLE_LEDGER_DIR=str(tmp_path / "ledger")) as procs:
        await wait_group(settings, topics, members=2)
        await start_fleet(settings, topics, agents, {"steps": 12, "step_ms": 500})
        before = await wait_fleet(settings, topics, agents, has("llm.call"), 60, "working")
        orphans = [a for a in agents if host_of(before[a]) == victim_id]
        assert [a for a in orphans if not has("task.completed")(list(before[a]))], \
            "the victim hosts busy agents"
        victim = procs[victim_id]
        assert victim.proc.poll() is None  # alive until the kill
        members_before = (await group_view(settings)).client_ids
        assert {victim_id, survivor} <= members_before

        killed_at = victim.kill()
        how, removed_at = await until_removed(checker, victim_id)
        members_after = (await group_view(settings)).client_ids
        resumed = await wait_fleet(
            settings, topics, orphans,
            lambda es: any(e.type == "agent.resurrected" and e.payload["worker"] == survivor
                           for e in es) and has("task.completed")(es), 60,
            "resumed on the survivor and done")

    # The coordinator still had the static member when the checker removed it (the
    # session had not expired), and had not any more right after.
    assert how == "static"
    assert victim_id not in members_after, members_after
    assert [a for w, a, _ in checker.removed if w == victim_id] == ["static"]
    for agent in orphans:
        events = resumed[agent]
        back = [e for e in events if e.type == "agent.resurrected"]
        assert [b.payload["worker"] for b in back] == [survivor], agent
        assert back[0].payload["incarnation"] == 2, agent  # a second incarnation ran
        dead = [e for e in events if e.type == "agent.dead"]
        assert [d.payload["cause"] for d in dead] == ["worker_lost"], agent
    # The kill hit work that moved: orphans mid-task at the kill (a step recorded by
    # incarnation 1) were finished by incarnation 2; any other had finished before it.
    busy = [a for a in orphans if busy_then_moved(resumed[a])]
    assert busy, "no orphan was mid-task at the kill: the fault hit no work"
    assert all(appended_by(resumed[a], "task.completed") == [1]
               for a in orphans if a not in busy)
    assert_streams_intact(resumed, orphans)
    resumed_after = sorted(
        epoch(next(e for e in resumed[a] if e.type == "agent.resurrected").timestamp)
        - killed_at for a in orphans)
    log.warning("SIGKILL: removed by the checker %.2fs after the kill; %d agents resumed, "
                "last %.2fs after the kill (session timeout %d ms)", removed_at - killed_at,
                len(orphans), resumed_after[-1], SESSION_TIMEOUT_MS)


async def test_a_paused_worker_removed_by_the_checker_is_fenced(
        plan: tuple[Settings, TopicPlan], checker: HealthChecker, tmp_path: Path) -> None:
    settings, topics = plan
    agents = [f"fo-stop-{i:03d}" for i in range(40)]
    zombie_id, survivor = WORKERS
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS, extra_args=FAST_FAILOVER,
                 ARES_EXAMPLE_LEDGER_DIR=str(tmp_path / "ledger")) as procs:
        await wait_group(settings, topics, members=2)
        await start_fleet(settings, topics, agents, {"steps": 8, "step_ms": 600})
        before = await wait_fleet(settings, topics, agents, has("llm.call"), 60, "working")
        captured = [a for a in agents if host_of(before[a]) == zombie_id]
        assert captured
        zombie = procs[zombie_id]
        assert zombie.proc.poll() is None, "the zombie was alive before the pause"
        paused_at = zombie.pause()
        how, _ = await until_removed(checker, zombie_id)
        moved = await wait_fleet(
            settings, topics, captured,
            lambda es: any(e.type == "agent.resurrected" and e.payload["worker"] == survivor
                           for e in es), 30, "taken over by the survivor")
        takeover = {a: max(e.version for e in moved[a] if e.type == "agent.resurrected")
                    for a in captured}
        resumed_at = zombie.resume()
        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 60,
                                 "done with their task")
        await wait_group(settings, topics, members=2)  # the zombie rejoined, as a new member
        assert zombie.proc.poll() is None
        zombie_log = zombie.log_text()

    assert how == "static"
    assert_streams_intact(fleet, agents)
    # The pause hit work that moved: captured agents mid-task (a step recorded under the
    # zombie) were finished by a later incarnation; any other had finished before it.
    busy = [a for a in captured if busy_then_moved(fleet[a])]
    assert busy, "no captured agent was mid-task at the pause: the fault hit no work"
    assert all(appended_by(fleet[a], "task.completed") == [1]
               for a in captured if a not in busy)
    # The zombie's writes were refused: after SIGCONT it lost each of its busy agents'
    # partitions, its writer fenced by the broker or (the group telling it first) the
    # partition's agents dropped before they wrote; where it wrote, the steps it executed
    # are in the read_committed log only as another incarnation recorded them.
    lost = partitions_lost(zombie_log, resumed_at, topics.name(EVENTS))
    assert {partition_for(a, PARTITIONS) for a in busy} <= set(lost), lost
    refused = {a: refused_steps(fleet, tmp_path / "ledger", a, incarnation=1) for a in busy}
    assert [a for a, steps in refused.items()
            if lost[partition_for(a, PARTITIONS)] == "fenced" and not steps] == [], refused
    for agent in captured:
        events = fleet[agent]
        newest = events[takeover[agent] - 1].payload["incarnation"]
        for event in events[takeover[agent]:]:
            # The old writer appended nothing after the takeover: anything naming the
            # zombie is a newer incarnation it was given after it rejoined.
            if event.payload.get("worker") == zombie_id:
                assert event.type in ("agent.resurrected", "agent.started"), (agent, event)
                assert event.payload["incarnation"] > newest, (agent, event)
        stale = [e for e in events[takeover[agent]:]
                 if e.type == "llm.call" and epoch(e.timestamp) < paused_at]
        assert stale == [], (agent, stale)
    log.warning("paused worker %s: removed (%s), %d agents taken over; partitions lost %s, "
                "%d executed steps refused", zombie_id, how, len(captured), lost,
                sum(len(v) for v in refused.values()))
