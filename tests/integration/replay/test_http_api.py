"""The HTTP API of `ares run replay-reader`: schemathesis against its own /openapi.json,
the documents themselves, SSE in order, and reads while PostgreSQL is down."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from ares.config import Settings
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.replay_reader.service import ReplayReaderService
from ares.tasks import wait_for
from ares.topics import EVENTS, TopicPlan
from tests.integration.replay.conftest import chat_events, write_streams
from tests.integration.replay.test_replay_cli import DOWN_DSN


@pytest.fixture(scope="module")
async def api(rp_settings: Settings, plan: TopicPlan) -> AsyncIterator[str]:
    """A replay reader over a few agents, caught up; its base URL."""
    schema = f"rp_api_{uuid.uuid4().hex[:8]}"
    streams = {"api-a": chat_events(4), "api-b": chat_events(1)}
    streams["api-a"][5:5] = [
        NewEvent("agent.dead", "runtime-manager", {"cause": "crashed", "incarnation": 1}),
        NewEvent("agent.resurrected", "runtime-manager", {
            "incarnation": 2, "parent_incarnation": 1, "replayed_events": 5,
            "recovery_ms": 3})]
    await write_streams(rp_settings, plan, streams)
    service = ReplayReaderService(rp_settings, http_port=0, schema=schema, host="127.0.0.1")
    await service.start()
    assert service.projector is not None
    await wait_for(service.projector.caught_up.wait(), 60)
    yield f"http://127.0.0.1:{service.port}"
    await service.stop()
    conn = await asyncpg.connect(rp_settings.postgres_dsn)
    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await conn.close()


async def get(url: str) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        body = await response.text()
        return response.status, dict(response.headers), json.loads(body) if body else None


async def schemathesis(base: str, tmp_path: Path, *extra: str,
                       config: str = "") -> tuple[int, str]:
    (tmp_path / "schemathesis.toml").write_text(config)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schemathesis.cli", "run", f"{base}/openapi.json",
        "--checks", "all", "--max-examples", "15", "--exclude-path", "/events/stream",
        "--exclude-path", "/agents/{agent_id}/tokens",  # endless too (test_token_streams)
        "--generation-database", "none", "--workers", "1", "--seed", "7", "--no-color",
        "--request-timeout", "20", *extra,
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await wait_for(proc.communicate(), 280)
    return proc.returncode or 0, out.decode()


@pytest.mark.timeout(600)
async def test_schemathesis_finds_nothing_against_the_openapi_document(
        api: str, tmp_path: Path) -> None:
    code, out = await schemathesis(api, tmp_path)
    assert code == 0, out[-6000:]


@pytest.mark.timeout(600)
async def test_schemathesis_on_real_agents_and_streams(api: str, tmp_path: Path) -> None:
    """Path ids pinned to an agent that exists, so every operation reaches its 200."""
    code, out = await schemathesis(
        api, tmp_path, config='[parameters]\n"path.agent_id" = "api-a"\n'
                              '"path.stream_id" = "api-a"\n')
    assert code == 0, out[-6000:]
    assert "Missing test data" not in out


async def test_the_documents(api: str) -> None:
    status, headers, agent = await get(f"{api}/agents/api-a")
    assert status == 200
    assert headers["X-Ares-Source"] == "projection"
    assert (agent["status"], agent["incarnation"], agent["deaths"]) == ("running", 2, 1)
    assert agent["tokens"]["spent"] == 4 * 18
    assert agent["version"] == 15

    _, _, page = await get(f"{api}/agents?limit=1")
    assert [a["agent_id"] for a in page["items"]] == ["api-a"]
    assert page["next"] == "api-a"
    _, _, rest = await get(f"{api}/agents?limit=1&after=api-a")
    assert [a["agent_id"] for a in rest["items"]] == ["api-b"]
    assert rest["next"] is None

    _, _, tree = await get(f"{api}/agents/api-a/genealogy")
    assert [(i["incarnation"], i["end"]) for i in tree["incarnations"]] == [(1, "dead"),
                                                                          (2, None)]
    assert tree["incarnations"][1]["last_version"] == 15

    _, _, first = await get(f"{api}/streams/api-a/events?limit=10")
    assert [e["version"] for e in first["items"]] == list(range(1, 11))
    _, _, second = await get(f"{api}/streams/api-a/events?from={first['next_from']}&limit=10")
    assert [e["version"] for e in second["items"]] == list(range(11, 16))
    assert second["next_from"] is None

    _, _, state = await get(f"{api}/streams/api-a/state?version=2")
    assert state["event"]["type"] == "task.assigned"
    assert state["state"]["agent"]["pending"] == {"t0": "question 0"}
    _, _, latest = await get(f"{api}/streams/api-a/state")
    assert latest["version"] == 15
    assert len(latest["state"]["agent"]["history"]) == 4
    at = latest["event"]["timestamp"]
    _, _, as_of = await get(f"{api}/streams/api-a/state?at={at.replace('+', '%2B')}")
    assert as_of["version"] == 15

    status, _, audit = await get(f"{api}/audit/api-a")
    assert status == 200
    assert audit["ok"] is True
    assert audit["events"] == 15

    status, headers, missing = await get(f"{api}/agents/nobody")
    assert status == 404
    assert headers["Content-Type"].startswith("application/problem+json")
    assert missing["status"] == 404
    assert "nobody" in missing["detail"]
    status, _, bad = await get(f"{api}/streams/api-a/events?limit=0")
    assert status == 400
    assert bad["title"] == "Bad Request"
    async with aiohttp.ClientSession() as session, session.post(f"{api}/agents") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD"
    status, _, doc = await get(f"{api}/openapi.json")
    assert status == 200
    assert doc["openapi"].startswith("3.")
    assert (await get(f"{api}/readyz"))[0] == 200


async def test_sse_delivers_live_events_in_order(
        api: str, rp_settings: Settings, plan: TopicPlan) -> None:
    stream = f"live-{uuid.uuid4().hex[:6]}"
    received: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session, \
            session.get(f"{api}/events/stream?stream={stream}") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert (await response.content.readline()) == b": subscribed\n"
        store = await KafkaEventStore.open(rp_settings, topic=plan.name(EVENTS))
        try:
            for i in range(40):
                await store.append(stream, [NewEvent("note.added", "tests", {"i": i})])
                await store.append(f"{stream}-other", [NewEvent("note.added", "tests", {})])
        finally:
            await store.close()
        async with asyncio.timeout(30):
            while len(received) < 40:
                line = await response.content.readline()
                if line.startswith(b"data: "):
                    received.append(json.loads(line[6:]))
    assert [e["version"] for e in received] == list(range(1, 41))
    assert {e["stream_id"] for e in received} == {stream}
    assert [e["payload"]["i"] for e in received] == list(range(40))


async def test_reads_fall_back_to_the_log_while_postgres_is_down(
        api: str, rp_settings: Settings) -> None:
    down = rp_settings.with_overrides(postgres_dsn=DOWN_DSN)
    service = ReplayReaderService(down, http_port=0, project=False, host="127.0.0.1")
    await service.start()
    try:
        base = f"http://127.0.0.1:{service.port}"
        _, _, projected = await get(f"{api}/agents/api-a")
        status, headers, from_log = await get(f"{base}/agents/api-a")
        assert status == 200
        assert headers["X-Ares-Source"] == "log"
        assert from_log == projected
        _, _, listing = await get(f"{base}/agents?limit=500")
        assert listing["source"] == "log"
        assert {"api-a", "api-b"} <= {a["agent_id"] for a in listing["items"]}
        _, _, tree = await get(f"{base}/agents/api-a/genealogy")
        _, _, projected_tree = await get(f"{api}/agents/api-a/genealogy")
        assert tree["source"] == "log"
        assert tree["incarnations"] == projected_tree["incarnations"]
        status, _, events = await get(f"{base}/streams/api-a/events")
        assert status == 200
        assert len(events["items"]) == 15
        assert events["source"] == "log"
        assert (await get(f"{base}/alerts"))[0] == 503
    finally:
        await service.stop()
