"""The projector killed (SIGKILL) in the middle of ~100k events, then restarted: the
projection equals a rebuild from scratch — no row applied twice, none missing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from ares.config import Settings
from ares.events.model import NewEvent
from ares.runtime_manager.alerts import alert_record
from ares.topics import ALERTS, TopicPlan
from tests.integration.replay.conftest import chat_events, env_of, write_streams
from tests.support.processes import ares, service

STREAMS = 800
TURNS = 41  # 1 + 3 * 41 = 124 events, + 4 for a death and a resurrection: 128 per stream
# 800 streams * 128 = 102,400 events
TOTAL = STREAMS * (1 + 3 * TURNS + 4)
TABLES = {  # table -> its key columns (for a readable diff)
    "stream_index": "stream_id, version", "streams": "stream_id", "agents": "agent_id",
    "lifecycle_events": "agent_id, version", "genealogy": "agent_id, seq",
    "alerts": "alert_id",
}


def stream_events(i: int) -> list[NewEvent]:
    events = chat_events(TURNS)
    module = "runtime-manager"
    events[40:40] = [
        NewEvent("agent.dead", module, {"cause": "crashed", "incarnation": 1,
                                        "error_type": "RuntimeError"}),
        NewEvent("agent.resurrecting", module, {"incarnation": 2, "parent_incarnation": 1,
                                                "attempt": 1, "backoff_ms": 25 + i}),
        NewEvent("agent.resurrected", module, {"incarnation": 2, "parent_incarnation": 1,
                                               "replayed_events": 40, "recovery_ms": 7}),
        NewEvent("task.resumed", "agent.example.chat", {
            "task_id": "t13", "reused_llm_calls": 1, "reused_prompt_tokens": 11,
            "reused_completion_tokens": 7}),
    ]
    return events


@pytest.fixture(scope="module")
async def big_log(rp_settings: Settings) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    from tests.support.kafka import applied_topics

    settings = rp_settings.with_overrides(topic_prefix=f"crash-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=3) as plan:
        started = time.monotonic()
        await write_streams(settings, plan, {f"agent-{i:04d}": stream_events(i)
                                             for i in range(STREAMS)}, batch=32)
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
        await producer.start()
        try:
            for i in range(30):
                await producer.send(plan.name(ALERTS), alert_record(
                    "death_loop", f"agent-{i:04d}", f"alert {i}", details={"n": i}),
                    key=f"agent-{i:04d}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        print(f"wrote {TOTAL} events in {time.monotonic() - started:.1f}s")
        yield settings, plan


async def projected_events(dsn: str, schema: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        exists = await conn.fetchval("SELECT to_regclass($1)", f"{schema}.streams")
        if exists is None:
            return 0
        return int(await conn.fetchval(f'SELECT coalesce(sum(events), 0) FROM "{schema}".streams'))
    finally:
        await conn.close()


async def wait_for(dsn: str, schema: str, done: object, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    count = 0
    while time.monotonic() < deadline:
        count = await projected_events(dsn, schema)
        if done(count):  # type: ignore[operator]
            return count
        await asyncio.sleep(0.05)
    raise AssertionError(f"schema {schema}: {count} events projected after {timeout_s}s")


async def differences(dsn: str, a: str, b: str) -> dict[str, list[str]]:
    conn = await asyncpg.connect(dsn)
    try:
        found: dict[str, list[str]] = {}
        for table, key in TABLES.items():
            for left, right in ((a, b), (b, a)):
                rows = await conn.fetch(
                    f'SELECT {key} FROM (SELECT * FROM "{left}".{table} EXCEPT '
                    f'SELECT * FROM "{right}".{table}) d ORDER BY {key} LIMIT 5')
                if rows:
                    shown = [tuple(r) for r in rows]
                    found.setdefault(table, []).append(f"only in {left}: {shown}")
        return found
    finally:
        await conn.close()


async def count(dsn: str, schema: str, table: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(f'SELECT count(*) FROM "{schema}".{table}'))
    finally:
        await conn.close()


@pytest.mark.timeout(900)  # 102,400 events written, then projected twice and rebuilt
async def test_a_killed_projector_resumes_exactly_where_its_last_commit_left(
        big_log: tuple[Settings, TopicPlan], schema: str, tmp_path: Path) -> None:
    settings, _ = big_log
    dsn = settings.postgres_dsn
    env = env_of(settings, schema, ARES_LOG_LEVEL="warning")
    with service("replay-reader", env, tmp_path, "--http-port", "0") as first:
        midway = await wait_for(dsn, schema, lambda n: n >= TOTAL // 5, 120)
        assert first.poll() is None, "the projector was alive before the kill"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert midway < TOTAL, "the projector finished before it could be killed mid-way"
    after_kill = await projected_events(dsn, schema)
    assert midway <= after_kill < TOTAL

    with service("replay-reader", env, tmp_path, "--http-port", "0") as second:
        await wait_for(dsn, schema, lambda n: n >= TOTAL, 180)
        status = ares("projections", "status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        deadline = time.monotonic() + 30
        while json.loads(status.stdout)["lag"] and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            status = ares("projections", "status", "--json", env=env)
        assert json.loads(status.stdout)["lag"] == 0
        os.killpg(second.pid, signal.SIGTERM)
        assert second.wait(timeout=30) == 0

    rebuilt = f"{schema}_rebuilt"
    try:
        done = ares("projections", "rebuild", "--schema", rebuilt, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert f"{TOTAL} event(s)" in done.stdout
        assert await count(dsn, schema, "stream_index") == TOTAL
        assert await count(dsn, schema, "agents") == STREAMS
        assert await count(dsn, schema, "genealogy") == 2 * STREAMS
        assert await count(dsn, schema, "alerts") == 30
        assert await differences(dsn, schema, rebuilt) == {}
    finally:
        conn = await asyncpg.connect(dsn)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{rebuilt}" CASCADE')
        await conn.close()


async def test_rebuild_refuses_while_a_projector_leads_the_schema(
        big_log: tuple[Settings, TopicPlan], schema: str, tmp_path: Path) -> None:
    settings, _ = big_log
    env = env_of(settings, schema, ARES_LOG_LEVEL="warning")
    with service("replay-reader", env, tmp_path, "--http-port", "0"):
        await wait_for(settings.postgres_dsn, schema, lambda n: n > 0, 120)
        refused = ares("projections", "rebuild", env=env)
        assert refused.returncode == 1
        assert "stop it first" in refused.stderr
