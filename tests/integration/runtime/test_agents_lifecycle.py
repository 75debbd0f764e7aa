"""Agents hosted by a real runtime manager on the real broker: start, tasks, crash and
resurrection with state, voluntary stop, quarantine after the restart budget."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import uuid
from collections.abc import AsyncIterator

import pytest

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.config import Settings
from ares.events.wire.codec import decode
from ares.lifecycle.backoff import BackoffPolicy
from ares.runtime_manager.guard import RestartPolicy, ResurrectionGuard
from ares.runtime_manager.service import RuntimeManager
from ares.topics import ALERTS, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.runtime import types_of, wait_for_events

TEST_AGENTS = "tests.support.agents:REGISTRY"


@pytest.fixture(scope="module")
def rt_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"rt-{uuid.uuid4().hex[:8]}.",
                    request_timeout_s=20.0)


@pytest.fixture(scope="module")
async def plan(rt_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(rt_settings, partitions=2) as plan:
        yield plan


# A small budget with short, seeded backoff: the sequence of delays is read from events.
POLICY = RestartPolicy(max_restarts=3, period_s=600, healthy_after_s=600,
                       backoff=BackoffPolicy(initial_s=0.05, multiplier=2.0, max_s=0.4))


@pytest.fixture(scope="module")
async def manager(rt_settings: Settings, plan: TopicPlan) -> AsyncIterator[RuntimeManager]:
    manager = RuntimeManager(rt_settings, plan, session_timeout_ms=6000,
                             services=AgentServices(), agents=[TEST_AGENTS],
                             guard=ResurrectionGuard(default=POLICY,
                                                     rand=random.Random(7).random))
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


async def test_a_death_loop_ends_in_quarantine_after_the_budget(
    client: Client, rt_settings: Settings, plan: TopicPlan
) -> None:
    agent = f"loop-{uuid.uuid4().hex[:6]}"
    await client.start_agent(agent, "test.crasher")
    await client.assign_task(agent, "t1", None)
    events = await wait_for_events(rt_settings, plan, agent,
                                   lambda es: "agent.quarantined" in types_of(es))
    kinds = types_of(events)
    assert kinds.count("agent.dead") == POLICY.max_restarts + 1
    resurrecting = [e for e in events if e.type == "agent.resurrecting"]
    assert [e.payload["attempt"] for e in resurrecting] == [1, 2, 3]
    nominal = [int(e.metadata["ares.backoff.nominal_ms"]) for e in resurrecting]
    assert nominal == [0, 50, 100]  # first retry immediate, then doubling
    assert all(0 <= e.payload["backoff_ms"] <= cap
               for e, cap in zip(resurrecting, nominal, strict=True))  # full jitter
    # The step before the crash was recorded once and replayed by every re-run.
    assert kinds.count("step.completed") == 1
    quarantined = next(e for e in events if e.type == "agent.quarantined")
    assert quarantined.payload["reason"] == "budget_exhausted"

    alerts = [decode(r.value)[1] for r in await drain_records(
        rt_settings.kafka_bootstrap, plan.name(ALERTS),
        partitions=plan.topic(ALERTS).partitions)]
    assert any(a["stream_id"] == agent and a["kind"] == "agent_quarantined" for a in alerts)

    await client.command("agent.resume", agent, reason="fixed")
    events = await wait_for_events(rt_settings, plan, agent,
                                   lambda es: "agent.resumed" in types_of(es))
    assert types_of(events)[-2:] == ["agent.resumed", "agent.started"] or \
        "agent.started" in types_of(events)[types_of(events).index("agent.resumed"):]


async def test_stop_racing_a_crash_never_resurrects(client: Client, rt_settings: Settings,
                                                   plan: TopicPlan) -> None:
    """20 agents that crash at once, each stopped while its death is being handled."""
    agents = [f"race-{uuid.uuid4().hex[:6]}" for _ in range(20)]
    for agent in agents:
        await client.start_agent(agent, "test.crasher")
    await asyncio.gather(*(client.assign_task(agent, "t1", None) for agent in agents))
    await asyncio.gather(*(client.command("agent.stop", agent, reason="race")
                           for agent in agents))
    for agent in agents:
        events = await wait_for_events(rt_settings, plan, agent,
                                       lambda es: "agent.stopped" in types_of(es))
        await asyncio.sleep(0)  # let any straggling resurrection show itself
        events = await wait_for_events(rt_settings, plan, agent, lambda es: True)
        after_stop = types_of(events)[types_of(events).index("agent.stopped") + 1:]
        assert "agent.resurrected" not in after_stop, (agent, types_of(events))
        assert "agent.started" not in after_stop, (agent, types_of(events))


async def test_kill_and_stop_at_once_on_a_working_agent(client: Client,
                                                       rt_settings: Settings,
                                                       plan: TopicPlan) -> None:
    agents = [f"ks-{uuid.uuid4().hex[:6]}" for _ in range(10)]
    for agent in agents:
        await client.start_agent(agent, "test.sleeper")
        await client.assign_task(agent, "t1", {"seconds": 30})
    await asyncio.gather(*(x for agent in agents for x in (
        client.command("agent.kill", agent), client.command("agent.stop", agent))))
    for agent in agents:
        events = await wait_for_events(rt_settings, plan, agent,
                                       lambda es: "agent.stopped" in types_of(es))
        after_stop = types_of(events)[types_of(events).index("agent.stopped") + 1:]
        assert "agent.resurrected" not in after_stop, (agent, types_of(events))


async def test_a_chat_answers_after_a_resurrection_with_its_whole_history(
    client: Client, rt_settings: Settings, plan: TopicPlan
) -> None:
    agent = f"chat-{uuid.uuid4().hex[:6]}"
    await client.start_agent(agent, "example.chat")
    for n, text in enumerate(("Hi, I am Ada.", "I like Kafka."), start=1):
        await client.assign_task(agent, f"turn-{n}", {"message": text})
    await wait_for_events(rt_settings, plan, agent,
                          lambda es: types_of(es).count("task.completed") == 2)
    await client.command("agent.kill", agent)
    await wait_for_events(rt_settings, plan, agent,
                          lambda es: "agent.resurrected" in types_of(es))
    await client.assign_task(agent, "turn-3", {"message": "What is my name?"})
    events = await wait_for_events(rt_settings, plan, agent,
                                   lambda es: types_of(es).count("task.completed") == 3)
    outputs = [json.loads(e.payload["output_json"]) for e in events
               if e.type == "task.completed"]
    answers = [o["answer"] for o in outputs[:2]]
    history = [{"user": "Hi, I am Ada.", "assistant": answers[0]},
               {"user": "I like Kafka.", "assistant": answers[1]}]
    expected = hashlib.sha256(json.dumps(history, sort_keys=True,
                                         separators=(",", ":")).encode()).hexdigest()
    assert outputs[2]["turns"] == 3
    assert outputs[2]["history_sha256"] == expected  # both earlier turns, verbatim
    dead = next(e for e in events if e.type == "agent.dead")
    assert dead.payload["cause"] == "killed"
    # The prompt of the third answer held the whole conversation.
    third = [e for e in events if e.type == "llm.call"][2]
    assert third.payload["prompt_tokens"] > [e for e in events
                                             if e.type == "llm.call"][1].payload["prompt_tokens"]
