"""Fixtures of the replay reader's integration tests: topics, a schema each, writers."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import asyncpg
import pytest

from ares.config import Settings
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.replay_reader.service import ReplayReaderService
from ares.topics import EVENTS, TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares_env
from tests.support.workers import wait_group, workers

PARTITIONS = 3


@pytest.fixture(scope="module")
def rp_settings(kafka_bootstrap: str, postgres_dsn: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, postgres_dsn=postgres_dsn,
                    topic_prefix=f"rp-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def plan(rp_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(rp_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture
async def schema(postgres_dsn: str) -> AsyncIterator[str]:
    """A projections schema of this test's own, dropped afterwards."""
    name = f"rp_{uuid.uuid4().hex[:10]}"
    yield name
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


@asynccontextmanager
async def one_owner(settings: Settings, plan: TopicPlan, tmp_path_factory: pytest.TempPathFactory,
                    worker: str, name: str) -> AsyncIterator[Path]:
    """One real runtime manager (``worker``) owning every partition, settled in its group;
    its evidence ledger directory (``<name>-ledger``; its log under ``<name>-logs``)."""
    directory = tmp_path_factory.mktemp(f"{name}-ledger")
    with workers(settings, PARTITIONS, tmp_path_factory.mktemp(f"{name}-logs"), (worker,),
                 session_timeout_ms=6000, ARES_EXAMPLE_LEDGER_DIR=str(directory)):
        await wait_group(settings, plan, members=1)
        yield directory


async def serving(settings: Settings, schema_prefix: str) -> ReplayReaderService:
    """An in-process replay reader on a free port of 127.0.0.1, not projecting, with a
    projections schema of its own (``<schema_prefix><random>``)."""
    service = ReplayReaderService(settings, http_port=0, project=False, host="127.0.0.1",
                                  schema=f"{schema_prefix}{uuid.uuid4().hex[:8]}")
    await service.start()
    return service


def env_of(settings: Settings, schema: str, **extra: str) -> dict[str, str]:
    return ares_env(settings, PARTITIONS, ARES_POSTGRES_DSN=settings.postgres_dsn,
                    ARES_PROJECTIONS_SCHEMA=schema, **extra)


def chat_events(turns: int, at: Sequence[datetime] | None = None) -> list[NewEvent]:
    """An example.chat agent's stream: started, then per turn assigned/llm.call/completed."""
    stamps = iter(at) if at is not None else None

    def ts() -> datetime | None:
        return next(stamps) if stamps is not None else None

    events = [NewEvent("agent.started", "runtime-manager", {
        "kind": "example.chat", "config_json": "{}", "incarnation": 1, "worker": "w-1"},
        timestamp=ts())]
    for i in range(turns):
        events.append(NewEvent("task.assigned", "runtime-manager", {
            "task_id": f"t{i}", "input_json": json.dumps({"message": f"question {i}"})},
            timestamp=ts()))
        events.append(NewEvent("llm.call", "agent.example.chat", {
            "task_id": f"t{i}", "name": "answer", "occurrence": 0, "model": "offline",
            "prompt_hash": "h", "output": "{}", "prompt_tokens": 11,
            "completion_tokens": 7}, timestamp=ts()))
        events.append(NewEvent("task.completed", "agent.example.chat", {
            "task_id": f"t{i}", "output_json": json.dumps({"answer": f"answer {i}"})},
            timestamp=ts()))
    return events


async def write_streams(settings: Settings, plan: TopicPlan,
                        streams: dict[str, list[NewEvent]], *, batch: int = 1) -> None:
    """Append every stream concurrently (group commit), ``batch`` events per append."""
    store = await KafkaEventStore.open(settings, topic=plan.name(EVENTS))
    try:
        async def one(stream_id: str, events: list[NewEvent]) -> None:
            for i in range(0, len(events), batch):
                await store.append(stream_id, events[i:i + batch])

        await asyncio.gather(*(one(s, e) for s, e in streams.items()))
    finally:
        await store.close()
