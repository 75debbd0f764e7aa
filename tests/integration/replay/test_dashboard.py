"""The dashboard (/ui/) of `ares run replay-reader` on the real broker and PostgreSQL:
every page fetched with aiohttp and checked (content, paging, filters, escaping), the
replay panel stepped, the login, and one live update over SSE."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
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

pytestmark = pytest.mark.integration

AGENTS = 130  # over one page of 100
EVIL = "dash-<i>x&amp;\"'"  # an agent id the pages must escape
OPERATOR, VIEWER = "op-dash-token-1234", "view-dash-token-1234"


def other_kind(events: list[NewEvent]) -> list[NewEvent]:
    """The stream with its agent.started of another kind, on another worker."""
    first = events[0]
    events[0] = NewEvent(first.type, first.module, {**first.payload, "kind": "example.other",
                                                     "worker": "w-2"})
    return events


@pytest.fixture(scope="module")
async def ui(rp_settings: Settings, plan: TopicPlan) -> AsyncIterator[str]:
    """A replay reader over AGENTS + 3 agents, caught up; its base URL."""
    settings = rp_settings.with_overrides(api_tokens=f"viewer:{VIEWER},operator:{OPERATOR}")
    schema = f"rp_ui_{uuid.uuid4().hex[:8]}"
    streams = {f"dash-{i:03d}": chat_events(1) for i in range(AGENTS)}
    for i in range(10):
        streams[f"dash-{i:03d}"] = other_kind(streams[f"dash-{i:03d}"])
    dead = chat_events(2)
    dead[4:4] = [
        NewEvent("agent.dead", "runtime-manager", {"cause": "crashed", "incarnation": 1}),
        NewEvent("agent.resurrected", "runtime-manager", {
            "incarnation": 2, "parent_incarnation": 1, "replayed_events": 4,
            "recovery_ms": 3})]
    streams["dash-dead"] = dead
    streams["dash-quarantined"] = [*chat_events(0), NewEvent(
        "agent.quarantined", "runtime-manager", {"reason": "death loop", "deaths": 3})]
    streams[EVIL] = chat_events(1)
    await write_streams(settings, plan, streams)
    service = ReplayReaderService(settings, http_port=0, schema=schema, host="127.0.0.1")
    await service.start()
    try:
        assert service.projector is not None
        await wait_for(service.projector.caught_up.wait(), 120)
        yield f"http://127.0.0.1:{service.port}"
    finally:
        await service.stop()
        conn = await asyncpg.connect(settings.postgres_dsn)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def fetch(url: str, **options: Any) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession() as session, session.get(
            url, allow_redirects=False, **options) as response:
        return response.status, dict(response.headers), await response.text()


def rows(html: str) -> list[dict[str, str]]:
    return [{"agent_id": m[0], "status": m[1], "incarnation": m[2]} for m in re.findall(
        r'data-testid="agent-row" data-agent-id="([^"]*)" data-status="([^"]*)" '
        r'data-incarnation="([^"]*)"', html)]


async def test_fleet_pages_filters_and_headers(ui: str) -> None:
    status, headers, html = await fetch(f"{ui}/ui/")
    assert status == 200, html
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    first = rows(html)
    assert len(first) == 100
    assert f"{AGENTS + 3} agents" in html
    assert "page 1 of 2" in html
    assert first[0]["agent_id"] == "dash-000"
    _, _, html2 = await fetch(f"{ui}/ui/?page=2")
    second = rows(html2)
    assert len(second) == AGENTS + 3 - 100
    assert not {r["agent_id"] for r in first} & {r["agent_id"] for r in second}
    assert "&lt;i&gt;x&amp;amp;" in html2
    assert "<i>x" not in html2
    _, _, other = await fetch(f"{ui}/ui/?kind=example.other")
    assert len(rows(other)) == 10
    _, _, w2 = await fetch(f"{ui}/ui/?worker=w-2")
    assert {r["agent_id"] for r in rows(w2)} == {f"dash-{i:03d}" for i in range(10)}
    _, _, quarantined = await fetch(f"{ui}/ui/?quarantined=1")
    assert [r["agent_id"] for r in rows(quarantined)] == ["dash-quarantined"]
    assert rows(quarantined)[0]["status"] == "quarantined"
    _, _, dead = await fetch(f"{ui}/ui/?status=running&kind=example.chat&page=1&size=500")
    found = {r["agent_id"]: r for r in rows(dead)}
    assert found["dash-dead"]["incarnation"] == "2"
    assert "dash-quarantined" not in found
    _, _, in_doubt = await fetch(f"{ui}/ui/?in_doubt=1")
    assert rows(in_doubt) == []
    assert 'data-testid="fleet-empty"' in in_doubt
    status, headers, _ = await fetch(f"{ui}/ui")
    assert status == 302
    assert headers["Location"] == "/ui/"
    status, _, js = await fetch(f"{ui}/ui/static/ui.js")
    assert status == 200
    assert "EventSource" in js


async def test_agent_page_and_replay(ui: str) -> None:
    status, _, html = await fetch(f"{ui}/ui/agents/dash-dead")
    assert status == 200, html
    assert html.count('data-testid="incarnation-row"') == 2
    assert 'data-testid="agent-summary" data-agent-id="dash-dead" data-status="running" ' \
           'data-incarnation="2"' in html
    assert html.count('data-testid="event-row"') == len(chat_events(2)) + 2
    assert 'data-testid="kill-button"' in html
    assert 'data-testid="stop-button"' in html
    assert html.count('data-testid="journal-call"') == 2
    assert "11 + 7" in html
    assert 'data-testid="replay-state"' in html
    assert "step 0 of 9" in html
    status, _, frag = await fetch(f"{ui}/ui/agents/dash-dead/replay?step=5")
    assert status == 200, frag
    assert 'data-testid="replay-event" data-version="5" data-type="agent.dead"' in frag
    assert 'data-status="dead"' in frag
    assert 'data-path="lifecycle.status"' in frag
    assert 'data-fragment="/ui/agents/dash-dead/replay?step=4"' in frag  # back
    assert 'data-fragment="/ui/agents/dash-dead/replay?step=6"' in frag  # step
    status, _, body = await fetch(f"{ui}/ui/agents/dash-dead/replay?step=6&format=json")
    doc = json.loads(body)
    assert doc["position"] == 6
    assert doc["state"]["lifecycle"]["incarnation"] == 2
    assert doc["event"]["type"] == "agent.resurrected"
    assert {"path": "lifecycle.incarnation", "change": "changed", "before": 1,
            "after": 2} in doc["diff"]
    _, _, end = await fetch(f"{ui}/ui/agents/dash-dead/replay?step=999&format=json")
    assert json.loads(end)["position"] == 9
    first_ts = json.loads(body)["event"]["timestamp"]
    _, _, at = await fetch(f"{ui}/ui/agents/dash-dead/replay",
                           params={"at": first_ts, "format": "json"})
    assert json.loads(at)["position"] >= 6
    status, _, genealogy = await fetch(f"{ui}/ui/agents/dash-dead/genealogy")
    assert status == 200, genealogy
    assert genealogy.count('data-testid="incarnation-row"') == 2
    assert 'data-incarnation="1" data-end="dead"' in genealogy
    assert '<html' not in genealogy  # the fragment alone
    status, _, _ = await fetch(f"{ui}/ui/agents/nobody-here/genealogy")
    assert status == 404
    status, _, audit = await fetch(f"{ui}/ui/agents/dash-dead/audit")
    assert status == 200
    assert 'data-testid="audit-result" data-ok="true"' in audit
    status, _, missing = await fetch(f"{ui}/ui/agents/nobody-here")
    assert status == 404
    assert 'data-testid="error-status">404' in missing
    status, _, evil = await fetch(f"{ui}/ui/agents/{aiohttp.helpers.quote(EVIL, safe='')}")
    assert status == 200
    assert "<i>x" not in evil


async def test_alerts_and_workers_pages(ui: str) -> None:
    status, _, alerts = await fetch(f"{ui}/ui/alerts")
    assert status == 200
    assert 'data-testid="alerts-table"' in alerts
    status, _, workers = await fetch(f"{ui}/ui/workers")
    assert status == 200, workers
    assert 'data-testid="hosted-row" data-worker-id="w-1"' in workers
    assert 'data-testid="hosted-row" data-worker-id="w-2"' in workers
    assert 'data-testid="lag-row"' in workers
    assert "crash-worker-button" not in workers  # the arena is off


async def test_login_sets_a_session_whose_forms_carry_csrf(ui: str) -> None:
    # unsafe: aiohttp's jar keeps no cookie of an IP address otherwise (browsers do).
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        async with session.post(f"{ui}/ui/login", data={"token": "wrong", "next": "/ui/"},
                                allow_redirects=False) as response:
            assert response.status == 401
            assert 'data-ok="false"' in await response.text()
        async with session.post(f"{ui}/ui/login", data={"token": OPERATOR,
                                                         "next": "/ui/agents/dash-dead"},
                                allow_redirects=False) as response:
            assert response.status == 303
            assert response.headers["Location"] == "/ui/agents/dash-dead"
        async with session.get(f"{ui}/ui/agents/dash-dead") as response:
            html = await response.text()
        assert 'data-role="operator"' in html
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
        assert csrf is not None
        # The Kill form's own request, as ui.js sends it, reaches the write API and passes
        # its auth (CSRF included); with no runtime manager it then finds no owner.
        async with session.post(f"{ui}/agents/no-such-agent/kill",
                                headers={"X-CSRF-Token": csrf[1]}) as response:
            assert response.status not in (401, 403), await response.text()
        async with session.post(f"{ui}/agents/no-such-agent/kill",
                                headers={"X-CSRF-Token": "forged"}) as response:
            assert response.status == 403


async def test_a_row_is_updated_live_over_sse(ui: str, rp_settings: Settings,
                                              plan: TopicPlan) -> None:
    timeout = aiohttp.ClientTimeout(total=120, sock_read=60)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
            f"{ui}/ui/live", params=[("agent", "dash-050"), ("agent", "dash-051")]) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert (await response.content.readline()).startswith(b": subscribed")
        store = await KafkaEventStore.open(rp_settings, topic=plan.name(EVENTS))
        try:
            await store.append("dash-051", [NewEvent("agent.dead", "runtime-manager", {
                "cause": "killed", "incarnation": 1})])
        finally:
            await store.close()
        message: dict[str, Any] | None = None
        while message is None:
            line = (await response.content.readline()).decode()
            if line.startswith("data: "):
                message = json.loads(line[6:])
        assert message["agent"]["agent_id"] == "dash-051"
        assert message["agent"]["status"] == "dead"
        assert message["event"]["type"] == "agent.dead"
    status, _, _ = await fetch(f"{ui}/ui/live")
    assert status == 400


def turn(i: int) -> list[NewEvent]:
    """One more chat turn: task.assigned, llm.call, task.completed."""
    return chat_events(i + 1)[-3:]


async def next_messages(response: aiohttp.ClientResponse, n: int) -> list[tuple[str, Any]]:
    """The next ``n`` SSE messages' ids and data."""
    out: list[tuple[str, Any]] = []
    event_id = ""
    while len(out) < n:
        line = (await response.content.readline()).decode()
        if line.startswith("id: "):
            event_id = line[4:].strip()
        elif line.startswith("data: "):
            out.append((event_id, json.loads(line[6:])))
    return out


async def test_the_agent_page_resumes_its_live_stream_after_the_rendered_version(
        ui: str, rp_settings: Settings, plan: TopicPlan) -> None:
    """Events appended between the page's render and its SSE subscription are sent first
    (from the log), then the live ones: every version once, in order."""
    agent = "dash-070"
    _, _, html = await fetch(f"{ui}/ui/agents/{agent}")
    rendered = re.search(r'id="event-rows" data-agent-id="dash-070" data-after="(\d+)"', html)
    assert rendered is not None, html
    after = int(rendered[1])
    store = await KafkaEventStore.open(rp_settings, topic=plan.name(EVENTS))
    timeout = aiohttp.ClientTimeout(total=120, sock_read=60)
    try:
        await store.append(agent, turn(1))  # between the render and the subscription
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(f"{ui}/ui/live",
                                   params={"agent": agent, "after": str(after)}) as response:
                assert response.status == 200
                assert (await response.content.readline()).startswith(b": subscribed")
                await store.append(agent, turn(2))  # live
                got = await next_messages(response, 6)
                await store.append(agent, turn(3)[:1])  # the next one: nothing repeated
                got += await next_messages(response, 1)
            versions = [m["event"]["version"] for _, m in got]
            assert versions == list(range(after + 1, after + 8)), versions
            assert [int(i) for i, _ in got] == versions  # ids are versions
            assert got[-1][1]["agent"]["version"] == after + 7
            # An EventSource's reconnection: Last-Event-ID wins over the page's ?after=.
            async with session.get(f"{ui}/ui/live", params={"agent": agent, "after": "0"},
                                   headers={"Last-Event-ID": str(after + 5)}) as response:
                assert (await response.content.readline()).startswith(b": subscribed")
                again = await next_messages(response, 2)
            assert [m["event"]["version"] for _, m in again] == [after + 6, after + 7]
    finally:
        await store.close()
    status, _, _ = await fetch(f"{ui}/ui/live?agent={agent}&after=x")
    assert status == 400
