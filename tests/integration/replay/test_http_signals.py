"""``POST /agents/{agent_id}/signals/{name}`` of `ares run replay-reader`, on the real
broker, delivered to a real `ares run runtime-manager`: the bearer token (403 while
ARES_API_TOKEN is unset, 401 without or with a wrong one), 404 for an unknown agent with
nothing appended, an `approved` through the API that lets an example.refund pay once and
finish, the same signal id again applied once, 413 with nothing sent, 503 when no owner
answers, and schemathesis on the write with the token."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ares.client import Client
from ares.commands.model import MAX_SIGNAL_PAYLOAD_BYTES, Command
from ares.config import Settings
from ares.events.kafka.dlq import DeadLetter
from ares.events.model import Event
from ares.events.wire.canonical import canonical_json
from ares.examples import evidence
from ares.examples.refund import REFUNDS
from ares.replay_reader.auth import WRITES_DISABLED
from ares.topics import COMMANDS, DLQ, TopicPlan
from tests.integration.replay.conftest import one_owner, serving
from tests.integration.replay.test_http_api import schemathesis
from tests.support.kafka import applied_topics, drain_records
from tests.support.runtime import read_stream, wait_for_events

TOKEN = f"sig-{uuid.uuid4().hex}"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WORKER = "w-signals"


@pytest.fixture(scope="module")
async def ledger(rp_settings: Settings, plan: TopicPlan,
                 tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Path]:
    """One real runtime manager owning every partition; its evidence ledger directory."""
    async with one_owner(rp_settings, plan, tmp_path_factory, WORKER, "signals") as directory:
        yield directory


@pytest.fixture(scope="module")
async def api(rp_settings: Settings, ledger: Path) -> AsyncIterator[str]:
    """A replay reader that takes writes (ARES_API_TOKEN set); its base URL."""
    service = await serving(rp_settings.with_overrides(api_token=TOKEN), "rp_sig_")
    yield f"http://127.0.0.1:{service.port}"
    await service.stop()


@pytest.fixture(scope="module")
async def closed_api(rp_settings: Settings, plan: TopicPlan) -> AsyncIterator[str]:
    """A replay reader without ARES_API_TOKEN: writes disabled."""
    assert rp_settings.api_token is None
    service = await serving(rp_settings, "rp_sig_")
    yield f"http://127.0.0.1:{service.port}"
    await service.stop()


@pytest.fixture(scope="module")
async def client(rp_settings: Settings, plan: TopicPlan,
                 ledger: Path) -> AsyncIterator[Client]:
    async with Client(rp_settings, plan, issuer="test-signals") as started:
        yield started


@pytest.fixture
def agent(client: Client) -> Callable[[str], Awaitable[str]]:
    """Start an agent of ``kind`` with an id of its own; its id."""
    async def start(kind: str) -> str:
        agent_id = f"sig-{kind.rsplit('.', maxsplit=1)[-1]}-{uuid.uuid4().hex[:6]}"
        await client.start_agent(agent_id, kind)
        return agent_id
    return start


async def post(url: str, body: Any = None, headers: dict[str, str] | None = None,
               ) -> tuple[int, dict[str, str], Any]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    data = None if body is None else json.dumps(body)
    async with aiohttp.ClientSession() as session, \
            session.post(url, data=data, headers=sent) as response:
        text = await response.text()
        return response.status, dict(response.headers), json.loads(text) if text else None


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, json.loads(await response.text())


async def signals_sent(settings: Settings, plan: TopicPlan, agent_id: str) -> list[Command]:
    """Every ``agent.signal`` ever sent to ``agent_id`` on ares.commands."""
    records = await drain_records(settings.kafka_bootstrap, plan.name(COMMANDS),
                                  partitions=plan.topic(COMMANDS).partitions)
    return [c for c in (Command.decode(r.value) for r in records
                        if r.key == agent_id.encode())
            if c.stream_id == agent_id and c.type == "agent.signal"]


def signals(events: list[Event]) -> list[Event]:
    return [e for e in events if e.type == "signal.received"]


async def test_writes_need_the_configured_token(
        api: str, closed_api: str, agent: Callable[[str], Awaitable[str]],
        rp_settings: Settings, plan: TopicPlan) -> None:
    agent_id = await agent("test.counter")
    path = f"/agents/{agent_id}/signals/go"
    for headers in ({}, AUTH):
        status, _, body = await post(closed_api + path, {"payload": 1}, headers)
        assert (status, body["detail"]) == (403, WRITES_DISABLED)
    status, headers, body = await post(api + path, {"payload": 1})
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="ares"'
    assert headers["Content-Type"].startswith("application/problem+json")
    for wrong in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", "Bearer"):
        status, headers, body = await post(api + path, {"payload": 1}, {"Authorization": wrong})
        assert status == 401, wrong
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert TOKEN not in json.dumps(body)
    # Nothing of it reached Kafka: no command, no event.
    assert await signals_sent(rp_settings, plan, agent_id) == []
    assert signals(await read_stream(rp_settings, plan, agent_id)) == []
    # Reads stay open; the document says which operation needs the token, and when.
    status, found = await get(f"{api}/agents/{agent_id}")
    assert (status, found["agent_id"]) == (200, agent_id)
    _, doc = await get(f"{api}/openapi.json")
    operation = doc["paths"]["/agents/{agent_id}/signals/{name}"]["post"]
    assert operation["security"] == [{"bearerToken": []}]
    assert doc["components"]["securitySchemes"]["bearerToken"]["scheme"] == "bearer"
    assert "security" not in doc["paths"]["/agents/{agent_id}"]["get"]
    _, closed_doc = await get(f"{closed_api}/openapi.json")
    assert "security" not in closed_doc["paths"]["/agents/{agent_id}/signals/{name}"]["post"]


async def test_a_signal_for_an_unknown_agent_is_404_and_appends_nothing(
        api: str, rp_settings: Settings, plan: TopicPlan) -> None:
    agent_id = f"sig-nobody-{uuid.uuid4().hex[:6]}"
    status, _, body = await post(f"{api}/agents/{agent_id}/signals/approved",
                                 {"payload": True, "signal_id": f"{agent_id}-1"}, AUTH)
    assert status == 404
    assert body["detail"].startswith(f"unknown_agent: no agent {agent_id!r}")
    assert await read_stream(rp_settings, plan, agent_id) == []
    [sent] = await signals_sent(rp_settings, plan, agent_id)  # it did go to the owner,
    assert (sent.issuer, sent.payload["signal_id"]) == ("http-api", f"{agent_id}-1")
    letters = [DeadLetter.from_record(r.key, r.value, r.headers)
               for r in await drain_records(rp_settings.kafka_bootstrap, plan.name(DLQ),
                                            partitions=plan.topic(DLQ).partitions)]
    # ... which kept it, as for any sender: nothing lost
    assert [d.reason for d in letters if d.key == agent_id.encode()] == ["unknown_agent"]


async def test_an_approval_through_the_api_lets_the_refund_go_on_once(
        api: str, agent: Callable[[str], Awaitable[str]], client: Client,
        rp_settings: Settings, plan: TopicPlan, ledger: Path) -> None:
    agent_id = await agent("example.refund")
    await client.assign_task(agent_id, "t1", {"amount": 12.5, "cooling_off_s": 0})
    await wait_for_events(rp_settings, plan, agent_id, lambda events: any(
        e.type == "wait.started" and e.payload.get("kind") == "approval" for e in events))
    signal_id = f"{agent_id}-approval"
    url = f"{api}/agents/{agent_id}/signals/approved"
    status, _, body = await post(url, {"payload": {"by": "alice"}, "signal_id": signal_id},
                                 AUTH)
    assert status == 202, body
    assert body == {"agent_id": agent_id, "name": "approved", "signal_id": signal_id,
                    "status": "ok", "message": "signal received", "version": body["version"]}
    events = await wait_for_events(rp_settings, plan, agent_id, lambda events: any(
        e.type == "task.completed" for e in events))
    [received] = signals(events)
    assert received.version == body["version"]
    assert received.payload == {"signal_id": signal_id, "name": "approved",
                                "payload_json": canonical_json({"by": "alice"}),
                                "issuer": "http-api"}
    [consumed] = [e for e in events if e.type == "wait.completed"
                  and e.payload.get("kind") == "approval"]
    assert consumed.payload["signal_id"] == signal_id
    [done] = [e for e in events if e.type == "task.completed"]
    assert json.loads(done.payload["output_json"])["refunded"] is True
    refunds = [r for r in evidence.read_lines(ledger / REFUNDS) if r["agent_id"] == agent_id]
    assert len(refunds) == 1

    # The same signal id again (a client retrying): applied once.
    status, _, again = await post(url, {"payload": {"by": "bob"}, "signal_id": signal_id},
                                  AUTH)
    assert status == 202, again
    assert (again["message"], again["signal_id"]) == ("signal already received", signal_id)
    after = await read_stream(rp_settings, plan, agent_id)
    assert [e.payload["signal_id"] for e in signals(after)] == [signal_id]
    assert again["version"] == after[-1].version
    assert len([r for r in evidence.read_lines(ledger / REFUNDS)
                if r["agent_id"] == agent_id]) == 1


async def test_an_oversized_payload_is_413_and_nothing_is_sent(
        api: str, agent: Callable[[str], Awaitable[str]], rp_settings: Settings,
        plan: TopicPlan) -> None:
    agent_id = await agent("test.counter")
    url = f"{api}/agents/{agent_id}/signals/upload"
    # A JSON string's canonical text is the string and its two quotes.
    status, _, body = await post(url, {"payload": "x" * (MAX_SIGNAL_PAYLOAD_BYTES - 1),
                                       "signal_id": "too-big"}, AUTH)
    assert status == 413
    assert f"{MAX_SIGNAL_PAYLOAD_BYTES + 1} bytes" in body["detail"]
    status, _, body = await post(url, {"payload": "x" * (MAX_SIGNAL_PAYLOAD_BYTES - 2),
                                       "signal_id": "at-the-limit"}, AUTH)
    assert status == 202, body
    sent = await signals_sent(rp_settings, plan, agent_id)
    assert [c.payload["signal_id"] for c in sent] == ["at-the-limit"]
    events = await read_stream(rp_settings, plan, agent_id)
    assert [e.payload["signal_id"] for e in signals(events)] == ["at-the-limit"]


async def test_no_owner_answering_is_503_with_retry_after(rp_settings: Settings) -> None:
    """Topics of their own and no runtime manager: the signal is kept for an owner, and the
    problem says so."""
    lonely = rp_settings.with_overrides(topic_prefix=f"rp-lonely-{uuid.uuid4().hex[:8]}.",
                                        request_timeout_s=2.0, api_token=TOKEN)
    async with applied_topics(lonely, partitions=1):
        service = await serving(lonely, "rp_sig_")
        url = f"http://127.0.0.1:{service.port}/agents/anyone/signals/approved"
        try:
            status, headers, body = await post(url, {"signal_id": "retry-me"}, AUTH)
            # A deadline shorter than the server's wait has passed when it answers.
            timed, _, timed_body = await post(f"{url}?deadline=1s", {"signal_id": "timed"},
                                              AUTH)
            bad, _, bad_body = await post(f"{url}?deadline=soon", {"signal_id": "x"}, AUTH)
        finally:
            await service.stop()
    assert status == 503
    assert headers["Retry-After"] == "5"
    assert body["signal_id"] == "retry-me"
    detail = body["detail"]
    assert "the command is kept on ares.commands and will be applied when an owner takes it" \
        in detail
    assert "the same request with signal_id 'retry-me' waits for it again" in detail
    assert timed == 503
    assert ("has passed: an owner that takes it now refuses it and dead-letters it to "
            "ares.dlq (reason expired), it is not applied") in timed_body["detail"]
    assert "waits for it again" not in timed_body["detail"]
    assert bad == 400
    assert bad_body["detail"].startswith("deadline: 'soon' is not a positive duration")


@pytest.mark.timeout(600)
async def test_schemathesis_on_the_write_with_the_token(
        api: str, agent: Callable[[str], Awaitable[str]], tmp_path: Path) -> None:
    """Every answer the write gives is documented: free ids (404 from the owner), then
    pinned to a started agent (202)."""
    options = ("--include-path-regex", "/signals/", "-H", f"Authorization: Bearer {TOKEN}")
    code, out = await schemathesis(api, tmp_path, *options)
    assert code == 0, out[-6000:]
    agent_id = await agent("test.counter")
    code, out = await schemathesis(
        api, tmp_path, *options, config=f'[parameters]\n"path.agent_id" = "{agent_id}"\n')
    assert code == 0, out[-6000:]
    assert "Missing test data" not in out
