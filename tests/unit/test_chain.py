"""The hash chain: determinism, sealing, and every way verification can fail."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ares.errors import IntegrityError
from ares.events.chain import ChainError, event_hash, seal_encoded, verify_chain
from ares.events.model import GENESIS_HASH, Event, NewEvent, StreamHead
from ares.events.wire.codec import HEADER_SIZE, Codec, decode_event, encode_event
from ares.events.wire.schemas import load_registry
from tests.unit.test_codec import SAMPLE_PAYLOADS, T0, add_priority, evolved_dirs


def build_stream(n: int, stream_id: str = "agent-1", start: StreamHead | None = None,
                 codec: Codec | None = None) -> list[Event]:
    head = start or StreamHead()
    types = [*sorted(SAMPLE_PAYLOADS), "user.note"]
    events = []
    for i in range(n):
        event_type = types[i % len(types)]
        payload: dict[str, Any] = SAMPLE_PAYLOADS.get(event_type, {"i": i})
        new = NewEvent(event_type, "tests", payload, {"n": str(i)}, timestamp=T0)
        event = seal_encoded(stream_id, head, new, head.version + 1, codec=codec)[0]
        head = StreamHead(event.version, event.hash)
        events.append(event)
    return events


def chain_error(events: list[Event], start: StreamHead | None = None) -> ChainError:
    with pytest.raises(ChainError) as info:
        verify_chain(events, start)
    assert isinstance(info.value, IntegrityError)
    return info.value


# -- hashing -------------------------------------------------------------------------------


def test_the_hash_is_sha256_of_the_body_with_an_empty_hash() -> None:
    event = build_stream(1)[0]
    body = encode_event(replace(event, hash=""))[HEADER_SIZE:]
    assert event.hash == hashlib.sha256(body).hexdigest()
    assert event_hash(event) == event.hash


def test_metadata_order_does_not_change_the_hash() -> None:
    a = NewEvent("user.note", "tests", {"x": 1}, {"a": "1", "b": "2", "c": "3"}, id="e1",
                 timestamp=T0)
    b = replace(a, metadata={"c": "3", "a": "1", "b": "2"})
    sealed_a = seal_encoded("s", StreamHead(), a, 1)[0]
    sealed_b = seal_encoded("s", StreamHead(), b, 1)[0]
    assert sealed_a.hash == sealed_b.hash
    assert list(sealed_b.metadata) == ["a", "b", "c"]


def test_json_key_order_does_not_change_the_hash() -> None:
    a = NewEvent("user.note", "tests", {"x": 1, "y": {"p": 1, "q": 2}}, id="e1", timestamp=T0)
    b = replace(a, payload={"y": {"q": 2, "p": 1}, "x": 1})
    assert seal_encoded("s", StreamHead(), a, 1)[0].hash == \
        seal_encoded("s", StreamHead(), b, 1)[0].hash


def test_hashing_is_reproducible() -> None:
    new = NewEvent("task.assigned", "tests", SAMPLE_PAYLOADS["task.assigned"], id="e1",
                   timestamp=T0)
    first = seal_encoded("s", StreamHead(), new, 1)[0]
    again = seal_encoded("s", StreamHead(), new, 1)[0]
    assert first == again
    assert event_hash(decode_event(encode_event(first))) == first.hash


@pytest.mark.parametrize("change", [
    {"payload": {**SAMPLE_PAYLOADS["task.assigned"], "task_id": "t-2"}},
    {"metadata": {"trace": "other"}},
    {"module": "elsewhere"},
    {"prev_hash": "1" * 64},
    {"timestamp": T0.replace(microsecond=0)},
])
def test_every_field_is_covered_by_the_hash(change: dict[str, Any]) -> None:
    event = seal_encoded("s", StreamHead(), NewEvent("task.assigned", "tests",
                                             SAMPLE_PAYLOADS["task.assigned"], {"trace": "t"},
                                             timestamp=T0), 1)[0]
    assert event_hash(replace(event, **change)) != event.hash


# -- sealing -------------------------------------------------------------------------------


def test_seal_links_to_the_head() -> None:
    head = StreamHead(41, "ab" * 32)
    event = seal_encoded("agent-1", head, NewEvent("user.note", "tests", {"a": 1}), 42)[0]
    assert (event.version, event.prev_hash, event.stream_id) == (42, head.hash, "agent-1")
    assert len(event.hash) == 64
    assert event.timestamp.tzinfo is not None


def test_the_explicit_timestamp_wins() -> None:
    event, _ = seal_encoded("s", StreamHead(), NewEvent("user.note", "tests", timestamp=None),
                            1, T0)
    assert event.timestamp == T0


@pytest.mark.parametrize(("version", "kind"), [(3, "gap"), (1, "duplicate")])
def test_seal_refuses_a_version_that_does_not_follow(version: int, kind: str) -> None:
    with pytest.raises(ChainError) as info:
        seal_encoded("s", StreamHead(1, "a" * 64), NewEvent("user.note", "tests"), version)[0]
    assert info.value.kind == kind


def test_seal_encoded_returns_the_wire_bytes() -> None:
    event, wire = seal_encoded("s", StreamHead(), NewEvent("llm.call", "tests",
                                                           SAMPLE_PAYLOADS["llm.call"]), 1)
    assert decode_event(wire) == event
    assert wire == encode_event(event)


def test_a_plain_version_and_hash_pair_seals_the_same_chain_as_a_stream_head() -> None:
    # The writer passes its head as (version, digest), making no StreamHead per event.
    news = [NewEvent("user.note", "tests", {"n": i}) for i in range(3)]
    head, version, digest = StreamHead(), 0, GENESIS_HASH
    for new in news:
        by_head = seal_encoded("s", head, new, head.version + 1, T0)
        apart = seal_encoded("s", (version, digest), new, version + 1, T0)
        assert apart == by_head
        assert apart[0].prev_hash == digest
        head = StreamHead(by_head[0].version, by_head[0].hash)
        version, digest = apart[0].version, apart[0].hash
    with pytest.raises(ChainError) as info:
        seal_encoded("s", (version, digest), news[0], version + 2, T0)
    assert info.value.kind == "gap"


# -- verification --------------------------------------------------------------------------


def test_an_intact_chain_verifies_and_returns_its_head() -> None:
    events = build_stream(45)
    head = verify_chain(events)
    assert head == StreamHead(45, events[-1].hash)
    assert events[0].prev_hash == GENESIS_HASH


def test_verification_can_start_at_a_snapshot_head() -> None:
    events = build_stream(10)
    assert verify_chain(events[6:], StreamHead(6, events[5].hash)).version == 10


def test_an_empty_sequence_keeps_the_start() -> None:
    start = StreamHead(3, "c" * 64)
    assert verify_chain([], start) == start


def test_a_gap_is_named() -> None:
    events = build_stream(5)
    err = chain_error(events[:2] + events[3:])
    assert (err.stream_id, err.version, err.kind) == ("agent-1", 4, "gap")
    assert "expected version 3" in str(err)


def test_a_duplicate_is_named() -> None:
    events = build_stream(4)
    err = chain_error([*events[:3], events[2], events[3]])
    assert (err.version, err.kind) == (3, "duplicate")


def test_a_stream_that_starts_late_is_a_gap() -> None:
    err = chain_error(build_stream(5)[2:])
    assert (err.version, err.kind) == (3, "gap")


def test_a_broken_link_is_named() -> None:
    events = build_stream(5)
    events[3] = replace(events[3], prev_hash="0" * 64)
    err = chain_error(events)
    assert (err.version, err.kind) == (4, "prev_hash_mismatch")
    assert "agent-1" in str(err)


def test_a_tampered_payload_is_a_hash_mismatch() -> None:
    events = build_stream(5)
    target = next(i for i, e in enumerate(events) if e.type == "agent.dead")
    payload = dict(events[target].payload, cause="heartbeat_timeout")
    events[target] = replace(events[target], payload=payload)
    err = chain_error(events)
    assert (err.version, err.kind) == (target + 1, "hash_mismatch")
    assert "agent.dead" in str(err)


def test_a_reforged_hash_breaks_the_next_link() -> None:
    events = build_stream(5)
    forged = replace(events[1], metadata={"n": "forged"})
    events[1] = replace(forged, hash=event_hash(forged))
    err = chain_error(events)
    assert (err.version, err.kind) == (3, "prev_hash_mismatch")


def test_an_unencodable_tampered_event_is_a_hash_mismatch() -> None:
    events = build_stream(2)
    events[1] = replace(events[1], payload={"not": "a TaskAssigned"}, type="task.assigned")
    err = chain_error(events)
    assert err.kind == "hash_mismatch"
    assert "unencodable" in str(err)


def test_events_of_another_stream_are_named() -> None:
    events = build_stream(3)
    other = build_stream(3, stream_id="agent-2")
    err = chain_error([events[0], other[1]])
    assert (err.kind, err.version) == ("foreign_stream", 2)
    assert "agent-2" in str(err)


def test_links_only_mode_skips_hash_recomputation() -> None:
    events = build_stream(3)
    events[2] = replace(events[2], module="tampered")
    assert verify_chain(events, check_hashes=False).version == 3
    assert chain_error(events).kind == "hash_mismatch"


def test_events_written_before_a_schema_upgrade_still_verify(tmp_path: Path) -> None:
    old_dir, new_dir = evolved_dirs(tmp_path, add_priority)
    old, new = Codec(load_registry(old_dir)), Codec(load_registry(new_dir))
    written = build_stream(25, codec=old)
    replayed = [new.decode_event(old.encode_event(e)) for e in written]
    assert any(e.type == "task.assigned" and e.payload["priority"] == 5 for e in replayed)
    assert verify_chain(replayed, codec=new).version == 25
    # ...and events written after the upgrade continue the same chain.
    more = build_stream(3, start=StreamHead(25, written[-1].hash), codec=new)
    assert verify_chain(replayed + more, codec=new).version == 28
    tampered = [*replayed[:5], replace(replayed[5], module="x"), *replayed[6:]]
    with pytest.raises(ChainError) as info:
        verify_chain(tampered, codec=new)
    assert (info.value.version, info.value.kind) == (6, "hash_mismatch")
