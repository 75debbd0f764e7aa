"""StreamAudit: each kind of damage is found, at the right version, and nothing else."""

from __future__ import annotations

from dataclasses import replace

from ares.events.model import Event
from ares.events.ports import SummaryAnchor
from ares.replay_reader.audit import AuditReport, KnownHead, StreamAudit
from tests.unit.runtime.streams import Stream


def stream(n: int = 8, stream_id: str = "s-1") -> list[Event]:
    s = Stream(stream_id)
    for i in range(n):
        s.add("step.done", {"i": i}, at_s=i)
    return s.events


def audit(events: list[Event], known: list[KnownHead] = (),  # type: ignore[assignment]
          summaries: list[SummaryAnchor] = (), *, batch: bool = False,  # type: ignore[assignment]
          ) -> list[tuple[int, str]]:
    a = StreamAudit("s-1", watch=[k.version for k in known])
    pairs = list(enumerate(events))
    if batch:
        a.feed(*pairs[0])
        a.feed_many(pairs[1:])
    else:
        for offset, event in pairs:
            a.feed(offset, event)
    report = a.finish(known, summaries)
    return [(f.version, f.kind) for f in report.findings]


def test_an_intact_stream_has_no_finding_one_by_one_or_in_runs() -> None:
    events = stream()
    assert audit(events) == []
    assert audit(events, batch=True) == []
    assert audit(events, [KnownHead(8, events[-1].hash, "snapshot")]) == []


def test_a_modified_payload_is_a_hash_mismatch_at_its_version() -> None:
    events = stream()
    events[3] = replace(events[3], payload={"i": 99})
    assert audit(events) == [(4, "hash_mismatch")]
    assert audit(events, batch=True) == [(4, "hash_mismatch")]


def test_a_dropped_event_is_a_gap_at_the_missing_version() -> None:
    events = stream()
    del events[4]
    assert audit(events, batch=True) == [(5, "gap")]


def test_a_duplicated_event_is_reported_where_it_appears_again() -> None:
    events = stream()
    events.insert(6, events[2])
    assert audit(events, batch=True) == [(3, "duplicate")]
    copy = stream()
    copy.insert(4, copy[3])  # the head itself, again: an exact copy
    a = StreamAudit("s-1")
    for offset, event in enumerate(copy):
        a.feed(offset, event)
    assert "exact copy" in a.finish().findings[0].detail


def test_a_forged_event_with_a_wrong_hash_breaks_the_chain_there() -> None:
    events = stream()
    events[5] = replace(events[5], payload={"i": "forged"}, hash="ab" * 32)
    # Its hash is wrong, and the next event does not link to it.
    assert audit(events, batch=True) == [(6, "hash_mismatch"), (7, "prev_hash_mismatch")]


def test_a_truncated_tail_is_found_against_what_snapshots_and_the_index_know() -> None:
    full = stream(10)
    kept = full[:7]
    found = audit(kept, [KnownHead(10, full[-1].hash, "snapshot"),
                         KnownHead(9, full[-2].hash, "index")])
    assert found == [(8, "truncated")]
    a = StreamAudit("s-1")
    report = a.finish([KnownHead(3, None, "checkpoint")])
    assert [(f.version, f.kind) for f in report.findings] == [(1, "truncated")]
    assert "holds no event" in report.findings[0].detail


def test_a_known_hash_that_the_log_contradicts_is_a_head_mismatch() -> None:
    events = stream()
    assert audit(events, [KnownHead(5, "cd" * 32, "snapshot")]) == [(5, "head_mismatch")]


def test_history_before_the_log_start_needs_an_anchored_summary() -> None:
    events = stream(10)
    kept = events[4:]
    assert audit(kept) == [(1, "missing_history")]
    good = SummaryAnchor("s-1", 1, 4, events[3].hash, events[0].prev_hash)
    assert audit(kept, summaries=[good]) == []
    chained = [SummaryAnchor("s-1", 1, 2, events[1].hash, events[0].prev_hash),
               SummaryAnchor("s-1", 3, 4, events[3].hash, events[1].hash)]
    assert audit(kept, summaries=chained) == []
    wrong = SummaryAnchor("s-1", 1, 4, "ee" * 32)
    assert audit(kept, summaries=[wrong]) == [(1, "missing_history")]


def test_records_under_the_wrong_key_and_undecodable_ones_are_findings() -> None:
    other = stream(2, "s-2")
    a = StreamAudit("s-1")
    events = stream(3)
    a.feed(0, events[0])
    a.feed(1, other[0])
    a.undecodable(2, "bad_magic: expected c3 01")
    a.feed(3, events[1])
    a.feed(4, events[2])
    report = a.finish()
    assert [(f.version, f.kind, f.offset) for f in report.findings] == [
        (1, "misrouted", 1), (2, "undecodable", 2)]
    audit_report = AuditReport("t", [report])
    assert not audit_report.ok
    assert audit_report.lines()[0].startswith("FAIL stream 's-1' version 1: misrouted")
    assert audit_report.to_json()["streams_failed"] == 1


def test_findings_are_capped_and_the_rest_counted() -> None:
    events = stream(30)
    tampered = [replace(e, payload={"i": -1}) for e in events]
    a = StreamAudit("s-1", max_findings=5)
    for offset, event in enumerate(tampered):
        a.feed(offset, event)
    report = a.finish()
    assert len(report.findings) == 5
    assert report.more_findings == 25
