"""Worker death on the real broker: two ``ares run runtime-manager`` processes share a fleet
of ``example.pipeline`` agents; one is SIGKILLed, or SIGSTOPped until its partitions moved
and then SIGCONTed (a zombie). Every task completes, the dead worker's agents are
resurrected on the survivor, every stream stays contiguous and chain-valid, no recorded
step runs again and no e-mail goes out twice (evidence ledgers outside Kafka).

Each fault is proven to hit work: the victim is alive and its agents mid-task when it is
killed or paused (a step recorded by that incarnation, the task not finished by it), and a
later incarnation on another worker finishes the task. The zombie's own writes are proven
refused: its writers report the fence, and the steps it executed after SIGCONT are in the
``read_committed`` log only as another incarnation recorded them.

Latencies (SIGKILL -> all resumed) are logged, never asserted: bench/recovery.py measures
them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from pathlib import Path

import pytest

from ares.client import Client
from ares.config import Settings
from ares.errors import FencedError
from ares.events.chain import verify_chain
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.routing import partition_for
from ares.events.kafka.store import open_writer
from ares.events.model import ANY_VERSION, Event, NewEvent
from ares.lifecycle.genealogy import genealogy
from ares.topics import EVENTS, TopicPlan
from tests.support.kafka import applied_topics, temp_topics
from tests.support.workers import (
    Worker,
    appended_by,
    audit_steps,
    busy_then_moved,
    emails_by_task,
    epoch,
    fleet_events,
    has,
    host_of,
    in_process_manager,
    partitions_lost,
    refused_steps,
    summary,
    wait_fleet,
    wait_group,
    workers,
)

log = logging.getLogger(__name__)

PARTITIONS = 6
# Bounds detection of a silent worker (static members are only removed when it expires).
SESSION_TIMEOUT_MS = 4000
WORKERS = ("w-a", "w-b")


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    """Topics of this test's own (a worker recovers every agent of its partitions)."""
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"wd-{uuid.uuid4().hex[:8]}.", request_timeout_s=30.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


async def gather_limited(coros: Iterable[Awaitable[object]], limit: int = 50) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Awaitable[object]) -> None:
        async with gate:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


async def start_fleet(settings: Settings, plan: TopicPlan, agents: Sequence[str],
                      task: Mapping[str, object]) -> None:
    async with Client(settings, plan, issuer="test-worker-death") as client:
        async def launch(agent: str) -> None:
            await client.start_agent(agent, "example.pipeline")
            await client.assign_task(agent, "t1", dict(task))

        await gather_limited(launch(a) for a in agents)


def assert_streams_intact(fleet: Mapping[str, Sequence[Event]], agents: Sequence[str]) -> None:
    """Versions 1..n without gap or duplicate, and every hash links (read_committed view)."""
    for agent in agents:
        events = list(fleet[agent])
        assert [e.version for e in events] == list(range(1, len(events) + 1)), \
            (agent, [f"{e.version}:{e.type}" for e in events])
        verify_chain(events)


def assert_work_done_once(fleet: Mapping[str, Sequence[Event]], agents: Sequence[str],
                          ledger: Path) -> int:
    """No recorded step re-executed, every e-mail sent exactly once; lost executions."""
    audit = audit_steps(fleet, ledger, agents)
    assert audit.problems == [], audit.problems[:10]
    assert audit.durable == 6 * len(agents)
    emails = emails_by_task(ledger)
    twice = {k: n for k, n in emails.items() if n != 1}
    assert twice == {}, twice
    assert {a for a, _ in emails} == set(agents)
    for agent in agents:
        assert sum(1 for e in fleet[agent] if e.type == "tool.call.completed") == 1, agent
    return audit.lost


async def test_sigkilled_worker_agents_resume_on_the_survivor(
    plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    settings, topics = plan
    ledger = tmp_path / "ledger"
    agents = [f"pipe-{i:03d}" for i in range(200)]
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS,
                 ARES_EXAMPLE_LEDGER_DIR=str(ledger)) as procs:
        await wait_group(settings, topics, members=2)
        await start_fleet(settings, topics, agents, {"steps": 6, "step_ms": 300, "email": True})
        before = await wait_fleet(settings, topics, agents, has("llm.call"), 60, "working")
        hosts = {a: host_of(before[a]) for a in agents}
        assert set(hosts.values()) == set(WORKERS)  # both host some
        victim, survivor = WORKERS
        assert procs[victim].proc.poll() is None, "the victim was alive before the kill"
        killed_at = procs[victim].kill()
        orphans = [a for a in agents if hosts[a] == victim]

        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 60,
                                 "done with their task")
        resumed = await wait_fleet(settings, topics, orphans, has("agent.resurrected"), 30,
                                   "resurrected")
        fleet = {**fleet, **{a: resumed[a] for a in orphans}}

    # The kill hit work: orphans the victim had left mid-task, finished by their second
    # incarnation on the survivor. An orphan that had finished before the kill is idle
    # (its task completed by the first incarnation), never half-done.
    busy = [a for a in orphans if busy_then_moved(fleet[a])]
    assert busy, "no orphan was mid-task at the kill: the fault hit no work"
    idle = [a for a in orphans if a not in busy]
    assert all(appended_by(fleet[a], "task.completed") == [1] for a in idle), idle
    resumed_after: list[float] = []
    for agent in agents:
        events = fleet[agent]
        lives = genealogy(events)
        if agent not in orphans:
            assert not any(e.type == "agent.dead" for e in events), agent
            assert len(lives) == 1, (agent, [i.to_json() for i in lives])
            continue
        dead = [e for e in events if e.type == "agent.dead"]
        assert [d.payload["cause"] for d in dead] == ["worker_lost"], agent
        assert epoch(dead[0].timestamp) >= killed_at
        back = [e for e in events if e.type == "agent.resurrected"]
        assert [b.payload["worker"] for b in back] == [survivor], agent
        resumed_after.append(epoch(back[0].timestamp) - killed_at)
        assert [(i.number, i.worker, i.end) for i in lives] == [
            (1, victim, "dead"), (2, survivor, None)], agent
        assert lives[0].cause_of_death == "worker_lost"
        assert lives[1].parent == 1
        record = lives[1].recovery_record
        assert record is not None
        assert record.verified is True
    assert_streams_intact(fleet, agents)
    lost = assert_work_done_once(fleet, agents, ledger)

    timing = summary(resumed_after)
    log.warning("SIGKILL -> resumed (session timeout %d ms): %d orphans (%d of them "
                "mid-task at the kill), %s; executions lost with the worker: %d",
                SESSION_TIMEOUT_MS, len(orphans), len(busy), timing, lost)
    print(f"\nSIGKILL -> all resumed: max {timing['max_s']} s, p50 {timing['p50_s']} s, "
          f"p99 {timing['p99_s']} s over {len(orphans)} agents "
          f"(session timeout {SESSION_TIMEOUT_MS} ms); {len(busy)} of them mid-task at "
          "the kill")


async def test_a_paused_worker_is_fenced_after_its_partitions_moved(
    plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    settings, topics = plan
    ledger = tmp_path / "ledger"
    agents = [f"zomb-{i:03d}" for i in range(60)]
    zombie_id, survivor = WORKERS
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS,
                 ARES_EXAMPLE_LEDGER_DIR=str(ledger)) as procs:
        zombie: Worker = procs[zombie_id]
        await wait_group(settings, topics, members=2)
        await start_fleet(settings, topics, agents,
                          {"steps": 6, "step_ms": 1200, "email": True})
        before = await wait_fleet(settings, topics, agents, has("llm.call"), 60, "working")
        captured = [a for a in agents if host_of(before[a]) == zombie_id]
        assert captured
        assert zombie.proc.poll() is None, "the zombie was alive before the pause"
        paused_at = zombie.pause()
        moved = await wait_fleet(
            settings, topics, captured,
            lambda es: any(e.type == "agent.resurrected" and e.payload["worker"] == survivor
                           for e in es), 60, "taken over by the survivor")
        takeover = {a: max(e.version for e in moved[a] if e.type == "agent.resurrected")
                    for a in captured}
        resumed_at = zombie.resume()
        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 45,
                                 "done with their task")
        await wait_group(settings, topics, members=2)  # the zombie is back as a member
        zombie_log = zombie.log_text()

    assert_streams_intact(fleet, agents)
    # The pause hit work that moved: every captured agent had recorded a step under the
    # zombie and was finished by a later incarnation (the survivor's, or a newer one the
    # zombie was given back after rejoining), never by the zombie's paused one.
    assert [a for a in captured if not busy_then_moved(fleet[a])] == []
    # The zombie's writes were refused: after SIGCONT it lost each captured partition,
    # its writer fenced by the broker or (the group telling it first) the partition's
    # agents dropped before they wrote; where it wrote, the steps it executed are in the
    # read_committed log only as another incarnation recorded them.
    lost = partitions_lost(zombie_log, resumed_at, topics.name(EVENTS))
    captured_partitions = {partition_for(a, PARTITIONS) for a in captured}
    assert captured_partitions <= set(lost), (lost, captured_partitions)
    refused = {a: refused_steps(fleet, ledger, a, incarnation=1) for a in captured}
    assert [a for a, steps in refused.items()
            if lost[partition_for(a, PARTITIONS)] == "fenced" and not steps] == [], refused
    # Nothing the zombie wrote after the takeover is visible: any later lifecycle event
    # naming it belongs to a NEWER incarnation it was given after rejoining the group.
    for agent in captured:
        events = fleet[agent]
        after = [e for e in events if e.version > takeover[agent]]
        newest = events[takeover[agent] - 1].payload["incarnation"]
        for event in after:
            if event.payload.get("worker") == zombie_id:
                assert event.type in ("agent.resurrected", "agent.started"), (agent, event)
                assert event.payload["incarnation"] > newest, (agent, event)
        stale = [e for e in after if e.type == "llm.call" and epoch(e.timestamp) < paused_at]
        assert stale == [], (agent, stale)
    uncommitted = await fleet_events(settings, topics, isolation_level="read_uncommitted")
    aborted = sum(len(v) for v in uncommitted.values()) - sum(len(v) for v in fleet.values())
    executions_lost = assert_work_done_once(fleet, agents, ledger)
    refusals = sum(len(v) for v in refused.values())
    log.warning("zombie %s: %d agents taken over, partitions lost %s (captured %s), %d "
                "executed steps refused, %d aborted records in the log, %d executions lost",
                zombie_id, len(captured), lost, sorted(captured_partitions), refusals, aborted,
                executions_lost)
    print(f"\nzombie: {len(captured)} agents taken over; partitions lost {lost} of "
          f"{sorted(captured_partitions)}; {refusals} executed steps refused "
          f"({sum(1 for v in refused.values() if v)} agents); {aborted} aborted records; "
          f"{executions_lost} executions lost")


async def test_an_idle_zombie_that_gets_its_partitions_back_serves_them(
    plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    """The zombie's agents were idle: it appended nothing after SIGCONT, so nothing told
    its writers they had been fenced. When the group gives it partitions back, it must not
    serve them from its stale state: new tasks for those agents complete."""
    settings, topics = plan
    agents = [f"idle-{i:03d}" for i in range(24)]
    zombie_id, survivor = WORKERS
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS) as procs:
        await wait_group(settings, topics, members=2)
        await start_fleet(settings, topics, agents, {"steps": 1, "step_ms": 0})
        before = await wait_fleet(settings, topics, agents, has("task.completed"), 60, "done")
        captured = [a for a in agents if host_of(before[a]) == zombie_id]
        assert captured
        assert procs[zombie_id].proc.poll() is None, "the zombie was alive before the pause"
        procs[zombie_id].pause()
        await wait_fleet(settings, topics, captured,
                         lambda es: host_of(es) == survivor, 60, "taken over by the survivor")
        procs[zombie_id].resume()
        await wait_group(settings, topics, members=2)
        async with Client(settings, topics, issuer="test-worker-death") as client:
            await gather_limited(client.assign_task(a, "t2", {"steps": 1, "step_ms": 0})
                                 for a in agents)
        fleet = await wait_fleet(settings, topics, agents, has("task.completed", 2), 60,
                                 "done with their second task")
    assert_streams_intact(fleet, agents)


async def test_a_zombie_mid_step_that_gets_its_partitions_back_finishes_the_work(
    plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    """The zombie is paused in the middle of long steps and resumed before they end: its
    agents append nothing before the group takes it back, so nothing has told its writers
    they were fenced. With no command to send (the tasks are assigned), the work must still
    finish, whoever ends up with the partitions."""
    settings, topics = plan
    agents = [f"long-{i:03d}" for i in range(24)]
    zombie_id, survivor = WORKERS
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS) as procs:
        await wait_group(settings, topics, members=2)
        await start_fleet(settings, topics, agents, {"steps": 1, "step_ms": 7000})
        before = await wait_fleet(settings, topics, agents, has("task.assigned"), 30,
                                  "working")
        captured = [a for a in agents if host_of(before[a]) == zombie_id]
        assert captured
        assert procs[zombie_id].proc.poll() is None, "the zombie was alive before the pause"
        procs[zombie_id].pause()  # its steps end ~7 s after they began
        await wait_fleet(settings, topics, captured,
                         lambda es: host_of(es) == survivor, 30, "taken over by the survivor")
        procs[zombie_id].resume()
        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 60,
                                 "done with their task")
    assert_streams_intact(fleet, agents)
    # The pause hit work that moved: each captured agent's first incarnation had the task
    # (its one long step in flight) and a later incarnation completed it.
    assert [a for a in captured if not busy_then_moved(fleet[a], begun="task.assigned")] == []


async def test_appends_queued_behind_a_fenced_transaction_fail_and_the_writer_stops(
    kafka_bootstrap: str,
) -> None:
    """The zombie's side of a takeover, in one process: appends that were queued while the
    fenced transaction was in flight fail with FencedError too (none hangs), and stopping
    the fenced writer (what a rebalance does) does not raise."""
    settings = Settings(kafka_bootstrap=kafka_bootstrap)
    topic = f"wd-fence-{uuid.uuid4().hex[:8]}"
    async with temp_topics(kafka_bootstrap, [topic]):
        scanner = await PartitionScanner.open(settings)
        zombie = await open_writer(settings, topic, 0, scanner)
        await zombie.append("s", [NewEvent("test.step", "test")], ANY_VERSION)
        owner = await open_writer(settings, topic, 0, scanner)  # fences the zombie
        try:
            first = asyncio.ensure_future(zombie.append("s", [NewEvent("test.step", "test")],
                                                        ANY_VERSION))
            await asyncio.sleep(0)  # its transaction is in flight...
            queued = asyncio.ensure_future(zombie.append("s", [NewEvent("test.step", "test")],
                                                         ANY_VERSION))  # ...this one waits
            done, hung = await asyncio.wait([first, queued], timeout=10)
            for task in hung:
                task.cancel()
            assert not hung, "an append queued behind the fenced transaction never ended"
            assert all(isinstance(t.exception(), FencedError) for t in done)
            await zombie.stop()
        finally:
            await owner.stop()
            await scanner.close()


async def test_agents_resumed_after_a_rebalance_do_not_redo_recorded_steps(
    kafka_bootstrap: str,
) -> None:
    """An eager rebalance that gives the partition back (revoke, then assign: what aiokafka
    does on every membership change) while agents are appending, fifteen times: each agent
    resumes from everything it committed, so every step is recorded once."""
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"wd-{uuid.uuid4().hex[:8]}.", request_timeout_s=30.0)
    agents = [f"reb-{i:02d}" for i in range(10)]
    async with (applied_topics(settings, partitions=1) as topics,
                in_process_manager(settings, topics) as manager):
        await start_fleet(settings, topics, agents, {"steps": 60, "step_ms": 5})
        for _ in range(15):
            await asyncio.sleep(0.1)
            await manager.owner.on_revoked({0})
            await manager.owner.on_assigned({0})
        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 60,
                                 "done with their task")
    assert_streams_intact(fleet, agents)
    for agent in agents:
        steps = [str(e.payload["name"]) for e in fleet[agent] if e.type == "llm.call"]
        assert sorted(steps) == sorted(f"step-{i}" for i in range(60)), (agent, steps)
