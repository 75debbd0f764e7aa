"""The runtime manager's shutdown budgets on the real broker: within them the graceful
stop records every agent's hand-off; a snapshot phase abandoned at the end of its budget
moves the stop on and loses nothing — the next owner hosts every agent with the state the
log holds."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.config import Settings
from ares.runtime_manager.service import RuntimeManager
from ares.runtime_manager.shutdown import ShutdownBudget
from ares.tasks import wait_for
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.runtime import read_stream
from tests.support.workers import TEST_AGENTS, has, wait_fleet

PARTITIONS = 2
AGENTS = 4


@pytest.fixture(scope="module")
def sb_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"sb-{uuid.uuid4().hex[:8]}.",
                    request_timeout_s=20.0)


@pytest.fixture(scope="module")
async def plan(sb_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(sb_settings, partitions=PARTITIONS) as plan:
        yield plan


async def started(settings: Settings, plan: TopicPlan,
                  shutdown: ShutdownBudget) -> RuntimeManager:
    manager = RuntimeManager(settings, plan, agents=[TEST_AGENTS], services=AgentServices(),
                             session_timeout_ms=6000, shutdown=shutdown)
    await manager.start()
    await wait_for(manager.owner.ready.wait(), 60)
    return manager


def overruns(phase: str) -> float:
    return REGISTRY.get_sample_value("ares_shutdown_overruns_total", {"phase": phase}) or 0.0


async def counters_with_a_task_done(settings: Settings, plan: TopicPlan,
                                    tag: str) -> list[str]:
    agents = [f"{tag}-{i}-{uuid.uuid4().hex[:6]}" for i in range(AGENTS)]
    async with Client(settings, plan, issuer="test-shutdown") as client:
        for agent in agents:
            await client.start_agent(agent, "test.counter")
            await client.assign_task(agent, "t1", None)
    await wait_fleet(settings, plan, agents, has("task.completed"), 60, "done")
    return agents


async def test_within_its_budgets_the_stop_hands_every_agent_off(
        sb_settings: Settings, plan: TopicPlan) -> None:
    budget = ShutdownBudget(drain_s=5, finish_s=30, snapshot_s=20, release_s=10)
    manager = await started(sb_settings, plan, budget)
    agents = await counters_with_a_task_done(sb_settings, plan, "kept")
    before = {phase: overruns(phase) for phase in ("drain", "finish", "snapshot", "release")}
    await manager.stop()
    assert {phase: overruns(phase) for phase in before} == before
    for agent in agents:
        events = await read_stream(sb_settings, plan, agent)
        assert events[-1].type == "agent.handed_off", (agent, events[-1].type)


async def test_an_abandoned_snapshot_phase_moves_the_stop_on_and_loses_nothing(
        sb_settings: Settings, plan: TopicPlan) -> None:
    # A hand-off is a transaction on the broker: it cannot commit within a microsecond.
    manager = await started(sb_settings, plan, ShutdownBudget(snapshot_s=1e-6))
    agents = await counters_with_a_task_done(sb_settings, plan, "cut")
    before = overruns("snapshot")
    await manager.stop()
    assert overruns("snapshot") == before + 1
    # The transaction already handed to a partition writer commits or aborts whole; the
    # next owner hosts every agent with what the log holds, hand-off or not.
    successor = await started(sb_settings, plan, ShutdownBudget())
    try:
        hosted = {agent: hosted
                  for state in successor.host.partitions.values()
                  for agent, hosted in state.agents.items() if agent in agents}
        assert sorted(hosted) == sorted(agents)
        for agent, one in hosted.items():
            assert one.agent is not None, agent
            assert list(one.agent.snapshot()["seen"]) == ["t1"], agent
            events = await read_stream(sb_settings, plan, agent)
            assert [e.type for e in events].count("task.completed") == 1, agent
    finally:
        await successor.stop()
