"""The write routes of `ares run replay-reader` on the real broker, applied by a real
`ares run runtime-manager`: start, tasks, stop, resume, kill, resolve (and signals), each
once with an operator's token and checked on the log; a viewer's token (403), no token or a
wrong one (401) with nothing appended and no command on ares.commands; a session's write
without its CSRF token (403); reads with ARES_API_READS=token."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ares.agents.records import idempotency_key
from ares.client import Client
from ares.commands.model import Command
from ares.config import Settings
from ares.events.model import Event, NewEvent
from ares.replay_reader.auth import CSRF_HEADER, SESSION_COOKIE
from ares.replay_reader.service import ReplayReaderService
from ares.topics import COMMANDS, TopicPlan
from tests.integration.replay.conftest import one_owner, serving
from tests.integration.replay.test_http_api import schemathesis
from tests.support.kafka import drain_records
from tests.support.runtime import read_stream, wait_for_events

VIEWER = f"viewer-{uuid.uuid4().hex}"
OPERATOR = f"operator-{uuid.uuid4().hex}"
TOKENS = f"viewer:{VIEWER},operator:{OPERATOR}"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
AS_VIEWER = {"Authorization": f"Bearer {VIEWER}"}
WORKER = "w-writes"


@pytest.fixture(scope="module")
async def owner(rp_settings: Settings, plan: TopicPlan,
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Path]:
    """One real runtime manager owning every partition."""
    async with one_owner(rp_settings, plan, tmp_path_factory, WORKER, "writes") as directory:
        yield directory


@pytest.fixture(scope="module")
async def service(rp_settings: Settings, owner: Path) -> AsyncIterator[ReplayReaderService]:
    """A replay reader with a viewer's and an operator's token; reads open."""
    started = await serving(rp_settings.with_overrides(api_tokens=TOKENS,
                                                        request_timeout_s=20.0), "rp_wr_")
    yield started
    await started.stop()


@pytest.fixture(scope="module")
def api(service: ReplayReaderService) -> str:
    return f"http://127.0.0.1:{service.port}"


@pytest.fixture(scope="module")
async def client(rp_settings: Settings, plan: TopicPlan, owner: Path) -> AsyncIterator[Client]:
    async with Client(rp_settings, plan, issuer="test-writes") as started:
        yield started


async def post(url: str, body: Any = None, headers: dict[str, str] | None = None, *,
               raw: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    data = raw if raw is not None else None if body is None else json.dumps(body)
    async with aiohttp.ClientSession() as session, \
            session.post(url, data=data, headers=sent) as response:
        text = await response.text()
        return response.status, dict(response.headers), json.loads(text) if text else None


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, \
            session.get(url, headers=headers or {}, allow_redirects=False) as response:
        return response.status, await response.text()


async def api_commands(settings: Settings, plan: TopicPlan, agent_id: str) -> list[Command]:
    """Every command the API (issuer http-api) ever sent for ``agent_id``."""
    records = await drain_records(settings.kafka_bootstrap, plan.name(COMMANDS),
                                  partitions=plan.topic(COMMANDS).partitions)
    return [c for c in (Command.decode(r.value) for r in records
                        if r.key == agent_id.encode())
            if c.stream_id == agent_id and c.issuer == "http-api"]


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def after(events: list[Event], version: int) -> list[Event]:
    return [e for e in events if e.version > version]


def has_type(event_type: str, since: int = 0) -> Callable[[list[Event]], bool]:
    return lambda events: any(e.type == event_type for e in after(events, since))


async def test_each_write_is_applied_once_with_an_operators_token(
        api: str, rp_settings: Settings, plan: TopicPlan) -> None:
    agent_id = f"wr-{uuid.uuid4().hex[:8]}"
    base = f"{api}/agents/{agent_id}"

    status, _, body = await post(f"{base}/start", {"kind": "test.sleeper"}, AS_OPERATOR)
    assert status == 202, body
    assert body == {"agent_id": agent_id, "command": "agent.start", "status": "ok",
                    "message": "started", "version": 1}
    [started] = await read_stream(rp_settings, plan, agent_id)
    assert (started.type, started.payload["kind"], started.payload["incarnation"]) == (
        "agent.started", "test.sleeper", 1)

    status, _, body = await post(f"{base}/tasks", {"input": {"seconds": 60},
                                                   "task_id": "nap"}, AS_OPERATOR)
    assert status == 202, body
    assert (body["task_id"], body["status"]) == ("nap", "ok")
    events = await wait_for_events(rp_settings, plan, agent_id, has_type("task.assigned"))
    [assigned] = [e for e in events if e.type == "task.assigned"]
    assert (assigned.payload["task_id"], json.loads(assigned.payload["input_json"])) == (
        "nap", {"seconds": 60})
    assert assigned.version == body["version"]

    # Kill the busy agent: agent.dead (cause killed), then resurrected.
    head = events[-1].version
    status, _, body = await post(f"{base}/kill", None, AS_OPERATOR)
    assert status == 202, body
    assert body["command"] == "agent.kill"
    events = await wait_for_events(rp_settings, plan, agent_id,
                                   has_type("agent.resurrected", head))
    [dead] = [e for e in after(events, head) if e.type == "agent.dead"]
    assert dead.payload["cause"] == "killed"

    head = events[-1].version
    status, _, body = await post(f"{base}/stop", {"reason": "from the test"}, AS_OPERATOR)
    assert status == 202, body
    events = await wait_for_events(rp_settings, plan, agent_id, has_type("agent.stopped", head))
    [stopped] = [e for e in after(events, head) if e.type == "agent.stopped"]
    assert stopped.payload["reason"] == "from the test"

    head = events[-1].version
    status, _, body = await post(f"{base}/resume", {}, AS_OPERATOR)
    assert (status, body["message"]) == (202, "resumed"), body
    events = await wait_for_events(rp_settings, plan, agent_id, has_type("agent.resumed", head))
    assert types(after(events, head))[:2] == ["agent.resumed", "agent.started"]

    # One command per request, each sent once, by the API.
    sent = await api_commands(rp_settings, plan, agent_id)
    assert [c.type for c in sent] == ["agent.start", "task.assign", "agent.kill",
                                      "agent.stop", "agent.resume"]

    # The owner's refusals: 404 for no agent, 422 for an unknown kind; nothing appended.
    nobody = f"wr-nobody-{uuid.uuid4().hex[:6]}"
    status, _, body = await post(f"{api}/agents/{nobody}/kill", None, AS_OPERATOR)
    assert status == 404, body
    status, _, body = await post(f"{api}/agents/{nobody}/start", {"kind": "no.such.kind"},
                                 AS_OPERATOR)
    assert status == 422, body
    assert await read_stream(rp_settings, plan, nobody) == []


async def test_an_in_doubt_call_is_resolved_through_the_api(
        api: str, client: Client, rp_settings: Settings, plan: TopicPlan) -> None:
    """As `ares agents resolve` (the same code path): refused (409) while the call is not
    reported in doubt, applied once it is, refused again once resolved."""
    agent_id = f"wr-doubt-{uuid.uuid4().hex[:8]}"
    await client.start_agent(agent_id, "example.pipeline", {"reconcile": False})
    await client.command("agent.stop", agent_id, reason="setup")
    await client.assign_task(agent_id, "t9", {"steps": 0, "email": True})
    call = "t9:send_email:0:0"
    await client.append(agent_id, [NewEvent("tool.call.intent", "agent.example.pipeline", {
        "call_id": call, "tool": "send_email", "effect": "at_most_once",
        "idempotency_key": idempotency_key(agent_id, "t9", "send_email", 0),
        "args_json": "{}", "occurrence": 0, "task_id": "t9"})])
    url = f"{api}/agents/{agent_id}/calls/{call}/resolve"
    status, _, body = await post(url, {"as": "retry"}, AS_OPERATOR)
    assert status == 409, body
    assert "not reported it in doubt" in body["detail"]

    await client.command("agent.resume", agent_id, reason="setup")
    await wait_for_events(rp_settings, plan, agent_id, has_type("tool.in_doubt"))
    status, _, body = await post(url, {"as": "done", "result": {"sent": True},
                                       "note": "in the mail log"}, AS_OPERATOR)
    assert status == 202, body
    events = await wait_for_events(rp_settings, plan, agent_id, has_type("task.completed"))
    [resolved] = [e for e in events if e.type == "tool.call.resolved"]
    assert resolved.version == body["version"]
    assert resolved.module == "http-api"
    assert resolved.payload == {"call_id": call, "as": "done", "result": {"sent": True},
                                "note": "in the mail log", "task_id": "t9",
                                "tool": "send_email", "by": "operator"}
    status, _, body = await post(url, {"as": "skip"}, AS_OPERATOR)
    assert status == 409, body
    assert "already resolved as done" in body["detail"]
    status, _, body = await post(f"{api}/agents/wr-nobody/calls/{call}/resolve",
                                 {"as": "skip"}, AS_OPERATOR)
    assert status == 404, body
    # One append per applied resolution; the refused ones sent nothing.
    sent = await api_commands(rp_settings, plan, agent_id)
    assert [c.type for c in sent] == ["events.append"]


def _writes(agent_id: str) -> list[tuple[str, Any]]:
    return [(f"/agents/{agent_id}/start", {"kind": "test.counter"}),
            (f"/agents/{agent_id}/stop", {"reason": "no"}),
            (f"/agents/{agent_id}/kill", None),
            (f"/agents/{agent_id}/resume", None),
            (f"/agents/{agent_id}/tasks", {"input": 1, "task_id": "t"}),
            (f"/agents/{agent_id}/calls/t:x:0:0/resolve", {"as": "skip"}),
            (f"/agents/{agent_id}/signals/go", {"payload": 1})]


async def test_refused_writes_send_nothing_and_append_nothing(
        api: str, client: Client, rp_settings: Settings, plan: TopicPlan,
        caplog: pytest.LogCaptureFixture) -> None:
    agent_id = f"wr-refused-{uuid.uuid4().hex[:8]}"
    await client.start_agent(agent_id, "test.counter")
    before = await read_stream(rp_settings, plan, agent_id)
    refusals = [
        (AS_VIEWER, 403, None),
        ({}, 401, 'Bearer realm="ares"'),
        ({"Authorization": f"Bearer {OPERATOR}x"}, 401,
         'Bearer realm="ares", error="invalid_token"'),
        ({"Authorization": f"Basic {OPERATOR}"}, 401, 'Bearer realm="ares"'),
    ]
    for path, body in _writes(agent_id):
        for headers, expected, challenge in refusals:
            status, answered, problem = await post(api + path, body, headers)
            assert status == expected, (path, headers, problem)
            assert answered.get("WWW-Authenticate") == challenge
            assert answered["Content-Type"].startswith("application/problem+json")
            assert OPERATOR not in json.dumps(problem)
            assert VIEWER not in json.dumps(problem)
    # Refused before the body is read: an oversized or malformed one is still a 401.
    status, _, _ = await post(f"{api}/agents/{agent_id}/tasks", raw=b"{" * 100_000)
    assert status == 401
    assert await read_stream(rp_settings, plan, agent_id) == before
    assert await api_commands(rp_settings, plan, agent_id) == []
    assert OPERATOR not in caplog.text
    assert VIEWER not in caplog.text


async def test_bodies_are_validated_before_anything_is_sent(
        api: str, client: Client, rp_settings: Settings, plan: TopicPlan) -> None:
    agent_id = f"wr-bodies-{uuid.uuid4().hex[:8]}"
    await client.start_agent(agent_id, "test.counter")
    base = f"{api}/agents/{agent_id}"
    cases: list[tuple[str, Any, int, str]] = [
        ("start", {}, 400, "kind is required"),
        ("start", {"kind": "test.counter", "config": [1]}, 400, "config must be a JSON object"),
        ("start", {"kind": "a\nb"}, 400, "kind must be a string"),
        ("start", {"kind": "x", "extra": 1}, 400, "unknown field(s) 'extra'"),
        ("stop", {"reason": 5}, 400, "reason must be a string"),
        ("kill", {"reason": "x"}, 400, "unknown field(s) 'reason'"),
        ("resume", [], 400, "the body must be a JSON object"),
        ("tasks", {"task_id": "t"}, 400, "input is required"),
        ("tasks", {"input": 1, "task_id": ""}, 400, "task_id must be a string"),
        ("tasks", {"input": "x" * 70_000}, 413, "over the 65536 a write may carry"),
        ("calls/c/resolve", {"as": "maybe"}, 400, "as must be one of done, retry, skip"),
        ("calls/c/resolve", {"as": "skip", "result": 1}, 400, "a result only goes with"),
    ]
    for route, body, expected, detail in cases:
        status, _, problem = await post(f"{base}/{route}", body, AS_OPERATOR)
        assert (status, route) == (expected, route), problem
        assert detail in problem["detail"], (route, problem)
    status, _, problem = await post(f"{base}/kill", None, {**AS_OPERATOR,
                                                          "Content-Type": "text/plain"},
                                    raw=b"kill")
    assert status == 415, problem
    assert await api_commands(rp_settings, plan, agent_id) == []


async def test_a_session_write_needs_its_csrf_token(
        api: str, service: ReplayReaderService, client: Client, rp_settings: Settings,
        plan: TopicPlan) -> None:
    """The dashboard's way: a session cookie (as its sign-in sets) and X-CSRF-Token."""
    assert service.api is not None
    auth = service.api.auth
    signed = web.Response()
    assert auth.login(signed, OPERATOR) is not None
    cookie = {"Cookie": f"{SESSION_COOKIE}={signed.cookies[SESSION_COOKIE].value}"}
    viewer = web.Response()
    assert auth.login(viewer, VIEWER) is not None
    viewer_cookie = {"Cookie": f"{SESSION_COOKIE}={viewer.cookies[SESSION_COOKIE].value}"}
    agent_id = f"wr-session-{uuid.uuid4().hex[:8]}"
    await client.start_agent(agent_id, "test.counter")
    before = await read_stream(rp_settings, plan, agent_id)
    url = f"{api}/agents/{agent_id}/stop"
    for headers in (cookie, {**cookie, CSRF_HEADER: "forged"}, viewer_cookie):
        status, _, problem = await post(url, {}, headers)
        assert status == 403, problem
    assert await read_stream(rp_settings, plan, agent_id) == before
    assert await api_commands(rp_settings, plan, agent_id) == []

    # The CSRF token the dashboard puts in its pages, for this session.
    status, text = await get(f"{api}/agents/{agent_id}", cookie)
    assert status == 200, text
    csrf = auth.csrf_token(_mocked_get(cookie))
    status, _, body = await post(url, {}, {**cookie, CSRF_HEADER: csrf})
    assert status == 202, body
    await wait_for_events(rp_settings, plan, agent_id, has_type("agent.stopped"))


def _mocked_get(headers: dict[str, str]) -> web.Request:
    from aiohttp.test_utils import make_mocked_request
    from multidict import CIMultiDict
    return make_mocked_request("GET", "/", headers=CIMultiDict(headers))


async def test_reads_need_a_token_with_reads_token(
        rp_settings: Settings, plan: TopicPlan, client: Client) -> None:
    agent_id = f"wr-reads-{uuid.uuid4().hex[:8]}"
    await client.start_agent(agent_id, "test.counter")
    service = await serving(rp_settings.with_overrides(api_tokens=TOKENS,
                                                        api_reads="token"), "rp_wr_")
    base = f"http://127.0.0.1:{service.port}"
    try:
        for path in (f"/agents/{agent_id}", "/agents", f"/agents/{agent_id}/genealogy",
                     f"/streams/{agent_id}/events", f"/streams/{agent_id}/state",
                     "/alerts", "/openapi.json", "/no/such/path", "/ui/"):
            status, text = await get(base + path)
            if path == "/ui/":  # a dashboard page: to its sign-in page
                assert status == 303, text
                continue
            assert status == 401, (path, text)
            assert json.loads(text)["status"] == 401
            status, _ = await get(base + path, {"Authorization": f"Bearer {VIEWER}x"})
            assert status == 401, path
        for token in (VIEWER, OPERATOR):
            status, text = await get(f"{base}/agents/{agent_id}",
                                     {"Authorization": f"Bearer {token}"})
            assert status == 200, text
            assert json.loads(text)["agent_id"] == agent_id
        for path in ("/healthz", "/readyz", "/metrics"):
            status, _ = await get(base + path)
            assert status == 200, path
        status, text = await get(f"{base}/openapi.json", AS_VIEWER)
        doc = json.loads(text)
        assert doc["paths"]["/agents/{agent_id}"]["get"]["security"] == [{"bearerToken": []}]
        assert "401" in doc["paths"]["/agents"]["get"]["responses"]
        assert doc["paths"]["/agents/{agent_id}/kill"]["post"]["security"] == [
            {"bearerToken": []}]
    finally:
        await service.stop()


@pytest.mark.timeout(900)
async def test_schemathesis_on_the_writes_with_an_operators_token(
        api: str, tmp_path: Path) -> None:
    """Every answer the writes give is documented, with the token (free ids: the owner's
    404, an unknown kind's 422, a call not in doubt's 409 are valid answers to valid
    requests here)."""
    options = ("--include-path-regex", "/(start|stop|kill|resume|tasks|resolve)$",
               "-H", f"Authorization: Bearer {OPERATOR}")
    config = ('[checks.positive_data_acceptance]\n'
              'expected-statuses = ["2xx", "401", "403", "404", "409", "422", "5xx"]\n')
    code, out = await schemathesis(api, tmp_path, *options, config=config)
    assert code == 0, out[-6000:]
