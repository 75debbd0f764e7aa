"""Recovery planning, snapshot validation, stream verification and the recovery record."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest

from ares.events.chain import seal_encoded
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.wire.codec import decode_event, default_codec
from ares.lifecycle.recovery import (
    AHEAD_OF_LOG,
    FOREIGN_STREAM,
    HASH_MISMATCH,
    UNVERIFIED,
    VERSION_MISMATCH,
    KnownStream,
    RecoveryRecord,
    SnapshotInfo,
    plan_recovery,
    state_hash,
    validate_snapshot,
)
from ares.lifecycle.state import AgentLifecycle, fold, from_events
from ares.lifecycle.verification import (
    HEAD_MISMATCH,
    SNAPSHOT_MISMATCH,
    TRUNCATED,
    Feed,
    StreamVerifier,
)
from tests.unit.runtime.streams import PartitionLog, Stream


@dataclass(frozen=True)
class FakeSnapshot:
    """Shaped like ares.events.kafka.snapshots.Snapshot: recovery takes any such object."""

    stream_id: str
    version: int
    hash: str
    events_offset: int
    state: Any = None


def stream(n: int, stream_id: str = "a") -> Stream:
    s = Stream(stream_id)
    s.add("agent.started", {"kind": "K", "incarnation": 0})
    for i in range(1, n):
        s.add("step.completed", {"step_name": f"s{i}", "result_json": str(i)}, at_s=i)
    return s


def snap_of(s: Stream, version: int, offset: int = 0) -> SnapshotInfo:
    event = s.events[version - 1]
    return SnapshotInfo(s.stream_id, version, event.hash, offset)


# -- planning ------------------------------------------------------------------------------


def test_seek_is_the_smallest_snapshot_offset_when_every_stream_has_one() -> None:
    plan = plan_recovery([FakeSnapshot("a", 10, "h" * 64, 500),
                          FakeSnapshot("b", 3, "h" * 64, 120)], ["a", "b"], log_start=40)
    assert plan.seek_offset == 120
    a, b = plan.streams["a"], plan.streams["b"]
    assert (a.start_version, a.from_offset, b.start_version, b.from_offset) == (11, 500, 4, 120)
    assert a.start == StreamHead(10, "h" * 64)
    assert not plan.discarded


def test_a_live_stream_without_a_snapshot_seeks_to_its_first_event_or_the_log_start() -> None:
    snaps = {"a": FakeSnapshot("a", 10, "h" * 64, 500)}
    indexed = plan_recovery(snaps, ["a", KnownStream("b", first_offset=300)], log_start=40)
    assert indexed.seek_offset == 300
    assert indexed.streams["b"].start_version == 1
    unknown_start = plan_recovery(snaps, ["a", "b"], log_start=40)
    assert unknown_start.seek_offset == 40
    assert unknown_start.streams["b"].from_offset == 40


def test_streams_not_live_do_not_lower_the_seek_and_are_not_routed() -> None:
    plan = plan_recovery({"a": FakeSnapshot("a", 10, "h" * 64, 500)},
                         [KnownStream("old", first_offset=0, live=False)])
    assert plan.seek_offset == 500
    assert plan.verifier("old") is None
    assert plan.verifier("never-heard-of") is None
    assert plan.verifier("a") is not None


def test_nothing_live_nothing_to_replay() -> None:
    assert plan_recovery({}, []).seek_offset is None
    assert plan_recovery({}, [KnownStream("x", live=False)]).seek_offset is None


def test_a_snapshot_makes_its_stream_known_and_the_last_one_listed_wins() -> None:
    plan = plan_recovery([FakeSnapshot("a", 2, "1" * 64, 10), FakeSnapshot("a", 5, "2" * 64, 50)])
    assert plan.streams["a"].snapshot == SnapshotInfo("a", 5, "2" * 64, 50)
    assert plan.seek_offset == 50


def test_the_seek_never_goes_below_the_log_start() -> None:
    plan = plan_recovery([FakeSnapshot("a", 2, "1" * 64, 3)], log_start=100)
    assert plan.seek_offset == 100


@pytest.mark.parametrize(("snapshot", "head", "reason"), [
    (FakeSnapshot("a", 9, "1" * 64, 5), StreamHead(8, "1" * 64), AHEAD_OF_LOG),
    (FakeSnapshot("a", 8, "1" * 64, 5), StreamHead(8, "2" * 64), HASH_MISMATCH),
    (FakeSnapshot("a", 0, "1" * 64, 5), None, VERSION_MISMATCH),
    (FakeSnapshot("a", 3, "1" * 64, -1), None, "invalid_offset"),
])
def test_snapshots_a_known_head_disproves_are_discarded_before_reading(
        snapshot: FakeSnapshot, head: StreamHead | None, reason: str) -> None:
    plan = plan_recovery([snapshot], [KnownStream("a", first_offset=2, head=head)])
    assert plan.discarded["a"].startswith(reason)
    assert plan.streams["a"].snapshot is None
    assert plan.seek_offset == 2


def test_a_head_past_the_snapshot_is_not_a_contradiction_yet() -> None:
    plan = plan_recovery([FakeSnapshot("a", 3, "1" * 64, 5)],
                         [KnownStream("a", head=StreamHead(9, "2" * 64))])
    assert plan.streams["a"].snapshot is not None


def test_a_snapshot_filed_under_another_key_is_discarded() -> None:
    plan = plan_recovery({"a": FakeSnapshot("b", 3, "1" * 64, 5)}, ["a"])
    assert plan.discarded["a"].startswith(FOREIGN_STREAM)
    assert plan.streams["a"].snapshot is None
    assert "b" not in plan.streams


def test_discarding_a_snapshot_falls_back_to_full_replay_of_that_stream() -> None:
    plan = plan_recovery({"a": FakeSnapshot("a", 10, "h" * 64, 500),
                          "b": FakeSnapshot("b", 3, "h" * 64, 400)},
                         [KnownStream("a", first_offset=250), "b"], log_start=7)
    assert plan.seek_offset == 400
    fallback = plan.discard("a", "snapshot_mismatch: hash")
    assert fallback.seek_offset == 250
    assert fallback.streams["a"].snapshot is None
    assert fallback.streams["a"].start_version == 1
    assert fallback.discarded == {"a": "snapshot_mismatch: hash"}
    verifier = fallback.verifier("a")
    assert verifier is not None
    assert verifier.head == StreamHead()
    assert plan.streams["a"].snapshot is not None  # plans are values


# -- snapshot validation ---------------------------------------------------------------------


def test_validate_against_the_anchor_or_its_successor() -> None:
    s = stream(6)
    snapshot = snap_of(s, 4)
    assert validate_snapshot(snapshot, s.events[3]).ok  # the anchor: version 4
    assert validate_snapshot(snapshot, s.events[4]).ok  # its successor: version 5


@pytest.mark.parametrize(("index", "reason"), [(3, HASH_MISMATCH), (4, HASH_MISMATCH),
                                               (5, VERSION_MISMATCH), (1, VERSION_MISMATCH)])
def test_a_snapshot_the_chain_contradicts_is_discarded(index: int, reason: str) -> None:
    s = stream(6)
    bad = replace(snap_of(s, 4), hash="f" * 64) if reason == HASH_MISMATCH else snap_of(s, 4)
    check = validate_snapshot(bad, s.events[index])
    assert check.reason == reason
    assert not check.ok
    assert check.describe().startswith(reason)


def test_validate_refuses_an_event_of_another_stream() -> None:
    assert validate_snapshot(snap_of(stream(4), 2), stream(4, "z").events[2]).reason == \
        FOREIGN_STREAM


def test_validate_with_the_head_when_no_event_follows() -> None:
    s = stream(4)
    snapshot = snap_of(s, 4)
    assert validate_snapshot(snapshot, None, s.head).ok
    assert validate_snapshot(snapshot, None, StreamHead(4, "0" * 64)).reason == HASH_MISMATCH
    assert validate_snapshot(snapshot, None, StreamHead(3, "0" * 64)).reason == AHEAD_OF_LOG
    assert validate_snapshot(snapshot, None, StreamHead(6, "0" * 64)).reason == \
        VERSION_MISMATCH
    assert validate_snapshot(snapshot, None).reason == UNVERIFIED


# -- verification ----------------------------------------------------------------------------


def feed_all(verifier: StreamVerifier, events: list[Event]) -> list[Feed]:
    return [verifier.feed(e) for e in events]


def test_a_whole_stream_verifies_from_genesis() -> None:
    s = stream(8)
    verifier = StreamVerifier("a")
    assert feed_all(verifier, s.events) == [Feed.APPLY] * 8
    assert verifier.finish(s.head) is None
    assert verifier.verified
    assert verifier.applied == 8
    assert verifier.head == s.head


def test_from_a_snapshot_covered_events_are_skipped_and_the_rest_verified() -> None:
    s = stream(8)
    verifier = StreamVerifier("a", snap_of(s, 5))
    assert feed_all(verifier, s.events) == [Feed.SKIP] * 5 + [Feed.APPLY] * 3
    assert verifier.finish(s.head) is None
    assert verifier.applied == 3


def test_a_snapshot_checked_by_its_successor_only() -> None:
    s = stream(8)
    verifier = StreamVerifier("a", snap_of(s, 5))
    assert feed_all(verifier, s.events[5:]) == [Feed.APPLY] * 3
    assert verifier.finish() is None


def test_a_snapshot_with_a_wrong_hash_asks_for_a_full_replay() -> None:
    s = stream(8)
    verifier = StreamVerifier("a", replace(snap_of(s, 5), hash="e" * 64))
    assert feed_all(verifier, s.events) == [Feed.SKIP] * 4 + [Feed.FAILED] * 4
    failure = verifier.finish(s.head)
    assert failure is not None
    assert failure.kind == SNAPSHOT_MISMATCH
    assert failure.discard_snapshot
    assert (failure.stream_id, failure.version) == ("a", 5)


def chain_failure(events: list[Event], start: StreamVerifier | None = None) -> tuple[
        list[Feed], Any]:
    verifier = start or StreamVerifier("a")
    feeds = feed_all(verifier, events)
    return feeds, verifier.finish()


def test_a_gap_is_reported_at_the_missing_version() -> None:
    s = stream(6)
    feeds, failure = chain_failure(s.events[:3] + s.events[4:])
    assert feeds == [Feed.APPLY] * 3 + [Feed.FAILED] * 2
    assert (failure.stream_id, failure.version, failure.kind) == ("a", 5, "gap")
    assert not failure.discard_snapshot


def test_a_duplicate_is_reported() -> None:
    s = stream(4)
    _, failure = chain_failure([*s.events[:3], s.events[2], s.events[3]])
    assert (failure.version, failure.kind) == (3, "duplicate")


def test_a_tampered_payload_breaks_the_hash() -> None:
    s = stream(5)
    tampered = replace(s.events[2], payload={**s.events[2].payload, "result_json": "666"})
    _, failure = chain_failure([*s.events[:2], tampered, *s.events[3:]])
    assert (failure.version, failure.kind) == (3, "hash_mismatch")


def test_a_tampered_prev_hash_breaks_the_chain() -> None:
    s = stream(5)
    tampered = replace(s.events[3], prev_hash="0" * 64)
    _, failure = chain_failure([*s.events[:3], tampered])
    assert (failure.version, failure.kind) == (4, "prev_hash_mismatch")


def test_a_tampered_event_after_the_snapshot_is_an_integrity_failure() -> None:
    s = stream(6)
    tampered = replace(s.events[4], payload={**s.events[4].payload, "step_name": "evil"})
    verifier = StreamVerifier("a", snap_of(s, 4))
    _, failure = chain_failure([*s.events[:4], tampered], verifier)
    assert (failure.version, failure.kind) == (5, "hash_mismatch")
    assert not failure.discard_snapshot


def test_an_event_of_another_stream_fails_the_stream() -> None:
    _, failure = chain_failure([*stream(2).events, stream(3, "b").events[2]])
    assert failure.kind == FOREIGN_STREAM


def test_truncation_and_head_mismatch_against_the_writers_head() -> None:
    s = stream(6)
    verifier = StreamVerifier("a")
    feed_all(verifier, s.events[:4])
    failure = verifier.finish(s.head)
    assert failure is not None
    assert (failure.version, failure.kind) == (5, TRUNCATED)
    other = StreamVerifier("a")
    feed_all(other, s.events)
    failure = other.finish(StreamHead(6, "1" * 64))
    assert failure is not None
    assert failure.kind == HEAD_MISMATCH


def test_an_unanchored_snapshot_is_judged_at_finish() -> None:
    s = stream(4)
    at_head = StreamVerifier("a", snap_of(s, 4))
    assert at_head.finish(s.head) is None
    unverifiable = StreamVerifier("a", snap_of(s, 4))
    failure = unverifiable.finish()
    assert failure is not None
    assert failure.discard_snapshot
    assert UNVERIFIED in failure.detail


def test_feed_many_gives_the_same_verdicts_as_feed() -> None:
    s = stream(12)
    tampered = replace(s.events[8], payload={**s.events[8].payload, "result_json": "0"})
    cases = [s.events, [*s.events[:8], tampered, *s.events[9:]],
             s.events[:5] + s.events[6:], s.events[:2] + stream(3, "b").events]
    for events in cases:
        for snapshot in (None, snap_of(s, 3)):
            one, many = StreamVerifier("a", snapshot), StreamVerifier("a", snapshot)
            by_one = feed_all(one, events)
            assert many.feed_many(events[:4]) + many.feed_many(events[4:]) == by_one
            assert (many.head, many.applied, many.failure) == (one.head, one.applied,
                                                               one.failure)


def sealed_wires(stream_id: str, count: int) -> list[bytes]:
    """A stream's records as a writer sends them."""
    head, wires = StreamHead(), []
    for i in range(1, count + 1):
        event, wire = seal_encoded(stream_id, head, NewEvent(
            "step.completed", "tests", {"step_name": f"s{i}", "result_json": str(i)}), i)
        head = StreamHead(event.version, event.hash)
        wires.append(wire)
    return wires


def test_feed_many_on_events_as_read_gives_the_same_verdicts_as_feed() -> None:
    # Decoded events keep the body they were read from: the verifier's fast path.
    wires = sealed_wires("a", 12)
    events = [decode_event(w) for w in wires]
    forged = [decode_event(w.replace(b"s9", b"s8") if i == 8 else w)
              for i, w in enumerate(wires)]
    assert forged[8].payload["step_name"] == "s8"  # decodes, but its hash no longer fits
    other = [decode_event(w) for w in sealed_wires("b", 3)]

    def resealed(stream_id: str, head: StreamHead) -> Event:
        """Version 4, hashed right, but after ``head`` and/or of ``stream_id``."""
        return decode_event(seal_encoded(stream_id, head, NewEvent(
            "step.completed", "tests", {"step_name": "s4"}), 4)[1])

    third = StreamHead(3, events[2].hash)
    cases = [events, forged, events[:5] + events[6:], events[:4] + events[3:],
             events[:2] + other, [*events[:3], replace(events[3], prev_hash="c" * 64),
                                  *events[4:]],
             [*events[:3], resealed("a", StreamHead(3, "c" * 64)), *events[4:]],
             [*events[:3], resealed("b", third), *events[4:]]]
    for case in cases:
        for snapshot in (None, snap_of(Stream("a", events=events), 3)):
            one, many = StreamVerifier("a", snapshot), StreamVerifier("a", snapshot)
            by_one = feed_all(one, case)
            assert many.feed_many(case[:4]) + many.feed_many(case[4:]) == by_one
            assert (many.head, many.applied, many.failure) == (one.head, one.applied,
                                                               one.failure)
    failed = StreamVerifier("a")
    failed.feed_many(forged)
    assert failed.failure is not None
    assert (failed.failure.version, failed.failure.kind) == (9, "hash_mismatch")


# -- a partition recovered by one scan -------------------------------------------------------


def build_partition() -> PartitionLog:
    log = PartitionLog(log_start=3)
    for i in range(30):
        for agent in ("a", "b", "c"):
            if i == 0:
                log.add(agent, "agent.started", {"kind": "K", "incarnation": 0, "worker": "w1"})
            elif i % 7 == 0:
                log.add(agent, "task.assigned", {"task_id": f"t{i}"}, at_s=i)
            elif i % 7 == 3 and i > 3:
                log.add(agent, "task.completed", {"task_id": f"t{i - 3}"}, at_s=i)
            else:
                log.add(agent, "step.completed", {"step_name": f"s{i}"}, at_s=i)
    log.add("a", "agent.dead", {"cause": "worker_lost"}, at_s=40)
    return log


def recover(log: PartitionLog, snapshots: dict[str, tuple[int, dict[str, Any]]],
            tamper: dict[int, Event] | None = None, corrupt_hash: set[str] | None = None,
            ) -> tuple[dict[str, AgentLifecycle], dict[str, Any], dict[str, str]]:
    """The host's scan, in miniature: plan, seek, route, verify, fold; a snapshot the log
    contradicts is discarded and the partition rescanned with the fallback plan."""
    snaps = {}
    states: dict[str, AgentLifecycle] = {}
    for stream_id, (offset, state_json) in snapshots.items():
        event = log.records[offset - log.log_start]
        digest = "b" * 64 if stream_id in (corrupt_hash or set()) else event.hash
        snaps[stream_id] = FakeSnapshot(stream_id, event.version, digest, offset + 1,
                                        state_json)
    known = [KnownStream(sid, log.first_offset(sid), s.head) for sid, s in log.streams.items()]
    plan = plan_recovery(snaps, known, log_start=log.log_start)
    while True:
        verifiers = {sid: plan.verifier(sid) for sid in plan.streams}
        for sid in verifiers:
            snap = snaps.get(sid) if plan.streams[sid].snapshot else None
            states[sid] = (AgentLifecycle.from_json(snap.state) if snap
                           else AgentLifecycle(sid))
        assert plan.seek_offset is not None
        for offset, stored in log.scan(plan.seek_offset):
            event = (tamper or {}).get(offset, stored)
            verifier = verifiers.get(event.stream_id)
            if verifier is not None and verifier.feed(event) is Feed.APPLY:
                states[event.stream_id] = fold(states[event.stream_id], event)
        failures = {sid: v.finish(plan.streams[sid].expected)
                    for sid, v in verifiers.items() if v is not None}
        discard = [sid for sid, f in failures.items() if f is not None and f.discard_snapshot]
        if not discard:
            return states, failures, dict(plan.discarded)
        for sid in discard:
            plan = plan.discard(sid, failures[sid].detail)  # type: ignore[union-attr]
            del snaps[sid]


def test_snapshot_plus_tail_equals_full_replay() -> None:
    log = build_partition()
    full = {sid: from_events(s.events) for sid, s in log.streams.items()}
    offsets = {sid: [o for o, e in log.scan(0) if e.stream_id == sid] for sid in log.streams}
    # a: snapshot late, b: snapshot early, c: no snapshot
    snapshots = {}
    for sid, k in (("a", 25), ("b", 4)):
        offset = offsets[sid][k - 1]
        snapshots[sid] = (offset, from_events(log.streams[sid].events[:k]).to_json())
    states, failures, discarded = recover(log, snapshots)
    assert failures == {"a": None, "b": None, "c": None}
    assert not discarded
    assert states == full
    assert {sid: state_hash(s.to_json()) for sid, s in states.items()} == {
        sid: state_hash(s.to_json()) for sid, s in full.items()}


def test_a_corrupted_snapshot_falls_back_to_full_replay() -> None:
    log = build_partition()
    full = {sid: from_events(s.events) for sid, s in log.streams.items()}
    offset = [o for o, e in log.scan(0) if e.stream_id == "a"][19]
    snapshot = {"a": (offset, from_events(log.streams["a"].events[:20]).to_json())}
    states, failures, discarded = recover(log, snapshot, corrupt_hash={"a"})
    assert failures == {"a": None, "b": None, "c": None}
    assert discarded["a"].startswith(HASH_MISMATCH)
    assert states == full


def test_a_tampered_event_fails_its_stream_only() -> None:
    log = build_partition()
    offsets = [o for o, e in log.scan(0) if e.stream_id == "b"]
    victim = log.records[offsets[10] - log.log_start]
    tampered = replace(victim, payload={**victim.payload, "step_name": "evil"})
    states, failures, _ = recover(log, {}, tamper={offsets[10]: tampered})
    assert failures["a"] is None
    assert failures["c"] is None
    assert (failures["b"].version, failures["b"].kind) == (11, "hash_mismatch")
    assert states["b"].version == 10  # nothing after the failure was applied


# -- the recovery record ---------------------------------------------------------------------


def record() -> RecoveryRecord:
    return RecoveryRecord(stream_id="a", snapshot_version=20, snapshot_offset=812,
                          events_replayed=11, load_s=0.012, replay_s=0.2504, resume_s=0.003,
                          verified=True, resulting_version=31, state_hash="c" * 64)


def test_the_payload_is_a_valid_agent_resurrected_payload() -> None:
    payload = record().to_payload(incarnation=2, parent_incarnation=1, worker="w2")
    prepared = default_codec().prepare_payload("agent.resurrected", payload)
    assert prepared.value == payload
    assert payload["recovery_ms"] == 265
    assert payload["replayed_events"] == 11


def test_the_record_survives_an_event_round_trip() -> None:
    rec = record()
    s = Stream("a")
    event = s.add("agent.resurrected", rec.to_payload(incarnation=2, parent_incarnation=1),
                  metadata=rec.to_metadata())
    back = RecoveryRecord.from_event(event)
    assert back.reported_s == 0.265
    assert replace(back, reported_s=None, load_s=rec.load_s, replay_s=rec.replay_s,
                   resume_s=rec.resume_s) == rec
    assert back.load_s == pytest.approx(0.012)
    assert back.replay_s == pytest.approx(0.2504)


def test_an_event_without_metadata_gives_unknowns_not_zeros() -> None:
    s = Stream("a")
    event = s.add("agent.resurrected", {"incarnation": 1, "parent_incarnation": 0,
                                        "recovery_ms": 40, "replayed_events": 3})
    rec = RecoveryRecord.from_event(event)
    assert (rec.snapshot_version, rec.verified, rec.state_hash, rec.load_s) == (
        None, None, None, None)
    assert rec.recovery_s == 0.04
    assert rec.events_replayed == 3
    json.dumps(rec.to_json())


def test_state_hash_is_of_canonical_json() -> None:
    assert state_hash({"b": 1, "a": [1, 2]}) == state_hash({"a": [1, 2], "b": 1})
    assert state_hash({"a": 1}) != state_hash({"a": 2})
    with pytest.raises(ValueError, match="JSON"):
        state_hash({"x": float("nan")})
