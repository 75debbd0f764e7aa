"""ReplaySession over sealed streams: the events and folded states, step by step."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ares.agents.registry import AgentRegistry, build_registry
from ares.events.model import Event
from ares.events.ports import SummaryAnchor
from ares.examples.chat import ChatAgent
from ares.lifecycle import state as lc
from ares.replay_reader.session import NoSuchStreamError, ReplaySession
from ares.replay_reader.source import MemorySource
from tests.unit.runtime.streams import Stream, at


def chat_stream(turns: int = 3, stream_id: str = "chat-1") -> Stream:
    s = Stream(stream_id)
    s.add("agent.started", {"kind": "example.chat", "config_json": "{}", "incarnation": 1,
                            "worker": "w1"}, at_s=0)
    for i in range(turns):
        t = 10 * (i + 1)
        s.add("task.assigned", {"task_id": f"t{i}", "input_json": json.dumps(
            {"message": f"q{i}"})}, at_s=t)
        s.add("llm.call", {"task_id": f"t{i}", "name": "answer", "occurrence": 0,
                           "model": "m", "prompt_hash": "h", "output": "{}",
                           "prompt_tokens": 10, "completion_tokens": 5}, at_s=t + 1)
        s.add("task.completed", {"task_id": f"t{i}", "output_json": json.dumps(
            {"answer": f"a{i}"})}, at_s=t + 2)
    return s


def expected_states(events: list[Event]) -> list[tuple[dict[str, object], dict[str, object]]]:
    """What the runtime folds: lifecycle by lc.fold, the agent by apply (recovery order)."""
    state = lc.AgentLifecycle(events[0].stream_id)
    agent = ChatAgent(events[0].stream_id, {})
    out = []
    for event in events:
        state = lc.fold(state, event)
        agent.apply(event)
        out.append((state.to_json(), agent.snapshot()))
    return out


async def open_session(events: list[Event], **options: object) -> ReplaySession:
    return await ReplaySession.open(MemorySource(events), events[0].stream_id,
                                    registry=build_registry(entry_points=False), **options)


async def test_step_by_step_yields_every_event_and_the_runtime_s_state() -> None:
    events = chat_stream().events
    session = await open_session(events)
    expected = expected_states(events)
    seen = []
    while (step := await session.step()) is not None:
        seen.append(step)
    assert [s.event for s in seen] == events
    assert [s.step for s in seen] == list(range(1, len(events) + 1))
    for step, (life, agent) in zip(seen, expected, strict=True):
        assert step.state.lifecycle.to_json() == life
        assert step.state.agent == agent
        assert step.failure is None
    assert seen[-1].state.agent == {"history": [{"user": f"q{i}", "assistant": f"a{i}"}
                                                for i in range(3)], "pending": {}}
    assert await session.step() is None  # the end: the position stays
    assert session.position == len(events)


@pytest.mark.parametrize(("page_size", "cached"), [(1000, 64), (2, 1), (3, 2)])
async def test_jump_back_and_reset_give_the_same_states(page_size: int, cached: int) -> None:
    events = chat_stream(5).events
    expected = expected_states(events)
    session = await open_session(events, page_size=page_size, cached_pages=cached)
    step = await session.step_to(7)
    assert step is not None
    assert step.event == events[6]
    assert step.state.agent == expected[6][1]
    back = await session.back()
    assert back is not None
    assert back.event == events[5]
    assert back.state.lifecycle.to_json() == expected[5][0]
    assert (await session.step_to(len(events) + 10)).event == events[-1]  # type: ignore[union-attr]
    assert session.total == len(events)
    session.reset()
    assert session.position == 0
    assert session.state.version == 0
    assert await session.step_to(0) is None
    assert (await session.step()).event == events[0]  # type: ignore[union-attr]


async def test_state_as_of_a_version_and_a_time() -> None:
    stream = chat_stream()
    source = MemorySource(stream.events)
    session = await ReplaySession.open(source, "chat-1", registry=build_registry())
    assert await source.version_at("chat-1", at(20.5)) == 5  # t1 assigned at 20s
    step = await session.to_version(await source.version_at("chat-1", at(20.5)))
    assert step is not None
    assert step.event.version == 5
    assert step.state.lifecycle.pending_tasks[0].task_id == "t1"
    assert await source.version_at("chat-1", at(-1)) == 0
    assert await session.to_version(0) is None


async def test_summary_counts_types_modules_tokens_and_time_span() -> None:
    events = chat_stream(4).events
    session = await open_session(events)
    await session.step_to(3)
    summary = (await session.summary()).to_json()
    assert session.position == 3  # a summary does not move the replay
    assert summary["total_steps"] == len(events) == summary["last_version"]
    assert summary["types"] == {"task.assigned": 4, "llm.call": 4, "task.completed": 4,
                                "agent.started": 1}
    assert summary["modules"] == {"tests": len(events)}
    assert summary["duration_s"] == 42.0
    assert summary["agents"] == ["chat-1"]
    assert summary["workers"] == ["w1"]
    assert summary["tasks"] == 4
    assert summary["incarnations"] == 1
    assert summary["tokens"]["spent_tokens"] == 60
    assert summary["tokens"]["calls"] == 4
    assert summary["intact"] is True


async def test_a_tampered_event_is_flagged_at_its_step_and_after() -> None:
    events = chat_stream().events
    tampered = [*events]
    tampered[4] = replace(events[4], payload={**events[4].payload, "prompt_tokens": 9999})
    session = await open_session(tampered)
    assert (await session.step_to(4)).failure is None  # type: ignore[union-attr]
    step = await session.step()
    assert step is not None
    assert step.failure is not None
    assert (step.failure.version, step.failure.kind) == (5, "hash_mismatch")
    assert (await session.summary()).failure is not None


async def test_an_unregistered_kind_folds_the_lifecycle_alone() -> None:
    s = Stream("x-1")
    s.add("agent.started", {"kind": "team.secret", "config_json": "{}", "incarnation": 1})
    s.add("task.assigned", {"task_id": "t", "input_json": "1"})
    session = await ReplaySession.open(MemorySource(s.events), "x-1", registry=AgentRegistry())
    step = await session.step_to(2)
    assert step is not None
    assert step.state.agent is None
    assert "not registered" in (step.state.agent_note or "")
    assert step.state.lifecycle.kind == "team.secret"
    assert step.state.lifecycle.pending_tasks[0].task_id == "t"


async def test_a_trimmed_stream_starts_at_its_anchored_summary() -> None:
    events = chat_stream().events
    kept = events[4:]

    class Summaries:
        async def summaries(self, stream_id: str) -> list[SummaryAnchor]:
            return [SummaryAnchor(stream_id, 1, 4, events[3].hash, events[0].prev_hash)]

    session = await ReplaySession.open(MemorySource(kept), "chat-1", summaries=Summaries())
    assert session.anchor is not None
    step = await session.step()
    assert step is not None
    assert step.event.version == 5
    assert step.failure is None
    unanchored = await ReplaySession.open(MemorySource(kept), "chat-1")
    first = await unanchored.step()
    assert first is not None
    assert first.failure is not None
    assert first.failure.kind == "gap"


async def test_an_unknown_stream_is_an_error() -> None:
    with pytest.raises(NoSuchStreamError):
        await ReplaySession.open(MemorySource([]), "nobody")
