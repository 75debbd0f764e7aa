"""`ares replay` on the real broker: step by step, --to, --at, --summary, index or not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from ares.config import Settings
from ares.events.model import Event
from ares.examples.chat import ChatAgent
from ares.lifecycle import state as lc
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projector import Projector
from ares.replay_reader.session import ReplaySession
from ares.replay_reader.wiring import Topics, open_reader
from ares.topics import TopicPlan
from tests.integration.replay.conftest import chat_events, env_of, write_streams
from tests.support.processes import ares
from tests.support.runtime import read_stream

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TURNS = 5
DOWN_DSN = "postgresql://ares:ares@127.0.0.1:1/ares"  # nothing listens on port 1


@pytest.fixture(scope="module")
async def streams(rp_settings: Settings, plan: TopicPlan) -> AsyncIterator[dict[str, str]]:
    """chat-* streams whose event i is stamped T0 + 10 s * i, among unrelated streams."""
    stamps = [T0 + timedelta(seconds=10 * i) for i in range(1 + 3 * TURNS)]
    names = {"a": "chat-a", "b": "chat-b"}
    await write_streams(rp_settings, plan, {
        names["a"]: chat_events(TURNS, stamps), names["b"]: chat_events(2),
        **{f"noise-{i}": chat_events(3) for i in range(6)}})
    return names


def expected_states(events: list[Event]) -> list[dict[str, object]]:
    life, agent, out = lc.AgentLifecycle(events[0].stream_id), ChatAgent("x", {}), []
    for event in events:
        life = lc.fold(life, event)
        agent.apply(event)
        out.append({"version": event.version, "lifecycle": life.to_json(),
                    "agent": agent.snapshot(), "agent_note": None})
    return out


async def projected(settings: Settings, schema: str) -> None:
    topics = Topics.of(settings)
    store = ProjectionStore(settings.postgres_dsn, schema, events_topic=topics.events)
    try:
        await Projector(settings, store, topics.events, topics.alerts).run(until_caught_up=True)
    finally:
        await store.close()


@pytest.mark.parametrize("index", ["projected", "postgres-down"])
async def test_to_n_and_steps_give_the_events_and_folded_states(
        rp_settings: Settings, plan: TopicPlan, streams: dict[str, str], schema: str,
        index: str) -> None:
    env = env_of(rp_settings, schema)
    if index == "projected":
        await projected(rp_settings, schema)
    else:
        env["ARES_POSTGRES_DSN"] = DOWN_DSN
    events = await read_stream(rp_settings, plan, streams["a"])
    expected = expected_states(events)

    done = ares("replay", streams["a"], "--to", "6", "--json", env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["step"], doc["version"], doc["head_version"]) == (6, 6, len(events))
    assert doc["event"] == json.loads(json.dumps(events[5].to_json()))
    assert doc["state"] == expected[5]
    assert doc["integrity"] is None
    if index == "postgres-down":
        assert "scanning" in done.stderr  # the reader says it fell back

    lines = ares("replay", streams["a"], "--steps", env=env)
    assert lines.returncode == 0, lines.stderr
    steps = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [s["event"]["id"] for s in steps] == [e.id for e in events]
    assert [s["state"] for s in steps] == expected


@pytest.mark.parametrize("index", [True, False])
async def test_at_a_time_gives_the_state_as_of_that_time(
        rp_settings: Settings, plan: TopicPlan, streams: dict[str, str], schema: str,
        index: bool) -> None:
    env = env_of(rp_settings, schema)
    if index:
        await projected(rp_settings, schema)
    flags = () if index else ("--no-index",)
    expected = expected_states(await read_stream(rp_settings, plan, streams["a"]))
    for at, version in (("2026-01-01T12:00:25Z", 3), ("2026-01-01T12:00:30+00:00", 4),
                        ("2026-01-01T13:00:00", 16)):
        done = ares("replay", streams["a"], "--at", at, "--json", *flags, env=env)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["version"] == version, at
        assert doc["state"] == expected[version - 1]
    before = json.loads(ares("replay", streams["a"], "--at", "2025-12-31T00:00:00Z",
                             "--json", *flags, env=env).stdout)
    assert (before["step"], before["event"]) == (0, None)


async def test_summary_and_usage_errors(rp_settings: Settings, streams: dict[str, str],
                                        schema: str) -> None:
    env = env_of(rp_settings, schema)
    done = ares("replay", streams["a"], "--summary", "--json", env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["total_steps"] == 1 + 3 * TURNS
    assert summary["duration_s"] == 10.0 * 3 * TURNS
    assert summary["types"]["llm.call"] == TURNS
    assert summary["modules"] == {"runtime-manager": 1 + TURNS, "agent.example.chat": 2 * TURNS}
    assert summary["tokens"]["spent_tokens"] == 18 * TURNS
    assert summary["intact"] is True
    human = ares("replay", streams["a"], "--summary", env=env)
    assert "intact" in human.stdout

    assert ares("replay", "nobody-here", "--to", "1", "--json", env=env).returncode == 1
    past = ares("replay", streams["b"], "--to", "99", "--json", env=env)
    assert past.returncode == 2
    assert json.loads(past.stdout)["version"] == 7
    assert ares("replay", streams["a"], env=env).returncode == 2  # no terminal, no mode
    assert ares("replay", streams["a"], "--at", "yesterday", env=env).returncode == 2


async def test_reads_seek_through_the_index_and_agree_with_scans(
        rp_settings: Settings, streams: dict[str, str], schema: str) -> None:
    await projected(rp_settings, schema)
    topics = Topics.of(rp_settings)
    async with open_reader(rp_settings, topics, schema=schema) as indexed, \
            open_reader(rp_settings, topics, use_index=False) as scanning:
        for name in (streams["a"], streams["b"], "noise-3"):
            a = await ReplaySession.open(indexed, name, page_size=4)
            b = await ReplaySession.open(scanning, name, page_size=4)
            assert [s.event async for s in a.steps()] == [s.event async for s in b.steps()]
        assert indexed.index_reads > 0
        assert indexed.fallbacks == 0
        assert await indexed.head(streams["a"]) == await scanning.head(streams["a"]) == 16
