"""The rule-based summariser: facts, text, determinism, merges."""

from __future__ import annotations

import pytest

from ares.compactor.summariser import (
    EventFact,
    format_span,
    merge,
    merge_oldest,
    summarise,
    summarise_events,
    user_request,
)
from ares.events.model import GENESIS_HASH, NewEvent, StreamHead
from ares.summaries.record import SYNTHETIC_TYPE, Summary, parse_summary_key
from tests.unit.compaction.chains import agent_stream, facts, sealed


def test_a_summary_counts_tasks_tools_llm_calls_and_binds_the_request() -> None:
    events = agent_stream("agent-1", 1 + 6 * 3 + 2)  # started, 3 tasks, 2 heartbeats
    summary = summarise_events("agent-1", events)
    f = summary.facts
    assert (summary.from_version, summary.to_version) == (1, 21)
    assert f.event_count == 21
    assert f.tasks == ("agent-1-task-0", "agent-1-task-1", "agent-1-task-2")
    assert f.tasks_completed == 3
    assert f.tool_calls == {"search": 2, "send_email": 1}
    assert (f.llm_calls, f.prompt_tokens, f.completion_tokens) == (3, 300, 60)
    assert f.request == "Plan trip 0 for agent-1"
    assert f.outcome == "completed"
    assert summary.text == (
        "Agent agent-1 ran 3 task(s) [agent-1-task-0, agent-1-task-1, agent-1-task-2], "
        "called 3 tool(s) [search x2, send_email], made 3 LLM call(s) (360 tokens), "
        'emitted 21 events over 20s, bound to user request: "Plan trip 0 for agent-1", '
        "result: completed")


def test_the_summary_is_anchored_to_the_chain_it_replaces() -> None:
    events = agent_stream("a", 30)
    summary = summarise_events("a", events[10:20], range(10, 20))
    assert summary.prev_hash == events[9].hash
    assert summary.anchor_hash == events[19].hash
    assert (summary.from_offset, summary.to_offset) == (10, 19)
    first = summarise_events("a", events[:10])
    assert first.prev_hash == GENESIS_HASH


def test_the_same_events_give_the_same_record_and_it_round_trips() -> None:
    events = agent_stream("a", 40)
    one, two = summarise_events("a", events), summarise_events("a", events)
    assert one.encode() == two.encode()
    assert Summary.decode(one.encode()) == one
    assert parse_summary_key(one.key) == ("a", 1, 40)
    assert parse_summary_key("__trim__:3:100") is None
    assert parse_summary_key("odd:stream:id:2-9") == ("odd:stream:id", 2, 9)


def test_outcomes_follow_the_end_of_the_range() -> None:
    events = agent_stream("a", 1 + 6 + 3)  # a task, then 3 heartbeats
    assert summarise_events("a", events[:3]).outcome == "in_progress"
    assert summarise_events("a", events[3:5]).outcome == "in_progress"  # mid-task work
    assert summarise_events("a", events[7:]).outcome == "idle"
    tail = sealed("a", [NewEvent("task.assigned", "t", {"task_id": "x"}),
                        NewEvent("task.failed", "t", {"task_id": "x", "error_message": "e"}),
                        NewEvent("agent.dead", "t", {"cause": "crash"})],
                  StreamHead(events[-1].version, events[-1].hash))
    assert summarise_events("a", tail[:2]).outcome == "failed"
    assert summarise_events("a", tail).outcome == "dead"
    assert summarise_events("a", tail).facts.deaths == 1
    stopped = sealed("a", [NewEvent("agent.stopped", "t", {"reason": "requested"})],
                     StreamHead(tail[-1].version, tail[-1].hash))
    assert summarise_events("a", [*tail, *stopped]).outcome == "stopped"


def test_a_tool_outcome_whose_intent_is_before_the_range_still_counts() -> None:
    events = agent_stream("a", 1 + 6)
    summary = summarise_events("a", events[4:])  # from tool.call.completed on
    assert summary.facts.tool_calls == {"send_email": 1}


def test_facts_must_be_consecutive_links_of_one_chain() -> None:
    events = agent_stream("a", 10)
    with pytest.raises(ValueError, match="does not follow"):
        summarise("a", [*facts(events[:3]), *facts(events[4:6], 4)])
    with pytest.raises(ValueError, match="nothing"):
        summarise("a", [])


def test_merging_adjacent_summaries_equals_summarising_the_whole_range() -> None:
    events = agent_stream("a", 1 + 6 * 10)
    cut = 1 + 6 * 4  # a task boundary
    first = summarise_events("a", events[:cut])
    second = summarise_events("a", events[cut:], range(cut, len(events)))
    merged = merge(first, second)
    whole = summarise_events("a", events)
    assert merged == whole
    with pytest.raises(ValueError, match="adjacent"):
        merge(second, first)


def test_merge_oldest_keeps_the_recent_summaries_apart() -> None:
    events = agent_stream("a", 50)
    parts = [summarise_events("a", events[i:i + 10], range(i, i + 10))
             for i in range(0, 50, 10)]
    kept, replaced = merge_oldest(parts, 3)
    assert [(s.from_version, s.to_version) for s in kept] == [(1, 30), (31, 40), (41, 50)]
    assert {s.key for s in replaced} >= {parts[0].key, parts[1].key, parts[2].key}
    assert kept[0].anchor_hash == events[29].hash
    assert merge_oldest(parts, 10) == (parts, [])


def test_the_synthetic_event_carries_text_count_outcome_range_and_anchor() -> None:
    events = agent_stream("a", 20)
    event = summarise_events("a", events).to_event()
    assert event.type == SYNTHETIC_TYPE
    assert event.version == 20
    assert event.hash == events[-1].hash
    assert event.payload["event_count"] == 20
    assert event.payload["anchor_hash"] == events[-1].hash
    assert (event.payload["from_version"], event.payload["to_version"]) == (1, 20)
    assert event.payload["summary_text"].startswith("Agent a ran 3 task(s)")
    assert event.payload["outcome"] == "completed"


@pytest.mark.parametrize(("seconds", "text"), [
    (0.25, "250ms"), (5, "5s"), (192, "3m12s"), (7500, "2h05m"), (97_200, "1d03h")])
def test_spans_read_like_durations(seconds: float, text: str) -> None:
    assert format_span(seconds) == text


@pytest.mark.parametrize(("input_json", "expected"), [
    ('{"request": "Plan a trip to Tokyo"}', "Plan a trip to Tokyo"),
    ('{"prompt": "  many\\n  lines  "}', "many lines"),
    ('"just text"', "just text"),
    ('{"steps": 3}', None), ("null", None), ("not json", None), (None, None)])
def test_the_user_request_comes_from_the_task_input(input_json: str | None,
                                                    expected: str | None) -> None:
    assert user_request(input_json) == expected


def test_long_requests_and_lists_are_cut() -> None:
    assert len(user_request('"' + "x" * 500 + '"') or "") == 120
    events = agent_stream("a", 1 + 6 * 8)
    summary = summarise_events("a", events)
    assert "ran 8 task(s) [a-task-0, a-task-1, a-task-2, a-task-3, a-task-4, +3 more]" \
        in summary.text


def test_event_fact_keeps_only_what_a_summary_reads() -> None:
    events = agent_stream("a", 7)
    fact = EventFact.of(events[1], 7)
    assert (fact.version, fact.offset, fact.type, fact.task_id) == (2, 7, "task.assigned",
                                                                     "a-task-0")
    assert fact.request == "Plan trip 0 for a"
