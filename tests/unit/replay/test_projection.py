"""What the projector writes: agents folded like the host, index rows, genealogy."""

from __future__ import annotations

import json

from ares.events.ports import IndexEntry
from ares.lifecycle import state as lc
from ares.lifecycle.genealogy import genealogy
from ares.replay_reader.kafka_source import clusters
from ares.replay_reader.migrations import checkout_dir, load_migrations, packaged_dir
from ares.replay_reader.projection import (
    AGENT_COLUMNS,
    AgentRow,
    Located,
    genealogy_rows,
    lifecycle_event,
    project,
)
from tests.unit.runtime.streams import Stream


def agent_stream(stream_id: str = "a-1") -> Stream:
    s = Stream(stream_id)
    s.add("agent.started", {"kind": "k", "config_json": "{}", "incarnation": 1, "worker": "w"})
    s.add("task.assigned", {"task_id": "t1", "input_json": "1"}, at_s=1)
    s.add("llm.call", {"task_id": "t1", "name": "n", "occurrence": 0, "model": "m",
                       "prompt_hash": "h", "output": "x", "prompt_tokens": 3,
                       "completion_tokens": 4}, at_s=2)
    s.add("agent.dead", {"cause": "crashed", "incarnation": 1}, at_s=3)
    s.add("agent.resurrecting", {"incarnation": 2, "parent_incarnation": 1, "attempt": 1,
                                 "backoff_ms": 10}, at_s=4)
    s.add("agent.resurrected", {"incarnation": 2, "parent_incarnation": 1,
                                "replayed_events": 4, "recovery_ms": 5}, at_s=5)
    s.add("task.resumed", {"task_id": "t1", "reused_llm_calls": 1, "reused_prompt_tokens": 3,
                           "reused_completion_tokens": 4}, at_s=6)
    s.add("task.completed", {"task_id": "t1", "output_json": "2"}, at_s=7)
    return s


def located(events: list, partition: int = 0) -> list[Located]:  # type: ignore[type-arg]
    return [Located(partition, i, e) for i, e in enumerate(events)]


def test_an_agent_row_is_the_lifecycle_fold_plus_counters_in_any_batching() -> None:
    events = agent_stream().events
    whole = project(located(events), {}).agents["a-1"]
    assert whole.lifecycle == lc.from_events(events)
    first = project(located(events[:3]), {}).agents["a-1"]
    split = project(located(events[3:]), {"a-1": first}).agents["a-1"]
    assert split == whole
    doc = whole.to_json()
    assert doc["status"] == "running"
    assert doc["incarnation"] == 2
    assert (doc["deaths"], doc["resurrections"]) == (1, 1)
    assert doc["tokens"] == {"llm_calls": 1, "prompt": 3, "completion": 4, "spent": 7,
                             "reused": 7, "resumes": 1}
    assert doc["tasks"] == {"assigned": 1, "completed": 1, "failed": 0, "pending": 0}
    stored = dict(zip(AGENT_COLUMNS, whole.record(), strict=True))
    assert AgentRow.from_record(stored) == whole


def test_every_event_is_indexed_but_only_agent_streams_get_an_agent_row() -> None:
    plain = Stream("plain")
    plain.add("note", {"x": 1})
    events = [*agent_stream().events, *plain.events]
    rows = project(located(events, partition=2), {})
    assert set(rows.agents) == {"a-1"}
    assert [(r[0], r[1], r[2], r[3]) for r in rows.index] == [
        (e.stream_id, e.version, 2, i) for i, e in enumerate(events)]
    assert {r[0]: r[2] for r in rows.streams} == {"a-1": 8, "plain": 1}
    assert [r[3] for r in rows.lifecycle] == ["agent.started", "agent.dead",
                                              "agent.resurrecting", "agent.resurrected"]
    assert rows.genealogy_agents == ["a-1"]


def test_genealogy_from_stored_lifecycle_rows_matches_the_runtime_s() -> None:
    events = agent_stream().events
    rows = project(located(events), {})
    stored = [dict(zip(("agent_id", "version", "event_id", "event_type", "ts", "payload",
                        "metadata"), r, strict=True)) for r in rows.lifecycle]
    from_rows = genealogy([lifecycle_event(r) for r in stored])
    direct = genealogy(events)
    assert [i.number for i in from_rows] == [i.number for i in direct] == [1, 2]
    assert [i.end for i in from_rows] == [i.end for i in direct]
    assert from_rows[1].attempts == direct[1].attempts == 1
    records = genealogy_rows("a-1", from_rows)
    assert [r[1] for r in records] == [0, 1]
    assert json.loads(records[1][13]) == [10]


def test_index_entries_close_together_are_read_as_one_range() -> None:
    entries = [IndexEntry(v, 0, o) for v, o in enumerate([5, 6, 100, 900, 901, 5000], 1)]
    assert [[e.offset for e in g] for g in clusters(entries, gap=200)] == [
        [5, 6, 100], [900, 901], [5000]]
    assert clusters([]) == []


def test_the_packaged_migrations_are_the_checkout_s() -> None:
    checkout, packaged = load_migrations(checkout_dir()), load_migrations(packaged_dir())
    assert checkout == packaged
    assert [m.version for m in checkout] == list(range(1, len(checkout) + 1))
