"""What a pass writes for a partition: new summaries, merges, refreshes, expiries."""

from __future__ import annotations

from ares.compactor.compactor import Compactor, _Partition
from ares.compactor.config import DAY_S, CompactionConfig
from ares.compactor.summariser import summarise_events
from ares.config import Settings
from ares.events.kafka.snapshots import Snapshot
from ares.summaries.store import PartitionSummaries
from ares.topics import load_topics
from tests.unit.compaction.chains import agent_stream, interleave

NOW = 1_800_000_000.0


def compactor(**config: object) -> Compactor:
    settings = Settings()
    return Compactor(settings, load_topics(settings),
                     CompactionConfig(**config),  # type: ignore[arg-type]
                     clock=lambda: NOW)


def partition(streams: dict[str, int], summaries: PartitionSummaries | None = None,
              snapshots: dict[str, Snapshot] | None = None) -> _Partition:
    index, _ = interleave({s: agent_stream(s, n) for s, n in streams.items()})
    return _Partition(index, summaries or PartitionSummaries(0), snapshots or {}, None, 0)


def test_streams_past_the_threshold_get_one_summary_of_all_but_the_recent() -> None:
    state = partition({"a": 60, "b": 30})
    puts, deletes, counts = compactor(threshold=40, keep_recent=10)._summarise(state)
    assert [(s.stream_id, s.from_version, s.to_version) for s in puts] == [("a", 1, 50)]
    assert deletes == []
    assert counts.written == 1


def test_the_next_summary_starts_after_the_last() -> None:
    events = agent_stream("a", 100)
    stored = PartitionSummaries(0)
    stored.put(summarise_events("a", events[:50]), int(NOW * 1000))
    index, _offsets = interleave({"a": events})
    state = _Partition(index, stored, {}, None, 0)
    puts, _, _ = compactor(threshold=40, keep_recent=5)._summarise(state)
    assert [(s.from_version, s.to_version) for s in puts] == [(51, 95)]
    assert puts[0].prev_hash == events[49].hash


def test_above_the_cap_the_oldest_summaries_are_merged_and_deleted() -> None:
    events = agent_stream("a", 100)
    index, offsets = interleave({"a": events})
    stored = PartitionSummaries(0)
    for lo in (0, 20, 40):
        stored.put(summarise_events("a", events[lo:lo + 20],
                                    [offsets[("a", v)] for v in range(lo + 1, lo + 21)]),
                   int(NOW * 1000))
    state = _Partition(index, stored, {}, None, 0)
    puts, deletes, counts = compactor(threshold=30, keep_recent=5,
                                      max_summaries_per_stream=2)._summarise(state)
    # The new summary (61..95) and the three stored ones make four: the three oldest merge.
    assert sorted((s.from_version, s.to_version) for s in puts) == [(1, 60), (61, 95)]
    assert sorted(deletes) == ["a:1-20", "a:21-40", "a:41-60"]
    assert (counts.written, counts.merged) == (2, 3)


def test_old_summaries_are_rewritten_while_their_stream_exists_and_expire_after() -> None:
    events = agent_stream("gone", 20)
    old_ms = int((NOW - 20 * DAY_S) * 1000)
    very_old_ms = int((NOW - 40 * DAY_S) * 1000)
    stored = PartitionSummaries(0)
    stored.put(summarise_events("a", agent_stream("a", 20)[:10]), old_ms)
    stored.put(summarise_events("gone", events[:10]), very_old_ms)
    stored.put(summarise_events("recent-gone", events[:10]), old_ms)
    state = partition({"a": 20}, stored)
    puts, deletes, counts = compactor(threshold=40, keep_recent=10)._summarise(state)
    assert [s.key for s in puts] == ["a:1-10"]  # 20 days > TTL/2: rewritten
    assert deletes == ["gone:1-10"]  # gone from the log for 40 days > TTL
    assert (counts.refreshed, counts.expired) == (1, 1)
