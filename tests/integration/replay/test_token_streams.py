"""LLM token streams end to end on the real broker: KafkaTelemetry publishes usage and token
records, GET /agents/{id}/tokens serves them as Server-Sent Events and resumes after a
Last-Event-ID (every delta exactly once, in order, across disconnections), and
`ares agents tail --tokens` prints them."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from ares.config import Settings
from ares.events.kafka.routing import partition_for
from ares.llm.kafka_telemetry import KafkaTelemetry
from ares.llm.telemetry import StreamId, UsageRecord
from ares.llm.tokens import TokenRecord
from ares.topics import TOKENS, USAGE, TopicPlan
from tests.integration.replay.conftest import PARTITIONS, serving
from tests.support.kafka import drain_records
from tests.support.processes import ares_env

WAIT_S = 60  # only against hangs


@pytest.fixture(scope="module")
async def telemetry(rp_settings: Settings, plan: TopicPlan) -> AsyncIterator[KafkaTelemetry]:
    started = KafkaTelemetry(rp_settings, plan)
    await started.start()
    await started.start()  # idempotent
    yield started
    await started.stop()
    await started.stop()


@pytest.fixture(scope="module")
async def api(rp_settings: Settings, plan: TopicPlan) -> AsyncIterator[str]:
    service = await serving(rp_settings, "rp_tok_")
    yield f"http://127.0.0.1:{service.port}"
    await service.stop()


def agent_id() -> str:
    return f"tok-{uuid.uuid4().hex[:8]}"


def neighbour_of(agent: str) -> str:
    """Another agent on the same partition of ares.tokens."""
    home = partition_for(agent, PARTITIONS)
    while True:
        other = agent_id()
        if partition_for(other, PARTITIONS) == home:
            return other


@dataclass(frozen=True)
class Sse:
    id: str | None
    event: str | None
    data: dict[str, Any]


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[Sse]:
    """The events of a text/event-stream response (comments skipped)."""
    fields: dict[str, str] = {}
    while True:
        line = (await response.content.readline()).decode()
        if not line:
            return
        line = line.rstrip("\n")
        if not line:
            if "data" in fields:
                yield Sse(fields.get("id"), fields.get("event"), json.loads(fields["data"]))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


# -- KafkaTelemetry ------------------------------------------------------------------------


async def test_telemetry_publishes_usage_and_a_stream_in_order(
        telemetry: KafkaTelemetry, rp_settings: Settings, plan: TopicPlan) -> None:
    agent = agent_id()
    usage = UsageRecord(tenant=f"tenant-{agent}", agent_id=agent, kind="test.kind",
                        task_id="t-1", name="answer", provider="offline", model="m",
                        prompt_tokens=12, completion_tokens=30, cost_usd=0.0042)
    await telemetry.usage(usage)
    stream = await telemetry.open_stream(StreamId(agent, "t-1", "answer", 0), incarnation=3,
                                         restarted=False)
    for i in range(25):
        await stream.delta(f"w{i} ")
    await stream.end()

    usages = [r for r in await drain_records(rp_settings.kafka_bootstrap, plan.name(USAGE),
                                             partitions=PARTITIONS)
              if r.key == usage.tenant.encode()]
    assert [UsageRecord.from_json(json.loads(r.value)) for r in usages] == [usage]

    tokens = [r for r in await drain_records(rp_settings.kafka_bootstrap, plan.name(TOKENS),
                                             partitions=PARTITIONS,
                                             isolation_level="read_uncommitted")
              if r.key == agent.encode()]
    assert {r.partition for r in tokens} == {partition_for(agent, PARTITIONS)}
    records = [TokenRecord.decode(r.value) for r in tokens]
    assert [r.kind for r in records] == ["start", *["delta"] * 25, "end"]
    assert [r.seq for r in records] == list(range(27))
    assert "".join(r.text for r in records) == "".join(f"w{i} " for i in range(25))
    assert {(r.stream, r.agent_id, r.task_id, r.name, r.occurrence, r.incarnation)
            for r in records} == {("t-1/answer/0", agent, "t-1", "answer", 0, 3)}


async def test_a_failed_stream_ends_with_an_error_record(
        telemetry: KafkaTelemetry, rp_settings: Settings, plan: TopicPlan) -> None:
    agent = agent_id()
    stream = await telemetry.open_stream(StreamId(agent, "t-9", "draft", 1), incarnation=0,
                                         restarted=False)
    await stream.delta("par")
    await stream.end(error="ProviderError: 529 overloaded")
    await stream.end()  # a second end is a no-op
    records = [TokenRecord.decode(r.value) for r in await drain_records(
        rp_settings.kafka_bootstrap, plan.name(TOKENS), partitions=PARTITIONS,
        isolation_level="read_uncommitted") if r.key == agent.encode()]
    assert [(r.kind, r.text) for r in records] == [
        ("start", ""), ("delta", "par"), ("error", "ProviderError: 529 overloaded")]


# -- GET /agents/{id}/tokens ---------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_sse_resumes_after_the_last_event_id_every_delta_once_in_order(
        api: str, telemetry: KafkaTelemetry) -> None:
    """THE acceptance test: 200 deltas published while the client reads, disconnects twice
    and reconnects with Last-Event-ID (the header, then the query parameter); deltas are
    published while it is away and while it is connected; a neighbour agent on the same
    partition streams meanwhile. The client ends with every delta exactly once, in order."""
    agent = agent_id()
    neighbour = neighbour_of(agent)
    gone = [asyncio.Event(), asyncio.Event()]
    away_published = asyncio.Event()

    async def publish() -> None:
        stream = await telemetry.open_stream(StreamId(agent, "t-1", "answer", 0),
                                             incarnation=1, restarted=False)
        other = await telemetry.open_stream(StreamId(neighbour, "t-1", "answer", 0),
                                            incarnation=1, restarted=False)
        for i in range(200):
            if i == 80:
                await gone[0].wait()  # 80-149 go out while the client is away
            if i == 150:
                away_published.set()
                await gone[1].wait()  # 150-199 while it catches up, then live
            await stream.delta(f"d{i} ")
            await other.delta(f"n{i} ")
            if i % 20 == 0:
                await asyncio.sleep(0.01)  # let the reader in between
        await stream.end()
        await other.end()

    received: list[Sse] = []

    async def read(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                   until: int | None) -> None:
        """Read into ``received`` until ``until`` deltas in all, or the stream's END."""
        async with session.get(url, headers=headers) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            async for event in sse_events(response):
                received.append(event)
                if event.event == "end":
                    return
                if until is not None and sum(e.event == "delta" for e in received) >= until:
                    return  # leaving the block closes the connection mid-stream

    publisher = asyncio.create_task(publish())
    try:
        async with asyncio.timeout(WAIT_S * 2), aiohttp.ClientSession() as session:
            url = f"{api}/agents/{agent}/tokens"
            await read(session, url, {}, until=50)
            gone[0].set()
            await away_published.wait()
            await read(session, url, {"Last-Event-ID": received[-1].id or ""}, until=120)
            gone[1].set()
            await read(session, f"{url}?last_event_id={received[-1].id}", {}, until=None)
        await publisher
    finally:
        publisher.cancel()

    deltas = [e for e in received if e.event == "delta"]
    assert [e.data["text"] for e in deltas] == [f"d{i} " for i in range(200)]
    assert [e.event for e in received] == ["start", *["delta"] * 200, "end"]
    assert [e.data["seq"] for e in received] == list(range(202))
    assert [e.data["kind"] for e in received] == [e.event for e in received]
    assert {e.data["agent_id"] for e in received} == {agent}
    offsets = [int(e.id or "-1") for e in received]
    assert offsets == sorted(set(offsets))  # ids: offsets, increasing, none twice


async def test_a_restart_is_its_own_event_and_from_end_skips_the_past(
        api: str, telemetry: KafkaTelemetry) -> None:
    agent = agent_id()
    first = await telemetry.open_stream(StreamId(agent, "t-2", "answer", 0), incarnation=1,
                                        restarted=False)
    await first.delta("Hel")
    await first.delta("lo")  # the worker died here: no END
    await telemetry.flush()  # on the log before the live reader asks where its end is
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{api}/agents/{agent}/tokens?from=end") as live:
            assert (await live.content.readline()) == b": subscribed\n"
            again = await telemetry.open_stream(StreamId(agent, "t-2", "answer", 0),
                                                incarnation=2, restarted=True)
            await again.delta("Hello")
            await again.end()
            async with asyncio.timeout(WAIT_S):
                events = [e async for e in _until_end(live)]
        assert [(e.event, e.data["text"]) for e in events] == [
            ("restarted", ""), ("delta", "Hello"), ("end", "")]
        restarted = events[0].data
        assert (restarted["stream"], restarted["incarnation"], restarted["seq"]) == (
            "t-2/answer/0", 2, 0)

        async with session.get(f"{api}/agents/{agent}/tokens") as everything:
            async with asyncio.timeout(WAIT_S):
                events = [e async for e in _until_end(everything)]
        assert [(e.event, e.data["incarnation"]) for e in events] == [
            ("start", 1), ("delta", 1), ("delta", 1), ("restarted", 2), ("delta", 2),
            ("end", 2)]


async def _until_end(response: aiohttp.ClientResponse) -> AsyncIterator[Sse]:
    async for event in sse_events(response):
        yield event
        if event.event == "end":
            return


@pytest.mark.parametrize(("query", "headers"), [
    ("?from=middle", {}),
    ("?last_event_id=-1", {}),
    ("?last_event_id=x", {}),
    ("", {"Last-Event-ID": "12abc"}),
    ("", {"Last-Event-ID": "9223372036854775807"}),
])
async def test_bad_resume_points_are_400(api: str, query: str,
                                         headers: dict[str, str]) -> None:
    async with aiohttp.ClientSession() as session, \
            session.get(f"{api}/agents/someone/tokens{query}", headers=headers) as response:
        assert response.status == 400
        assert response.headers["Content-Type"].startswith("application/problem+json")


async def test_with_reads_token_the_stream_needs_a_viewers_token(
        rp_settings: Settings, telemetry: KafkaTelemetry) -> None:
    viewer = f"viewer-{uuid.uuid4().hex}"
    service = await serving(rp_settings.with_overrides(api_tokens=f"viewer:{viewer}",
                                                        api_reads="token"), "rp_tok_")
    agent = agent_id()
    stream = await telemetry.open_stream(StreamId(agent, "t-4", "answer", 0), incarnation=1,
                                         restarted=False)
    await stream.end()
    url = f"http://127.0.0.1:{service.port}/agents/{agent}/tokens"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as refused:
                assert refused.status == 401
            async with session.get(url, headers={"Authorization": f"Bearer {viewer}"}) as ok:
                assert ok.status == 200
                async with asyncio.timeout(WAIT_S):
                    assert [e.event async for e in _until_end(ok)] == ["start", "end"]
    finally:
        await service.stop()


async def test_the_endpoint_is_documented(api: str) -> None:
    async with aiohttp.ClientSession() as session, \
            session.get(f"{api}/openapi.json") as response:
        doc = await response.json()
    op = doc["paths"]["/agents/{agent_id}/tokens"]["get"]
    assert {p["name"] for p in op["parameters"]} == {"agent_id", "from", "last_event_id",
                                                     "Last-Event-ID"}
    assert "text/event-stream" in op["responses"]["200"]["content"]


# -- ares agents tail --tokens -------------------------------------------------------------


@pytest.mark.usefixtures("sigint_not_ignored")  # it stops the tail with Ctrl-C
async def test_the_cli_prints_a_stream(telemetry: KafkaTelemetry,
                                       rp_settings: Settings) -> None:
    agent = agent_id()
    first = await telemetry.open_stream(StreamId(agent, "t-3", "answer", 0), incarnation=1,
                                        restarted=False)
    await first.delta("Hel")
    again = await telemetry.open_stream(StreamId(agent, "t-3", "answer", 0), incarnation=2,
                                        restarted=True)
    for text in ("Hello", " world"):
        await again.delta(text)
    await again.end()
    env = ares_env(rp_settings, PARTITIONS)

    lines = await _tail(env, agent, "--json", lines=6, stop=signal.SIGINT)
    records = [TokenRecord.from_json(json.loads(line)) for line in lines]
    assert [(r.kind, r.text) for r in records] == [
        ("start", ""), ("delta", "Hel"), ("restarted", ""), ("delta", "Hello"),
        ("delta", " world"), ("end", "")]

    shown = await _tail(env, agent, lines=3, stop=signal.SIGTERM)
    assert shown == ["Hel",
                    "[restarted: t-3/answer/0 — previous partial text void]",
                    "Hello world"]


async def _tail(env: dict[str, str], agent: str, *flags: str, lines: int,
                stop: signal.Signals) -> list[str]:
    """Run `ares agents tail AGENT --tokens`, read ``lines`` lines, stop it with ``stop``:
    it must exit 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ares", "agents", "tail", agent, "--tokens", *flags, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(WAIT_S):
            got = [(await proc.stdout.readline()).decode().rstrip("\n") for _ in range(lines)]
        proc.send_signal(stop)
        async with asyncio.timeout(WAIT_S):
            # Both pipes read while it exits: a full stderr pipe would block it for ever.
            _, stderr = await proc.communicate()
            code = proc.returncode
            errors = stderr.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0, errors
    assert "Traceback" not in errors, errors
    return got
