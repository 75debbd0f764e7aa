"""Reads of trimmed ranges: summaries in place of the events, and the audit's check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ares.compactor.summariser import summarise_events
from ares.events.chain import ChainError
from ares.events.model import Direction, StreamHead
from ares.summaries.reader import anchor_matches, anchor_of, verify_summarised, with_summaries
from ares.summaries.record import SYNTHETIC_TYPE, Summary
from tests.unit.compaction.chains import agent_stream

EVENTS = agent_stream("a", 60)
S1 = summarise_events("a", EVENTS[:20])
S2 = summarise_events("a", EVENTS[20:40], range(20, 40))


def kinds(items: list) -> list[tuple[str, int]]:  # type: ignore[type-arg]
    return [(e.type, e.version) for e in items]


def test_trimmed_versions_come_back_as_summaries_then_the_raw_events() -> None:
    items = with_summaries(EVENTS[40:], [S2, S1])
    assert kinds(items)[:3] == [(SYNTHETIC_TYPE, 20), (SYNTHETIC_TYPE, 40),
                                ("task.assigned", 41) if EVENTS[40].type == "task.assigned"
                                else (EVENTS[40].type, 41)]
    assert len(items) == 22
    assert verify_summarised(items) == StreamHead(60, EVENTS[-1].hash)


def test_nothing_trimmed_means_no_summary() -> None:
    assert with_summaries(EVENTS, [S1, S2]) == EVENTS


def test_from_version_limit_and_direction_select_like_a_store_read() -> None:
    forward = with_summaries(EVENTS[40:], [S1, S2], from_version=25, limit=3)
    assert [e.version for e in forward] == [40, 41, 42]
    backward = with_summaries(EVENTS[40:], [S1, S2], from_version=45,
                              direction=Direction.BACKWARD)
    assert [e.version for e in backward][:2] == [45, 44]
    assert backward[-2:] == [S2.to_event(), S1.to_event()]
    assert with_summaries([], [S1, S2]) == [S1.to_event(), S2.to_event()]


def test_a_summary_may_overlap_the_raw_events_and_must_match_them() -> None:
    items = with_summaries(EVENTS[30:], [S1, S2])  # trimmed only up to version 30
    assert kinds(items)[:3] == [(SYNTHETIC_TYPE, 20), (SYNTHETIC_TYPE, 40),
                                (EVENTS[30].type, 31)]
    assert verify_summarised(items) == StreamHead(60, EVENTS[-1].hash)
    forged = replace(EVENTS[39], hash="e" * 64)
    with pytest.raises(ChainError) as caught:
        verify_summarised([S1.to_event(), S2.to_event(), *EVENTS[30:39], forged])
    assert caught.value.kind in ("hash_mismatch", "anchor_mismatch")


def test_a_missing_summary_is_a_truncation() -> None:
    with pytest.raises(ChainError) as caught:
        verify_summarised(with_summaries(EVENTS[40:], [S1]))
    assert (caught.value.kind, caught.value.version) == ("truncated", 21)
    with pytest.raises(ChainError) as caught:
        verify_summarised(EVENTS[40:])
    assert (caught.value.kind, caught.value.version) == ("truncated", 1)


def test_a_summary_that_does_not_continue_the_chain_is_caught() -> None:
    wrong_anchor = replace(S2, anchor_hash="a" * 64)
    with pytest.raises(ChainError) as caught:
        verify_summarised(with_summaries(EVENTS[40:], [S1, wrong_anchor]))
    assert (caught.value.kind, caught.value.version) == ("prev_hash_mismatch", 41)
    wrong_link: Summary = replace(S2, prev_hash="b" * 64)
    with pytest.raises(ChainError) as caught:
        verify_summarised(with_summaries(EVENTS[40:], [S1, wrong_link]))
    assert (caught.value.kind, caught.value.version) == ("prev_hash_mismatch", 21)
    tampered = replace(EVENTS[45], payload={"forged": True})
    with pytest.raises(ChainError) as caught:
        verify_summarised([S1.to_event(), S2.to_event(), *EVENTS[40:45], tampered])
    assert caught.value.kind == "hash_mismatch"


def test_anchor_matches_the_event_at_or_after_the_range() -> None:
    assert anchor_matches(S2, EVENTS[39])
    assert anchor_matches(S2, EVENTS[40])
    assert not anchor_matches(S2, EVENTS[41])
    assert not anchor_matches(S1, EVENTS[39])


def test_the_replay_readers_audit_accepts_summaries_ending_where_the_log_begins() -> None:
    from ares.replay_reader.source import anchor_for

    anchors = [anchor_of(S1), anchor_of(S2)]
    assert anchor_for(anchors, EVENTS[40]) == anchors[1]
    assert anchor_for(anchors[:1], EVENTS[40]) is None  # 21..40 unaccounted for
