"""Agents hosted by a real runtime manager on the real broker: start, tasks, crash and
resurrection with state, voluntary stop, quarantine after the restart budget."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.config import Settings
from ares.runtime_manager.guard import ResurrectionGuard
from ares.runtime_manager.service import RuntimeManager
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.runtime import types_of, wait_for_events


@pytest.fixture(scope="module")
def rt_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"rt-{uuid.uuid4().hex[:8]}.",
                    request_timeout_s=20.0)


@pytest.fixture(scope="module")
async def plan(rt_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(rt_settings, partitions=2) as plan:
        yield plan


@pytest.fixture(scope="module")
async def manager(rt_settings: Settings, plan: TopicPlan) -> AsyncIterator[RuntimeManager]:
    manager = RuntimeManager(rt_settings, plan, session_timeout_ms=6000,
                             services=AgentServices())
    await manager.start()
    yield manager
    await manager.stop()


@pytest.fixture
async def client(rt_settings: Settings, plan: TopicPlan,
                 manager: RuntimeManager) -> AsyncIterator[Client]:
    async with Client(rt_settings, plan, issuer="test") as client:
        yield client


async def test_an_agent_runs_its_task_to_completion(client: Client, rt_settings: Settings,
                                                    plan: TopicPlan) -> None:
    agent = f"pipe-{uuid.uuid4().hex[:6]}"
    await client.start_agent(agent, "example.pipeline")
    await client.assign_task(agent, "t1", {"steps": 3, "step_ms": 1, "email": True})
    events = await wait_for_events(rt_settings, plan, agent,
                                   lambda es: "task.completed" in types_of(es))
    kinds = types_of(events)
    assert kinds[:2] == ["agent.started", "task.assigned"]
    assert kinds.count("llm.call") == 3
    assert "tool.call.intent" in kinds
    assert "tool.call.completed" in kinds


async def test_a_crashing_agent_is_resurrected_and_finishes(client: Client,
                                                           rt_settings: Settings,
                                                           plan: TopicPlan) -> None:
    agent = f"crash-{uuid.uuid4().hex[:6]}"
    await client.start_agent(agent, "example.pipeline")
    await client.assign_task(agent, "t1", {"steps": 4, "step_ms": 1, "email": False,
                                           "fail_at": 2})
    events = await wait_for_events(rt_settings, plan, agent,
                                   lambda es: "task.completed" in types_of(es))
    kinds = types_of(events)
    assert kinds.count("agent.dead") == 1
    assert kinds.count("agent.resurrected") == 1
    # Steps 0 and 1 were recorded before the crash and are not paid for again.
    assert kinds.count("llm.call") == 4
    dead = next(e for e in events if e.type == "agent.dead")
    assert dead.payload["cause"] == "exception"
    assert dead.payload["error_type"] == "InjectedCrash"


async def test_a_stopped_agent_is_never_resurrected(client: Client, rt_settings: Settings,
                                                   plan: TopicPlan) -> None:
    agent = f"stop-{uuid.uuid4().hex[:6]}"
    await client.start_agent(agent, "example.chat")
    await client.command("agent.stop", agent, reason="test")
    events = await wait_for_events(rt_settings, plan, agent,
                                   lambda es: "agent.stopped" in types_of(es))
    assert "agent.dead" not in types_of(events)
    assert "agent.resurrected" not in types_of(events)
