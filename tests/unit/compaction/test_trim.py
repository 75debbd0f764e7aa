"""Where a partition may be trimmed, and what holds it back (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ares.compactor.index import PartitionIndex
from ares.compactor.summariser import summarise_events
from ares.compactor.trim import (
    Hold,
    plan_trim,
    stream_limit,
    summarised_through,
)
from ares.events.model import Event
from ares.summaries.record import Summary
from tests.unit.compaction.chains import agent_stream, interleave


@dataclass(frozen=True)
class Snap:
    version: int
    events_offset: int
    state: dict[str, Any] = field(default_factory=dict)


def summaries(stream_id: str, events: list[Event], offsets: dict[tuple[str, int], int],
              *ranges: tuple[int, int]) -> list[Summary]:
    return [summarise_events(stream_id, events[a - 1:b],
                             [offsets[(stream_id, v)] for v in range(a, b + 1)])
            for a, b in ranges]


def two_streams() -> tuple[PartitionIndex, dict[tuple[str, int], int], dict[str, list[Event]]]:
    streams = {"a": agent_stream("a", 40), "b": agent_stream("b", 40)}
    index, offsets = interleave(streams)
    return index, offsets, streams


def test_summarised_through_follows_the_chain_from_the_log_start() -> None:
    _index, offsets, streams = two_streams()
    a = streams["a"]
    s1, s2, s3 = summaries("a", a, offsets, (1, 10), (11, 20), (25, 30))
    assert summarised_through([s2, s1], 1) == 20
    assert summarised_through([s1, s2, s3], 1) == 20  # 21..24 missing: the chain ends
    assert summarised_through([s2], 1) == 0  # does not reach back to version 1
    assert summarised_through([s2], 11) == 20  # versions 1..10 are trimmed already
    assert summarised_through([], 1) == 0
    forged = Summary(s2.stream_id, 11, 20, s2.from_offset, s2.to_offset, "f" * 64,
                     s2.anchor_hash, s2.facts, s2.text)
    assert summarised_through([s1, forged], 1) == 10


def test_a_stream_holds_at_its_first_offset_without_a_snapshot_or_a_summary() -> None:
    index, offsets, _streams = two_streams()
    a = index.streams["a"]
    limit = stream_limit("a", a, None, 20, checkpoint_heads={"a"})
    assert (limit.limit, limit.hold) == (offsets[("a", 1)], Hold.NO_SNAPSHOT)
    limit = stream_limit("a", a, Snap(30, offsets[("a", 30)] + 1), 0, checkpoint_heads={"a"})
    assert (limit.limit, limit.hold) == (offsets[("a", 1)], Hold.NO_SUMMARY)


def test_the_older_of_snapshot_and_summary_decides() -> None:
    index, offsets, _ = two_streams()
    a = index.streams["a"]
    by_summary = stream_limit("a", a, Snap(30, offsets[("a", 30)] + 1), 20,
                              checkpoint_heads={"a"})
    assert (by_summary.limit, by_summary.hold) == (offsets[("a", 21)], Hold.SUMMARY)
    by_snapshot = stream_limit("a", a, Snap(12, offsets[("a", 12)] + 1), 20,
                               checkpoint_heads={"a"})
    assert (by_snapshot.limit, by_snapshot.hold) == (offsets[("a", 13)], Hold.SNAPSHOT)


def test_an_open_journal_and_a_missing_checkpoint_hold_too() -> None:
    index, offsets, _ = two_streams()
    a = index.streams["a"]
    journal = stream_limit("a", a, Snap(30, offsets[("a", 30)] + 1,
                                        {"journal_from": offsets[("a", 8)]}), 20,
                           checkpoint_heads={"a"})
    assert (journal.limit, journal.hold) == (offsets[("a", 8)], Hold.JOURNAL)
    whole = stream_limit("a", a, Snap(40, offsets[("a", 40)] + 1), 40,
                         checkpoint_heads={"a"})
    assert (whole.limit, whole.hold) == (None, Hold.END)
    head = stream_limit("a", a, Snap(40, offsets[("a", 40)] + 1), 40, checkpoint_heads=None)
    assert (head.limit, head.hold) == (offsets[("a", 40)], Hold.HEAD)
    unknown = stream_limit("a", a, Snap(40, offsets[("a", 40)] + 1), 40,
                           checkpoint_heads={"b"})
    assert unknown.hold is Hold.HEAD


def test_a_snapshot_the_log_contradicts_holds_like_none() -> None:
    index, offsets, _ = two_streams()
    a = index.streams["a"]
    ahead = stream_limit("a", a, Snap(41, 999), 20, checkpoint_heads={"a"})
    assert (ahead.limit, ahead.hold) == (offsets[("a", 1)], Hold.SNAPSHOT_MISMATCH)
    elsewhere = stream_limit("a", a, Snap(30, offsets[("a", 30)] + 5), 20,
                             checkpoint_heads={"a"})
    assert elsewhere.hold is Hold.SNAPSHOT_MISMATCH
    anchor_convention = stream_limit("a", a, Snap(30, offsets[("a", 30)]), 20,
                                     checkpoint_heads={"a"})
    assert anchor_convention.hold is Hold.SUMMARY


def test_a_broken_stream_holds_and_a_gone_one_does_not() -> None:
    index, offsets, streams = two_streams()
    index.observe(index.end_offset, streams["a"][5])  # a duplicate of version 6
    a = index.streams["a"]
    assert a.broken is not None
    limit = stream_limit("a", a, Snap(30, offsets[("a", 30)] + 1), 20, checkpoint_heads={"a"})
    assert limit.hold is Hold.BROKEN
    assert stream_limit("gone", None, Snap(5, 3), 5, checkpoint_heads=None).limit is None
    journal = stream_limit("gone", None, Snap(5, 3, {"journal_from": 2}), 5,
                           checkpoint_heads=None)
    assert (journal.limit, journal.hold) == (2, Hold.JOURNAL)


def test_the_partition_trims_to_the_minimum_over_its_streams() -> None:
    index, offsets, _streams = two_streams()
    limits = [stream_limit("a", index.streams["a"], Snap(30, offsets[("a", 30)] + 1), 20,
                           checkpoint_heads={"a", "b"}),
              stream_limit("b", index.streams["b"], Snap(15, offsets[("b", 15)] + 1), 25,
                           checkpoint_heads={"a", "b"})]
    plan = plan_trim(0, 0, index.end_offset, limits, index.end_offset)
    assert plan.safe_point == offsets[("b", 16)]
    assert (plan.held_by, plan.hold) == ("b", Hold.SNAPSHOT)
    assert plan.trimmable == offsets[("b", 16)]
    by_checkpoint = plan_trim(0, 0, index.end_offset, limits, 10)
    assert (by_checkpoint.safe_point, by_checkpoint.hold, by_checkpoint.held_by) == (
        10, Hold.CHECKPOINT, None)
    assert plan_trim(0, 50, index.end_offset, limits, None).safe_point == 50  # never back
    rebalancing = plan_trim(0, 3, index.end_offset, limits, None, rebalancing=True)
    assert (rebalancing.safe_point, rebalancing.hold) == (3, Hold.REBALANCE)
    nothing = plan_trim(0, 0, 7, [], None)
    assert (nothing.safe_point, nothing.hold) == (7, Hold.END)
