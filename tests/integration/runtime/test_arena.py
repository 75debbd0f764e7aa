"""The arena on the real broker: two ``ares run runtime-manager --arena`` processes share busy
``example.pipeline`` agents; ``worker.crash`` for one makes that process exit at once
(``os._exit``, status 70, no hand-off) and its agents are resurrected on the other (a second
incarnation runs, the task completes, no recorded step runs twice). The command is consumed
exactly once: the crashed worker restarted with the same id stays up. Without ``--arena``
the command is dead-lettered (``arena_disabled``), answered REJECTED, and the worker keeps
running.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiohttp
import pytest

from ares.arena import CRASH, crash_command
from ares.client import Client
from ares.commands.model import ReplyStatus
from ares.config import Settings
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.lifecycle.genealogy import genealogy
from ares.replay_reader.service import ReplayReaderService
from ares.runtime_manager.arena import CRASH_EXIT_CODE
from ares.topics import COMMANDS, DLQ, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares_env
from tests.support.workers import (
    audit_steps,
    has,
    host_of,
    start_worker,
    stop_worker,
    wait_fleet,
    wait_group,
    workers,
)

PARTITIONS = 4
SESSION_TIMEOUT_MS = 4000
WORKERS = ("arena-a", "arena-b")
TASK = {"steps": 6, "step_ms": 400, "email": True}


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"arena-{uuid.uuid4().hex[:8]}.", request_timeout_s=30.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


async def start_fleet(settings: Settings, plan: TopicPlan, agents: Sequence[str]) -> None:
    async with Client(settings, plan, issuer="test-arena") as client:
        for agent in agents:
            await client.start_agent(agent, "example.pipeline")
            await client.assign_task(agent, "t1", TASK)


async def wait_exit(proc_poll: object, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = proc_poll()  # type: ignore[operator]
        if code is not None:
            return int(code)
        await asyncio.sleep(0.1)
    return None


async def test_a_crashed_arena_worker_exits_and_its_agents_resurrect_on_the_other(
    plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    settings, topics = plan
    ledger = tmp_path / "ledger"
    agents = [f"arena-pipe-{i:02d}" for i in range(12)]
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS, extra_args=("--arena",),
                 ARES_EXAMPLE_LEDGER_DIR=str(ledger)) as procs:
        await wait_group(settings, topics, members=2)
        await start_fleet(settings, topics, agents)
        before = await wait_fleet(settings, topics, agents, has("llm.call"), 60, "working")
        hosts = {a: host_of(before[a]) for a in agents}
        victim, survivor = WORKERS
        orphans = [a for a in agents if hosts[a] == victim]
        assert orphans, hosts
        # The victim's partitions, as the agents it hosts show them (a dashboard reads them
        # from its heartbeats).
        owned = {partition_for(a, PARTITIONS) for a in orphans}
        command = crash_command(victim, owned, PARTITIONS, issuer="test-arena",
                                reason="arena test")
        async with Client(settings, topics, issuer="test-arena") as client:
            reply = await client.send(command)
        assert reply.status is ReplyStatus.OK, reply.message
        code = await wait_exit(procs[victim].proc.poll, 30)
        assert code == CRASH_EXIT_CODE, f"the victim did not exit: {code}"
        assert procs[survivor].proc.poll() is None
        log_text = procs[victim].log_text()
        assert "exits abruptly" in log_text

        fleet = await wait_fleet(settings, topics, orphans,
                                 lambda es: any(e.type == "agent.resurrected"
                                                and e.payload["worker"] == survivor
                                                for e in es), 60, "resurrected")
        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 90,
                                 "done with their task")

        # Committed once: the victim restarted with the same id takes its partitions back
        # and is not crashed again by a redelivery.
        again = start_worker(ares_env(settings, PARTITIONS,
                                      ARES_EXAMPLE_LEDGER_DIR=str(ledger)),
                             tmp_path / "logs", victim, session_timeout_ms=SESSION_TIMEOUT_MS,
                             extra_args=("--arena",))
        try:
            await wait_group(settings, topics, members=2)
            await asyncio.sleep(2)
            assert again.proc.poll() is None, again.log_text()[-2000:]
        finally:
            stop_worker(again)

    for agent in orphans:
        lives = genealogy(fleet[agent])
        assert [(i.number, i.worker) for i in lives][:2] == [(1, victim), (2, survivor)], agent
        assert lives[0].cause_of_death == "worker_lost", agent  # no graceful hand-off
        assert lives[1].recovery_record is not None
    audit = audit_steps(fleet, ledger, agents)
    assert audit.problems == [], audit.problems[:10]


async def test_without_the_arena_the_crash_is_refused_and_the_worker_keeps_running(
    plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    settings, topics = plan
    agents = [f"calm-pipe-{i:02d}" for i in range(4)]
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS[:1],
                 session_timeout_ms=SESSION_TIMEOUT_MS) as procs:
        await wait_group(settings, topics, members=1)
        await start_fleet(settings, topics, agents)
        await wait_fleet(settings, topics, agents, has("llm.call"), 60, "working")
        command = crash_command(WORKERS[0], range(PARTITIONS), PARTITIONS,
                                issuer="test-arena")
        async with Client(settings, topics, issuer="test-arena") as client:
            reply = await client.send(command)
        assert reply.status is ReplyStatus.REJECTED
        assert "arena is off" in reply.message
        await wait_fleet(settings, topics, agents, has("task.completed"), 60,
                         "done with their task")
        assert procs[WORKERS[0]].proc.poll() is None  # still running, after all that

    records = await drain_records(settings.kafka_bootstrap, topics.name(DLQ),
                                  partitions=topics.topic(DLQ).partitions)
    letters = [DeadLetter.from_record(r.key, r.value, r.headers) for r in records]
    refused = [d for d in letters if d.key == command.stream_id.encode()]
    assert [d.reason for d in refused] == ["arena_disabled"], letters
    assert CRASH in refused[0].detail


async def test_the_crash_route_needs_an_operator_and_the_arena(
    plan: tuple[Settings, TopicPlan], postgres_dsn: str
) -> None:
    """``POST /workers/{id}/crash`` of the replay reader: 401 without a token, 403 for a
    viewer and while the arena is off (nothing sent), 404 for a worker not in the group."""
    settings, topics = plan
    operator, viewer = f"op-{uuid.uuid4().hex}", f"view-{uuid.uuid4().hex}"
    base = settings.with_overrides(postgres_dsn=postgres_dsn,
                                   api_tokens=f"operator:{operator},viewer:{viewer}")
    for arena_on, cases in (
        (False, [({}, 401), ({"Authorization": f"Bearer {viewer}"}, 403),
                 ({"Authorization": f"Bearer {operator}"}, 403)]),
        (True, [({}, 401), ({"Authorization": f"Bearer {operator}"}, 404)]),
    ):
        service = ReplayReaderService(base.with_overrides(arena=arena_on), http_port=0,
                                      project=False, host="127.0.0.1",
                                      schema=f"arena_{uuid.uuid4().hex[:8]}")
        await service.start()
        try:
            url = f"http://127.0.0.1:{service.port}/workers/nobody/crash"
            async with aiohttp.ClientSession() as session:
                for headers, status in cases:
                    async with session.post(url, headers=headers) as response:
                        text = await response.text()
                        assert response.status == status, (arena_on, headers.keys(), text)
                        if status == 403 and headers.get("Authorization", "").endswith(
                                operator):
                            assert "arena is off" in text
        finally:
            await service.stop()
    records = await drain_records(settings.kafka_bootstrap, topics.name(COMMANDS),
                                  partitions=topics.topic(COMMANDS).partitions)
    assert records == []  # nothing was sent
