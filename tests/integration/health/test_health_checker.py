"""The health checker against a real runtime manager on the real broker (both in this
process): hung agents are declared dead and resurrected, graceful stops give no verdict, a
death loop gives one alert with its fingerprint and ends in quarantine.

Detection latency is measured and logged, never asserted. ARES_HEALTH_TRIALS sets the
number of hung-agent trials (default 10; the benchmark figure uses 50).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.config import Settings
from ares.health_checker.config import HealthConfig
from ares.health_checker.service import HealthChecker, wait_ready
from ares.lifecycle.backoff import BackoffPolicy
from ares.runtime_manager.guard import RestartPolicy, ResurrectionGuard
from ares.runtime_manager.service import RuntimeManager
from ares.topics import TopicPlan
from tests.integration.health.agents import HANG_STARTED
from tests.integration.health.support import (
    HEALTH_AGENTS,
    SUPPORT_AGENTS,
    latency_summary,
    of,
    verdicts_for,
    wait_alerts,
)
from tests.support.kafka import applied_topics
from tests.support.processes import ares, ares_env
from tests.support.runtime import types_of, wait_for_events

log = logging.getLogger(__name__)
PARTITIONS = 2
HEARTBEAT_INTERVAL_S = 1.0
# Room for more deaths than a loop needs: the checker, not the budget, must stop it.
POLICY = RestartPolicy(max_restarts=40, period_s=600, healthy_after_s=600,
                       backoff=BackoffPolicy(initial_s=0.1, multiplier=2.0, max_s=0.3))
CONFIG = HealthConfig(resurrection_deadline_s=30.0, retry_s=2.0)


@pytest.fixture(scope="module")
def hc_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap,
                    topic_prefix=f"hc-{uuid.uuid4().hex[:8]}.", request_timeout_s=20.0)


@pytest.fixture(scope="module")
async def plan(hc_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(hc_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture(scope="module")
async def manager(hc_settings: Settings, plan: TopicPlan) -> AsyncIterator[RuntimeManager]:
    manager = RuntimeManager(hc_settings, plan, agents=[HEALTH_AGENTS, SUPPORT_AGENTS],
                             session_timeout_ms=6000, services=AgentServices(),
                             heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
                             guard=ResurrectionGuard(default=POLICY,
                                                     rand=random.Random(11).random))
    await manager.start()
    deadline = time.monotonic() + 60
    while not manager.ready:
        assert time.monotonic() < deadline, "the runtime manager did not become ready"
        await asyncio.sleep(0.1)
    yield manager
    await manager.stop()


@pytest.fixture(scope="module")
async def checker(hc_settings: Settings, plan: TopicPlan,
                  manager: RuntimeManager) -> AsyncIterator[HealthChecker]:
    checker = HealthChecker(hc_settings, plan, CONFIG, registry=CollectorRegistry())
    await checker.start()
    await wait_ready(checker)
    yield checker
    await checker.stop()


@pytest.fixture
async def client(hc_settings: Settings, plan: TopicPlan,
                 checker: HealthChecker) -> AsyncIterator[Client]:
    async with Client(hc_settings, plan, issuer="test-health") as client:
        yield client


async def test_hung_agents_are_declared_dead_and_resurrected(
        client: Client, checker: HealthChecker, hc_settings: Settings,
        plan: TopicPlan) -> None:
    trials = int(os.environ.get("ARES_HEALTH_TRIALS", "10"))
    agents = [f"hang-{n:02d}-{uuid.uuid4().hex[:6]}" for n in range(trials)]
    end_to_end: list[float] = []
    for batch in (agents[i:i + 10] for i in range(0, trials, 10)):
        for agent in batch:
            await client.start_agent(agent, "test.hang", {"step_timeout_s": 1.0})
            await client.assign_task(agent, "t1", None)
        for agent in batch:
            events = await wait_for_events(hc_settings, plan, agent,
                                           lambda es: "task.completed" in types_of(es))
            deaths = [e for e in events if e.type == "agent.dead"]
            assert [d.payload["cause"] for d in deaths] == ["stalled"], types_of(events)
            assert "agent.resurrected" in types_of(events)
            end_to_end.append(deaths[0].timestamp.timestamp() - HANG_STARTED[agent][0])
    judged = [v.decided_at - v.evidence_at for v in verdicts_for(checker, agents)]
    assert len(judged) == trials  # one verdict per hung agent, no more
    log.warning("hung agent (step timeout 1s, heartbeat %.0fs): hang -> agent.dead %s",
                HEARTBEAT_INTERVAL_S, latency_summary(end_to_end))
    log.warning("hung agent: last progress seen -> verdict %s", latency_summary(judged))


async def test_graceful_stops_give_no_verdict(client: Client, checker: HealthChecker,
                                              hc_settings: Settings, plan: TopicPlan) -> None:
    busy = [f"busy-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    hung = [f"stophang-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    idle = [f"idle-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for agent in busy:
        await client.start_agent(agent, "test.sleeper")
        await client.assign_task(agent, "t1", {"seconds": 60})
    for agent in hung:  # stopped before their step timeout would have them declared dead
        await client.start_agent(agent, "test.hang", {"step_timeout_s": 4.0})
        await client.assign_task(agent, "t1", None)
    for agent in idle:
        await client.start_agent(agent, "test.counter")
    await asyncio.sleep(2.0)
    for agent in (*hung, *busy[1:], *idle[1:]):
        await client.command("agent.stop", agent, reason="test")
    env = ares_env(hc_settings, PARTITIONS)
    for agent in (busy[0], idle[0]):  # as an operator would
        stopped = await asyncio.to_thread(ares, "agents", "stop", agent, env=env)
        assert stopped.returncode == 0, stopped.stderr
    watched = 3 * 3 * HEARTBEAT_INTERVAL_S + 4.0  # three silences and the step timeout
    await asyncio.sleep(watched)
    assert verdicts_for(checker, [*busy, *hung, *idle]) == []
    for agent in (*busy, *hung, *idle):
        events = await wait_for_events(hc_settings, plan, agent,
                                       lambda es: "agent.stopped" in types_of(es))
        assert "agent.dead" not in types_of(events), (agent, types_of(events))
    log.warning("graceful stops: no verdict for %d agents over %.0fs", 7, watched)


async def test_a_death_loop_gives_one_alert_with_its_fingerprint_and_a_quarantine(
        client: Client, checker: HealthChecker, hc_settings: Settings,
        plan: TopicPlan) -> None:
    agent = f"loop-{uuid.uuid4().hex[:6]}"
    await client.start_agent(agent, "test.crasher")
    await client.assign_task(agent, "t1", None)
    events = await wait_for_events(hc_settings, plan, agent,
                                   lambda es: "agent.quarantined" in types_of(es))
    quarantined = next(e for e in events if e.type == "agent.quarantined")
    assert quarantined.payload["reason"].startswith("death_loop: dies at the same event")
    step = next(e for e in events if e.type == "step.completed")
    deaths = [e for e in events if e.type == "agent.dead"]
    assert len(deaths) >= CONFIG.loop_deaths
    await asyncio.sleep(3.0)  # room for a duplicate to show itself
    alerts = await wait_alerts(hc_settings, plan, lambda a: bool(of(a, "death_loop", agent)))
    [alert] = of(alerts, "death_loop", agent)
    details = alert["details"]
    assert details["same_event"] == "true"
    assert details["last_event_type"] == "step.completed"
    assert details["last_version"] == str(step.version)
    assert details["error_type"] == "RuntimeError"
    assert "dies at the same event every time: step.completed" in alert["message"]
    assert alert["source"] == "health-checker"
    log.warning("death loop of %s: %d deaths recorded, alert after death %s, quarantined at v%d",
                agent, len(deaths), details["deaths"], quarantined.version)

    env = ares_env(hc_settings, PARTITIONS)
    tail = await asyncio.to_thread(ares, "alerts", "tail", "--json", "--kind", "death_loop",
                                   "--max", "50", "--timeout", "10", env=env)
    assert tail.returncode == 0, tail.stderr
    shown = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [a["id"] for a in shown if a["stream_id"] == agent] == [alert["id"]]
    assert {a["kind"] for a in shown} == {"death_loop"}
