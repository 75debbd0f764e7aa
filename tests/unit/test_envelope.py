"""The hand-written envelope encoder writes exactly the bytes fastavro writes."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ares.events.chain import seal_encoded, verify_chain
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.wire.canonical import canonical_json
from ares.events.wire.codec import CANONICAL_END, CodecError, decode_event, default_codec
from ares.events.wire.envelope import EnvelopeWriter, long_bytes
from ares.events.wire.schemas import EVENT, JSON_PAYLOAD
from tests.unit.test_codec import SAMPLE_PAYLOADS, T0

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
texts = st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | texts
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    id_=texts, stream_id=texts, event_type=texts.filter(lambda t: t not in default_codec()
                                                         ._event_specs),
    module=texts, version=st.integers(0, 2**63 - 1),
    micros=st.integers(-62_135_596_800_000_000, 253_402_300_799_000_000),  # years 1..9999
    payload=st.dictionaries(texts, json_values, max_size=5),
    metadata=st.dictionaries(texts, texts, max_size=4),
    prev_hash=texts,
)
def test_bodies_equal_fastavro(id_: str, stream_id: str, event_type: str, module: str,
                               version: int, micros: int, payload: dict[str, Any],
                               metadata: dict[str, str], prev_hash: str) -> None:
    codec = default_codec()
    try:
        prepared = codec.prepare_payload(event_type, payload)
    except CodecError:
        return  # surrogates and the like: refused before any encoding
    assert prepared.record == JSON_PAYLOAD
    timestamp = EPOCH + timedelta(microseconds=micros)
    sorted_md = dict(sorted(metadata.items()))
    fields: dict[str, Any] = {
        "id": id_, "stream_id": stream_id, "type": event_type, "module": module,
        "version": version, "timestamp": timestamp, "metadata": sorted_md,
        "prev_hash": prev_hash,
    }
    ours = codec.unhashed_body(prepared=prepared, **fields)
    reference = codec.event_body(Event(payload=prepared.value, hash="", **fields),
                                 prepared=prepared)
    assert ours + CANONICAL_END == reference


@pytest.mark.parametrize("event_type", sorted(SAMPLE_PAYLOADS))
@pytest.mark.parametrize("metadata", [{}, {"a": "1", "issuer": "cli:é"}])
def test_typed_payload_bodies_equal_fastavro(event_type: str, metadata: dict[str, str]) -> None:
    codec = default_codec()
    prepared = codec.prepare_payload(event_type, SAMPLE_PAYLOADS[event_type])
    assert prepared.record != JSON_PAYLOAD
    fields: dict[str, Any] = {
        "id": "e-1", "stream_id": "agent-7", "type": event_type, "module": "ares.runtime",
        "version": 70_000, "timestamp": T0, "metadata": metadata, "prev_hash": "ab" * 32,
    }
    ours = codec.unhashed_body(prepared=prepared, **fields)
    reference = codec.event_body(Event(payload=prepared.value, hash="", **fields),
                                 prepared=prepared)
    assert ours + CANONICAL_END == reference


def test_an_invalid_typed_payload_is_a_codec_error() -> None:
    codec = default_codec()
    prepared = codec.prepare_payload("agent.started", {"kind": "Researcher"})
    broken = type(prepared)(prepared.record, {**prepared.datum, "kind": 7}, prepared.value)
    with pytest.raises(CodecError, match="invalid_payload"):
        codec.unhashed_body(id="e", stream_id="s", type="agent.started", module="m",
                            version=1, timestamp=T0, prepared=broken, metadata={},
                            prev_hash="")


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    expected = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            expected.append(byte | 0x80)
        else:
            expected.append(byte)
            return bytes(expected)


@pytest.mark.parametrize("n", [0, 1, -1, -33, 63, 64, -64, -65, 127, 128, 4095, 4096, 8191,
                               8192, -8193, 2**31, -(2**31), 2**63 - 1, -(2**63)])
def test_long_bytes_match_avro_zigzag(n: int) -> None:
    assert long_bytes(n) == _zigzag_varint(n)


def test_the_precomputed_varints_match_avro_zigzag() -> None:
    assert all(long_bytes(n) == _zigzag_varint(n) for n in range(-5000, 5000))


def test_sealed_events_decode_and_verify() -> None:
    head = StreamHead()
    events = []
    for i in range(20):
        new = NewEvent("note.taken", "tests", {"i": i, "text": "é€😀" * i, "nested": [{"a": i}]},
                       metadata={"z": "1", "a": "ü"} if i % 2 else {})
        event, wire = seal_encoded("stream-é", head, new, head.version + 1)
        decoded = decode_event(wire)
        assert decoded == event
        events.append(decoded)
        head = StreamHead(event.version, event.hash)
    assert verify_chain(events) == head
    # ... and without the fast path of the hash check (re-encoding through fastavro)
    assert verify_chain([copy.copy(e) for e in events]) == head


def test_unwritable_fields_are_a_codec_error() -> None:
    with pytest.raises(CodecError, match="surrogate"):
        seal_encoded("s", StreamHead(), NewEvent("note.taken", "mod\ud800ule", {}), 1)


def test_an_unknown_envelope_shape_falls_back_to_fastavro() -> None:
    parsed = copy.deepcopy(default_codec().schemas.get(EVENT).parsed)
    assert EnvelopeWriter.of(parsed) is not None
    parsed["fields"][4]["type"] = "int"  # version no longer a long
    assert EnvelopeWriter.of(parsed) is None
    parsed = copy.deepcopy(default_codec().schemas.get(EVENT).parsed)
    parsed["fields"] = list(reversed(parsed["fields"]))
    assert EnvelopeWriter.of(parsed) is None


def test_canonical_json_is_json_dumps() -> None:
    import json

    value = {"b": [1, 2.5, None, True], "a": {"é": "x"}, "c": "\u2028"}
    assert canonical_json(value) == json.dumps(value, sort_keys=True, separators=(",", ":"),
                                               ensure_ascii=False, allow_nan=False)
    with pytest.raises(ValueError, match="Out of range float"):
        canonical_json({"x": float("nan")})


def test_remembered_names_encode_as_before_and_failures_are_not_remembered() -> None:
    # The envelope writer remembers the encodings of stream ids, types and modules; it
    # starts over after 16,384, and a name that cannot be encoded fails every time.
    codec = default_codec()
    prepared = codec.prepare_payload("user.note", {"n": 1})

    def body(stream_id: str) -> bytes:
        fields: dict[str, Any] = {
            "id": "e-1", "stream_id": stream_id, "type": "user.note", "module": "tests",
            "version": 1, "timestamp": T0, "metadata": {}, "prev_hash": "ab" * 32,
        }
        ours = codec.unhashed_body(prepared=prepared, **fields)
        reference = codec.event_body(Event(payload=prepared.value, hash="", **fields),
                                     prepared=prepared)
        assert ours + CANONICAL_END == reference
        return ours

    first = body("agent-é")
    for i in range(20_000):
        body(f"agent-{i}")
    assert body("agent-é") == first
    for _ in range(2):
        with pytest.raises(CodecError):
            body("agent-\ud800")
