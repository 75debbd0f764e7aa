"""Teams on the read side against the real broker and PostgreSQL (issue 26): a team's
streams appended through the real Kafka store, projected by `ares run replay-reader`'s
projector; the `agents` row's parent_id and delegated_to, GET /agents/{id}/tree (and its
OpenAPI schema, by schemathesis), the same document while PostgreSQL is down, the
migration on a schema projected before it, and `ares agents tree` agreeing with the API."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from ares.config import Settings
from ares.events.model import NewEvent
from ares.replay_reader import migrations
from ares.replay_reader.pg_store import ProjectionStore, ProjectionUnavailableError
from ares.replay_reader.projection import agent_json
from ares.replay_reader.service import ReplayReaderService
from ares.tasks import wait_for
from ares.topics import TopicPlan
from tests.integration.replay.conftest import env_of, write_streams
from tests.integration.replay.test_http_api import get, schemathesis
from tests.integration.replay.test_replay_cli import DOWN_DSN
from tests.support import team_streams as ts
from tests.support.processes import ares


@pytest.fixture(scope="module")
async def team_api(rp_settings: Settings, plan: TopicPlan) -> AsyncIterator[tuple[str, str]]:
    """A replay reader caught up on the team of ``team_streams``: (base URL, schema)."""
    schema = f"rp_team_{uuid.uuid4().hex[:8]}"
    streams = {stream_id: [NewEvent(t, "tests", p) for t, p in pairs]
               for stream_id, pairs in ts.team().items()}
    await write_streams(rp_settings, plan, streams)
    service = ReplayReaderService(rp_settings, http_port=0, schema=schema, host="127.0.0.1")
    await service.start()
    assert service.projector is not None
    await wait_for(service.projector.caught_up.wait(), 60)
    yield f"http://127.0.0.1:{service.port}", schema
    await service.stop()
    conn = await asyncpg.connect(rp_settings.postgres_dsn)
    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await conn.close()


async def test_the_projection_stores_the_links(rp_settings: Settings,
                                               team_api: tuple[str, str]) -> None:
    _, schema = team_api
    conn = await asyncpg.connect(rp_settings.postgres_dsn)
    try:
        rows = await conn.fetch(f'SELECT agent_id, parent_id, delegated_to FROM "{schema}".agents')
        applied = await conn.fetch(f'SELECT version, name FROM "{schema}".schema_migrations '
                                   "ORDER BY version")
        children = await conn.fetch(f'SELECT agent_id FROM "{schema}".agents '
                                    "WHERE parent_id = $1", ts.LEAD)
    finally:
        await conn.close()
    assert sorted((r["agent_id"], r["parent_id"], list(r["delegated_to"])) for r in rows) == [
        (ts.LEAD, None, [ts.RESEARCH, ts.WRITE, ts.GHOST]),
        (ts.RESEARCH, ts.LEAD, [ts.FETCH]),
        (ts.FETCH, ts.RESEARCH, []),
        (ts.WRITE, ts.LEAD, []),
        ("solo", None, []),
    ]
    assert [(r["version"], r["name"]) for r in applied][-1] == (2, "team_links")
    assert sorted(r["agent_id"] for r in children) == [ts.RESEARCH, ts.WRITE]


async def test_the_agent_document_names_its_parent(team_api: tuple[str, str]) -> None:
    base, _ = team_api
    status, headers, agent = await get(f"{base}/agents/{ts.FETCH}")
    assert status == 200
    assert headers["X-Ares-Source"] == "projection"
    assert agent["parent_id"] == ts.RESEARCH
    _, _, lead = await get(f"{base}/agents/{ts.LEAD}")
    assert lead["parent_id"] is None
    _, _, page = await get(f"{base}/agents?limit=500")
    assert {a["agent_id"]: a["parent_id"] for a in page["items"]}[ts.WRITE] == ts.LEAD


async def test_the_tree_route_serves_the_team_from_postgres(team_api: tuple[str, str]) -> None:
    base, _ = team_api
    status, headers, tree = await get(f"{base}/agents/{ts.LEAD}/tree")
    assert status == 200
    assert headers["X-Ares-Source"] == "projection"
    assert tree == ts.expected_tree()
    _, _, sub = await get(f"{base}/agents/{ts.RESEARCH}/tree")
    assert sub == ts.expected_tree()["children"][0]
    _, _, alone = await get(f"{base}/agents/solo/tree")
    assert (alone["agent_id"], alone["task_id"], alone["children"]) == ("solo", "s1", [])
    status, headers, missing = await get(f"{base}/agents/nobody/tree")
    assert status == 404
    assert headers["Content-Type"].startswith("application/problem+json")
    assert missing["detail"] == "no agent 'nobody'"
    # A dispatched child that never started is no agent.
    assert (await get(f"{base}/agents/{ts.GHOST}/tree"))[0] == 404


async def test_the_tree_falls_back_to_the_log_while_postgres_is_down(
        rp_settings: Settings, team_api: tuple[str, str]) -> None:
    down = rp_settings.with_overrides(postgres_dsn=DOWN_DSN)
    service = ReplayReaderService(down, http_port=0, project=False, host="127.0.0.1")
    await service.start()
    try:
        base = f"http://127.0.0.1:{service.port}"
        status, headers, tree = await get(f"{base}/agents/{ts.LEAD}/tree")
        assert status == 200
        assert headers["X-Ares-Source"] == "log"
        assert tree == ts.expected_tree()
        assert (await get(f"{base}/agents/nobody/tree"))[0] == 404
    finally:
        await service.stop()


async def test_the_cli_tree_is_the_api_s(rp_settings: Settings,
                                         team_api: tuple[str, str]) -> None:
    base, schema = team_api
    env = env_of(rp_settings, schema)
    done = await asyncio.to_thread(ares, "agents", "tree", ts.LEAD, "--json", env=env)
    assert done.returncode == 0, done.stderr
    _, _, from_api = await get(f"{base}/agents/{ts.LEAD}/tree")
    assert json.loads(done.stdout) == from_api == ts.expected_tree()

    text = await asyncio.to_thread(ares, "agents", "tree", ts.LEAD, env=env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        ts.LEAD, f"├─ {ts.RESEARCH}", f"│  └─ {ts.FETCH}", f"└─ {ts.WRITE}"]
    assert lines[3].endswith("tokens 42 spent, 42 reused")

    status = await asyncio.to_thread(ares, "agents", "status", ts.FETCH, "--json", env=env)
    assert json.loads(status.stdout)["parent_id"] == ts.RESEARCH
    status_text = await asyncio.to_thread(ares, "agents", "status", ts.FETCH, env=env)
    assert f"parent    {ts.RESEARCH}" in status_text.stdout

    unknown = await asyncio.to_thread(ares, "agents", "tree", "nobody", env=env)
    unknown_status = await asyncio.to_thread(ares, "agents", "status", "nobody", env=env)
    assert unknown.returncode == unknown_status.returncode == 1
    assert unknown.stdout == ""
    assert "no agent 'nobody'" in unknown.stderr
    assert unknown.stderr == unknown_status.stderr


async def test_the_migration_fills_parent_id_of_rows_projected_before_it(
        postgres_dsn: str) -> None:
    schema = f"rp_mig_{uuid.uuid4().hex[:8]}"
    every = migrations.load_migrations()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert await migrations.migrate(conn, schema, every[:1]) == [1]
        row = ("k", "running", 1, 0, 0, 0, 5, 1, 0, 0, 1, 0, 0, 0, 0, 0)
        insert = (f'INSERT INTO "{schema}".agents (agent_id, lifecycle, kind, status, '
                  "incarnation, restarts, deaths, resurrections, version, tasks_assigned, "
                  "tasks_completed, tasks_failed, tasks_pending, llm_calls, tokens_prompt, "
                  "tokens_completion, tokens_reused, resumes) VALUES ($1, $2, "
                  + ", ".join(f"${i}" for i in range(3, 19)) + ")")
        await conn.execute(insert, "child", json.dumps({"parent_id": "boss"}), *row)
        await conn.execute(insert, "boss", json.dumps({"status": "running"}), *row)
        # A reader (a new replica) on the schema its projector has not migrated yet: the
        # Agent document says no parent, the tree is not the projection's to answer.
        store = ProjectionStore(postgres_dsn, schema, events_topic="unused")
        try:
            stored_child = await store.agent("child")
            assert stored_child is not None
            assert agent_json(stored_child)["parent_id"] is None
            with pytest.raises(ProjectionUnavailableError, match="0002_team_links"):
                await store.team("child")
            assert await migrations.migrate(conn, schema, every) == [2]
            assert {r["agent_id"] for r in await store.team("boss")} == {"boss", "child"}
        finally:
            await store.close()
        stored = await conn.fetch(f'SELECT agent_id, parent_id, delegated_to FROM "{schema}".'
                                  "agents")
        assert sorted((r["agent_id"], r["parent_id"], list(r["delegated_to"]))
                      for r in stored) == [
            ("boss", None, []), ("child", "boss", [])]
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@pytest.mark.timeout(600)
async def test_schemathesis_on_the_tree_of_a_real_team(team_api: tuple[str, str],
                                                       tmp_path: Path) -> None:
    """The recursive AgentTree schema against nested real answers (and the 404s)."""
    base, _ = team_api
    code, out = await schemathesis(base, tmp_path, "--include-operation-id", "getAgentTree",
                                   config=f'[parameters]\n"path.agent_id" = "{ts.LEAD}"\n')
    assert code == 0, out[-6000:]
    assert "Selected: 1/" in out
    assert "Tested: 1" in out
    assert "Missing test data" not in out
    code, out = await schemathesis(base, tmp_path, "--include-operation-id", "getAgentTree")
    assert code == 0, out[-6000:]
