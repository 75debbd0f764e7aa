"""The health checker with real processes on the real broker: runtime managers stopped by
SIGTERM (no verdict) or SIGKILL (worker_lost, then the survivor takes over), and the
checker itself (``ares run health-checker``) SIGKILLed and restarted: no verdict lost, no
alert duplicated, alerts posted to a webhook.

Latencies are measured and logged, never asserted.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.config import Settings
from ares.events.kafka.routing import partition_for
from ares.health_checker.config import HealthConfig
from ares.health_checker.service import HealthChecker, wait_ready
from ares.lifecycle.backoff import BackoffPolicy
from ares.runtime_manager.guard import RestartPolicy, ResurrectionGuard
from ares.runtime_manager.service import RuntimeManager
from ares.topics import TopicPlan
from tests.integration.health.support import (
    HEALTH_AGENTS,
    SUPPORT_AGENTS,
    Proc,
    all_alerts,
    of,
    started,
    verdicts_for,
    wait_alerts,
)
from tests.support.kafka import applied_topics
from tests.support.processes import ares_env
from tests.support.runtime import read_stream, types_of, wait_for_events

log = logging.getLogger(__name__)
PARTITIONS = 4
CONFIG = HealthConfig(resurrection_deadline_s=30.0, retry_s=2.0)
RUNTIME_ARGS = ("--agents", HEALTH_AGENTS, "--agents", SUPPORT_AGENTS,
                "--heartbeat-interval", "1", "--session-timeout-ms", "6000")


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"hp-{uuid.uuid4().hex[:8]}.", request_timeout_s=20.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


@pytest.fixture
async def checker(topics: tuple[Settings, TopicPlan]) -> AsyncIterator[HealthChecker]:
    settings, plan = topics
    checker = HealthChecker(settings, plan, CONFIG, registry=CollectorRegistry())
    await checker.start()
    await wait_ready(checker)
    yield checker
    await checker.stop()


async def launch(settings: Settings, plan: TopicPlan,
                 agents: dict[str, tuple[str, Any]], config: dict[str, Any] | None = None
                 ) -> None:
    """Start each agent of kind K with task input I (None: no task) given as {id: (K, I)}."""
    async with Client(settings, plan, issuer="test-health") as client:
        for agent, (kind, task) in agents.items():
            await client.start_agent(agent, kind, config)
            if task is not None:
                await client.assign_task(agent, "t1", task)


def spread(prefix: str, per_partition: int) -> list[str]:
    """Agent ids, ``per_partition`` on each partition (so every worker hosts some)."""
    names: list[str] = []
    counts = dict.fromkeys(range(PARTITIONS), 0)
    while min(counts.values()) < per_partition:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        p = partition_for(name, PARTITIONS)
        if counts[p] < per_partition:
            counts[p] += 1
            names.append(name)
    return names


def hosts(checker: HealthChecker, agents: list[str]) -> dict[str, str | None]:
    return {a: (v.seen_worker if (v := checker.state.agents.get(a)) else None)
            for a in agents}


async def test_rebalances_and_a_runtime_sigterm_give_no_verdict(
        topics: tuple[Settings, TopicPlan], checker: HealthChecker, tmp_path: Path) -> None:
    settings, plan = topics
    env = ares_env(settings, PARTITIONS)
    agents = {name: ("test.sleeper", {"seconds": 120}) for name in spread("sleep", 2)}
    agents.update(dict.fromkeys(spread("idle", 1), ("test.counter", None)))
    names = list(agents)
    with started("runtime-manager", env, tmp_path, *RUNTIME_ARGS) as first:
        await first.ready()
        await launch(settings, plan, agents)
        await asyncio.sleep(3.0)
        with started("runtime-manager", env, tmp_path, *RUNTIME_ARGS) as second:
            await second.ready()  # a rebalance moved part of the partitions to it
            await asyncio.sleep(6.0)
            before = hosts(checker, names)
            stopped_at = first.signal(signal.SIGTERM)
            code = await asyncio.to_thread(first.wait, 60)
            log.warning("runtime SIGTERM -> exit %d in %.1fs", code, time.time() - stopped_at)
            assert code == 0, first.log_text()[-3000:]
            await asyncio.sleep(12.0)  # four silences for a wrong verdict to show itself
            after = hosts(checker, names)
    assert len(set(before.values())) == 2  # the rebalance spread the agents
    assert len(set(after.values())) == 1  # everything runs on the survivor now
    assert verdicts_for(checker, names) == []
    alerts = await all_alerts(settings, plan)
    assert of(alerts, "worker_lost") == [], alerts
    runtime_deaths = {a: [e.payload["cause"] for e in await read_stream(settings, plan, a)
                          if e.type == "agent.dead"] for a in names}
    log.warning("deaths the runtime itself recorded for the handed-off agents: %s",
                {a: c for a, c in runtime_deaths.items() if c} or "none")


async def test_a_killed_worker_is_reported_and_its_agents_taken_over(
        topics: tuple[Settings, TopicPlan], checker: HealthChecker, tmp_path: Path) -> None:
    settings, plan = topics
    env = ares_env(settings, PARTITIONS)
    agents = dict.fromkeys(spread("w", 2), ("test.counter", None))
    names = list(agents)
    with started("runtime-manager", env, tmp_path, *RUNTIME_ARGS) as victim:
        await victim.ready()
        with started("runtime-manager", env, tmp_path, *RUNTIME_ARGS) as survivor:
            await survivor.ready()
            await launch(settings, plan, agents)
            await asyncio.sleep(4.0)
            before = hosts(checker, names)
            victim_id = worker_of(victim, before)
            doomed = sorted(a for a, h in before.items() if h == victim_id)
            assert doomed, before
            killed_at = victim.signal(signal.SIGKILL)
            alerts = await wait_alerts(settings, plan, lambda a: bool(of(a, "worker_lost")))
            [lost] = of(alerts, "worker_lost")
            assert lost["details"]["worker"] == victim_id
            assert lost["details"]["agents"].split(",") == doomed
            detected = lost["timestamp"].timestamp() - killed_at
            for agent in doomed:
                await wait_for_events(settings, plan, agent,
                                      lambda es: "agent.resurrected" in types_of(es))
            await asyncio.sleep(5.0)  # the survivor's heartbeats confirm the resurrections
    assert verdicts_for(checker, names) == []  # no verdict sent to a dead owner
    confirmed = checker.metrics.resurrections.labels("confirmed")._value.get()
    alerts = await all_alerts(settings, plan)
    assert of(alerts, "resurrection_late") == []
    assert confirmed >= len(doomed)
    log.warning("SIGKILLed worker with %d agents: worker_lost alert %.2fs after the kill "
                "(heartbeat 1s, silence 3s); %d resurrections confirmed", len(doomed),
                detected, confirmed)


def worker_of(proc: Proc, seen: dict[str, str | None]) -> str:
    """The worker id (hostname-pid) of a runtime-manager process among those seen."""
    suffix = f"-{proc.proc.pid}"
    [worker] = {w for w in seen.values() if w is not None and w.endswith(suffix)}
    return worker


# -- the checker killed and restarted -------------------------------------------------------

POLICY = RestartPolicy(max_restarts=25, period_s=600, healthy_after_s=600,
                       backoff=BackoffPolicy(initial_s=0.1, multiplier=2.0, max_s=0.3))


@pytest.fixture
async def runtime(topics: tuple[Settings, TopicPlan]) -> AsyncIterator[RuntimeManager]:
    settings, plan = topics
    manager = RuntimeManager(settings, plan, agents=[HEALTH_AGENTS, SUPPORT_AGENTS],
                             session_timeout_ms=6000, services=AgentServices(),
                             heartbeat_interval_s=1.0,
                             guard=ResurrectionGuard(default=POLICY,
                                                     rand=random.Random(5).random))
    await manager.start()
    deadline = time.monotonic() + 60
    while not manager.ready:
        assert time.monotonic() < deadline, "the runtime manager did not become ready"
        await asyncio.sleep(0.1)
    yield manager
    await manager.stop()


@pytest.fixture
async def hook() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on 127.0.0.1: its URL (with a secret path) and what it got."""
    received: list[dict[str, Any]] = []

    async def receive(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hooks/{secret}", receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/hooks/s3cr3t-{uuid.uuid4().hex}", received
    await runner.cleanup()


async def test_killing_the_checker_loses_no_verdict_and_duplicates_no_alert(
        topics: tuple[Settings, TopicPlan], runtime: RuntimeManager, tmp_path: Path,
        hook: tuple[str, list[dict[str, Any]]]) -> None:
    settings, plan = topics
    url, posted = hook
    env = ares_env(settings, PARTITIONS, ARES_HEALTH_RESURRECTION_DEADLINE_S="30",
                   ARES_ALERT_WEBHOOK_URL=url)
    hung, early, late = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("hung", "loop1", "loop2"))
    with started("health-checker", env, tmp_path) as first:
        await first.ready()
        await launch(settings, plan, {hung: ("test.hang", {})}, {"step_timeout_s": 3.0})
        await asyncio.sleep(0.5)
        first.signal(signal.SIGKILL)  # before the hung agent's step timeout
    # While no checker runs: the hung agent passes its step timeout, a loop runs its course.
    await launch(settings, plan, {early: ("test.crasher", {})})
    await wait_for_events(settings, plan, early,
                          lambda es: "agent.quarantined" in types_of(es))
    assert "agent.dead" not in types_of(await read_stream(settings, plan, hung))

    with started("health-checker", env, tmp_path) as second:
        back_at = time.time()
        await second.ready()
        ready_s = time.time() - back_at
        events = await wait_for_events(settings, plan, hung,
                                       lambda es: "agent.dead" in types_of(es))
        dead = next(e for e in events if e.type == "agent.dead")
        assert dead.payload["cause"] == "stalled"
        log.warning("restarted checker: ready (state rebuilt) in %.1fs, the pending stall "
                    "verdict delivered %.1fs after the restart", ready_s,
                    dead.timestamp.timestamp() - back_at)
        await wait_alerts(settings, plan, lambda a: bool(of(a, "death_loop", early)))
        await launch(settings, plan, {late: ("test.crasher", {})})
        events = await wait_for_events(settings, plan, late,
                                       lambda es: "agent.quarantined" in types_of(es))
        assert next(e for e in events if e.type == "agent.quarantined"
                    ).payload["reason"].startswith("death_loop")
        await wait_alerts(settings, plan, lambda a: bool(of(a, "death_loop", late)))
        metrics = await second.metrics()
        assert 'ares_health_verdicts_total{cause="stalled"} 1.0' in metrics
        assert 'ares_health_alerts_total{kind="death_loop"} 2.0' in metrics
        assert "ares_health_detection_latency_seconds_bucket" in metrics
        second.signal(signal.SIGKILL)

    with started("health-checker", env, tmp_path) as third:
        await third.ready()
        await asyncio.sleep(5.0)  # a duplicate would be out by now
        alerts = await all_alerts(settings, plan)
        assert len(of(alerts, "death_loop", early)) == 1
        assert len(of(alerts, "death_loop", late)) == 1
        assert 'ares_health_agents{state="quarantined"} 2.0' in await third.metrics()
        third.signal(signal.SIGTERM)
        assert await asyncio.to_thread(third.wait, 60) == 0, third.log_text()[-3000:]
    await wait_for_events(settings, plan, hung, lambda es: "task.completed" in types_of(es))
    loops = {a["id"] for a in of(alerts, "death_loop")}
    assert loops <= {p["id"] for p in posted}, (loops, [p["kind"] for p in posted])
    assert url.rsplit("/", 1)[1] not in second.log_text() + third.log_text()
