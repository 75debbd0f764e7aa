"""A replay yields exactly the states the runtime had: every snapshot a real runtime
manager wrote (its agent's lifecycle and own state at that version) and its live state at
the end are the replayed states at those steps."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.config import Settings
from ares.events.kafka.snapshots import Snapshot
from ares.replay_reader.session import ReplaySession
from ares.replay_reader.wiring import Topics, open_reader
from ares.runtime_manager.host import HostConfig
from ares.runtime_manager.service import RuntimeManager
from ares.topics import SNAPSHOTS, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.runtime import types_of, wait_for_events


@pytest.fixture(scope="module")
async def runtime(rp_settings: Settings) -> AsyncIterator[tuple[Settings, TopicPlan,
                                                                 RuntimeManager]]:
    settings = rp_settings.with_overrides(topic_prefix=f"rt-replay-{uuid.uuid4().hex[:8]}.",
                                          request_timeout_s=20.0)
    async with applied_topics(settings, partitions=2) as plan:
        manager = RuntimeManager(settings, plan, session_timeout_ms=6000,
                                 services=AgentServices(),
                                 host_config=HostConfig(snapshot_every=3))
        await manager.start()
        try:
            yield settings, plan, manager
        finally:
            await manager.stop()


async def test_replayed_states_equal_the_runtime_s_snapshots_and_live_state(
        runtime: tuple[Settings, TopicPlan, RuntimeManager]) -> None:
    settings, plan, manager = runtime
    chat, pipe = f"chat-{uuid.uuid4().hex[:6]}", f"pipe-{uuid.uuid4().hex[:6]}"
    async with Client(settings, plan, issuer="test") as client:
        await client.start_agent(chat, "example.chat")
        for i in range(4):
            await client.assign_task(chat, f"t{i}", {"message": f"hello {i}"})
        await client.start_agent(pipe, "example.pipeline")
        await client.assign_task(pipe, "p1", {"steps": 4, "step_ms": 1, "email": False,
                                              "fail_at": 2})
    await wait_for_events(settings, plan, chat,
                          lambda es: types_of(es).count("task.completed") == 4)
    events = await wait_for_events(settings, plan, pipe,
                                   lambda es: "task.completed" in types_of(es))
    assert "agent.resurrected" in types_of(events)

    snapshots = [Snapshot.decode(r.value) for r in await drain_records(
        settings.kafka_bootstrap, plan.name(SNAPSHOTS), partitions=plan.partitions)
        if r.value is not None and r.key in (chat.encode(), pipe.encode())]
    assert {s.stream_id for s in snapshots} == {chat, pipe}
    live = {h.agent_id: h for h in manager.host.agents()}

    async with open_reader(settings, Topics.of(settings), use_index=False) as reader:
        for agent_id in (chat, pipe):
            session = await ReplaySession.open(reader, agent_id,
                                               registry=manager.host.registry)
            for snapshot in sorted((s for s in snapshots if s.stream_id == agent_id),
                                   key=lambda s: s.version):
                step = await session.to_version(snapshot.version)
                assert step is not None
                assert step.event.hash == snapshot.hash
                assert step.state.lifecycle.to_json() == snapshot.state["lifecycle"]
                assert step.state.agent == snapshot.state["agent"]
            end = await session.step_to(10**9)
            assert end is not None
            assert end.failure is None
            hosted = live[agent_id]
            assert end.state.lifecycle.to_json() == hosted.lifecycle.to_json()
            assert hosted.agent is not None
            assert end.state.agent == hosted.agent.snapshot()
