"""A scale in with ``--leave-group-on-stop``: the stopped worker leaves the runtime group by
its instance id, so its partitions do not wait out its session; without the flag a static
member stays in the group after a graceful stop (what lets a restart keep its partitions).

Both are checked on the group's membership right after the process exited, with a session
timeout (30 s) far longer than that takes: the flag is what removed the member, not time.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ares.client import Client
from ares.config import Settings
from ares.events.kafka.routing import partition_for
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares_env
from tests.support.workers import (
    group_view,
    has,
    host_of,
    start_worker,
    stop_worker,
    wait_fleet,
    wait_group,
)

PARTITIONS = 2
SESSION_TIMEOUT_MS = 30_000


@pytest.fixture
async def lg_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"lg-{uuid.uuid4().hex[:8]}.")


@pytest.fixture
async def plan(lg_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(lg_settings, partitions=PARTITIONS) as applied:
        yield applied


def agents_on_every_partition(per_partition: int) -> list[str]:
    """Agent ids, ``per_partition`` of them hashing to each partition."""
    found: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    while any(len(ids) < per_partition for ids in found.values()):
        agent = f"lg-agent-{uuid.uuid4().hex[:8]}"
        ids = found[partition_for(agent, PARTITIONS)]
        if len(ids) < per_partition:
            ids.append(agent)
    return [agent for ids in found.values() for agent in ids]


async def test_a_worker_told_to_leave_gives_its_partitions_up_at_its_stop(
        lg_settings: Settings, plan: TopicPlan, tmp_path: Path) -> None:
    env = ares_env(lg_settings, PARTITIONS)
    leaving = start_worker({**env, "ARES_LEAVE_GROUP_ON_STOP": "true"}, tmp_path, "lg-a",
                           session_timeout_ms=SESSION_TIMEOUT_MS)
    staying = start_worker(env, tmp_path, "lg-b", session_timeout_ms=SESSION_TIMEOUT_MS)
    try:
        await wait_group(lg_settings, plan, 2)
        agents = agents_on_every_partition(2)
        async with Client(lg_settings, plan, issuer="test-leave") as client:
            for agent in agents:
                await client.start_agent(agent, "test.counter")
                await client.assign_task(agent, "t1", None)
        fleet = await wait_fleet(lg_settings, plan, agents, has("task.completed"), 60, "done")
        # The leaving worker was alive and hosting work.
        on_leaving = [a for a in agents if host_of(fleet[a]) == "lg-a"]
        assert on_leaving, {a: host_of(fleet[a]) for a in agents}

        leaving.proc.send_signal(signal.SIGTERM)
        assert leaving.proc.wait(timeout=60) == 0, leaving.log_text()[-3000:]
        assert "left the group" in leaving.log_text()
        assert "lg-a" not in (await group_view(lg_settings)).client_ids

        # The survivor owns every partition and the moved agents work on there.
        await wait_group(lg_settings, plan, 1)
        async with Client(lg_settings, plan, issuer="test-leave") as client:
            for agent in on_leaving:
                await client.assign_task(agent, "t2", None)
        fleet = await wait_fleet(lg_settings, plan, on_leaving, has("task.completed", 2), 60,
                                 "done twice")
        assert {host_of(fleet[a]) for a in on_leaving} == {"lg-b"}

        # Without the flag, a graceful stop keeps the static member in the group.
        staying.proc.send_signal(signal.SIGTERM)
        assert staying.proc.wait(timeout=60) == 0, staying.log_text()[-3000:]
        assert "left the group" not in staying.log_text()
        assert "lg-b" in (await group_view(lg_settings)).client_ids
    finally:
        stop_worker(leaving)
        stop_worker(staying)
