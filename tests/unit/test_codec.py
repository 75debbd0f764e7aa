"""The wire codec: round trips of every record, every error reason, schema evolution."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from ares.errors import SchemaError
from ares.events.chain import seal_encoded
from ares.events.model import NewEvent, StreamHead
from ares.events.wire.codec import (
    HEADER_SIZE,
    MAGIC,
    REASONS,
    Codec,
    CodecError,
    SingleObjectEncoding,
    decode,
    decode_event,
    default_codec,
    encode,
    encode_event,
)
from ares.events.wire.envelope import long_bytes, timestamp_micros
from ares.events.wire.schemas import (
    ALERT,
    COMMAND,
    COMMAND_PAYLOADS,
    EVENT,
    EVENT_PAYLOADS,
    HEARTBEAT,
    REPLY,
    SCHEDULE,
    SNAPSHOT,
    SchemaFile,
    SchemaRegistry,
    load_registry,
    registry,
    repo_schema_dir,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

# One valid payload (required fields only) per typed event type.
SAMPLE_PAYLOADS: dict[str, dict[str, Any]] = {
    "agent.started": {"kind": "Researcher"},
    "agent.stopped": {"reason": "requested"},
    "agent.dead": {"cause": "crash", "error_type": "builtins.RuntimeError"},
    "agent.resurrecting": {"incarnation": 2, "parent_incarnation": 1},
    "agent.resurrected": {"incarnation": 2, "parent_incarnation": 1, "snapshot_version": 40},
    "agent.quarantined": {"reason": "death_loop", "deaths": 5},
    "task.assigned": {"task_id": "t-1", "input_json": '{"text":"hi"}'},
    "task.completed": {"task_id": "t-1"},
    "task.failed": {"task_id": "t-1", "error_message": "boom"},
    "step.completed": {"step_name": "plan", "result_json": "[1,2]"},
    "llm.call": {"name": "plan", "model": "m", "prompt_hash": "ab" * 32, "output": "ok",
                 "prompt_tokens": 12, "completion_tokens": 3},
    "tool.call.intent": {"call_id": "c1", "tool": "send_email", "effect": "non_idempotent",
                         "idempotency_key": "k1"},
    "tool.call.completed": {"call_id": "c1", "result_json": "true"},
    "tool.call.failed": {"call_id": "c1", "error": "timeout"},
    "tool.in_doubt": {"call_id": "c1", "tool": "send_email"},
    "snapshot.taken": {"snapshot_version": 10, "snapshot_hash": "0" * 64},
    "heartbeat": {"progress": "step 3"},
    "summary": {"from_version": 1, "to_version": 9, "text": "nine events"},
    "alert": {"kind": "death_loop", "message": "5 deaths in 60 s", "details": {"n": "5"}},
}

SAMPLE_COMMAND_PAYLOADS: dict[str, dict[str, Any]] = {
    "agent.start": {"kind": "Researcher", "config_json": '{"model":"m"}'},
    "agent.stop": {"reason": "operator"},
    "agent.kill": {},
    "agent.resume": {"reason": "fixed"},
    "agent.declare_dead": {"cause": "heartbeat_timeout", "last_seen": T0},
    "agent.quarantine": {"reason": "death_loop", "deaths": 4},
    "task.assign": {"task_id": "t-9", "input_json": "{}"},
    "snapshot.request": {},
    "events.append": {"expected_version": 3, "events": [
        {"id": "e1", "type": "note", "module": "cli", "payload_json": '{"a":1}',
         "metadata": {"k": "v"}, "timestamp": None},
    ]},
    "agent.signal": {"name": "approved", "signal_id": "s-1", "payload_json": '{"by":"ops"}'},
    "schedule.create": {"agent_id": "mailer-1", "cron": "0 9 * * MON-FRI",
                        "input_json": '{"kind":"daily"}', "catchup": "once",
                        "timezone": "Europe/Paris"},
    "schedule.pause": {"reason": "holiday"},
    "schedule.resume": {},
    "schedule.delete": {"reason": "obsolete"},
    "worker.crash": {"worker_id": "worker-1", "reason": "arena"},
}


def sealed(event_type: str = "task.assigned", payload: dict[str, Any] | None = None,
           metadata: dict[str, str] | None = None, codec: Codec | None = None) -> Any:
    new = NewEvent(event_type, "tests", SAMPLE_PAYLOADS.get(event_type, {}) if payload is None
                   else payload, metadata or {"trace": "t1"}, timestamp=T0)
    return seal_encoded("agent-1", StreamHead(), new, 1, codec=codec)[0]


def evolved_dirs(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> tuple[Path, Path]:
    """(old, new) schema directories: old = today's schemas, new = ``change``d Event whose
    released/v1 is the old one (what a real upgrade looks like)."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(parents=True)
    for src in repo_schema_dir().glob("*.avsc"):
        shutil.copy(src, old / src.name)
    shutil.copytree(old, new / "released" / "v1")
    for src in old.glob("*.avsc"):
        shutil.copy(src, new / src.name)
    path = new / "ares.v1.Event.avsc"
    schema = json.loads(path.read_text())
    change(schema)
    path.write_text(json.dumps(schema, indent=2))
    return old, new


def payload_record(schema: dict[str, Any], simple_name: str) -> dict[str, Any]:
    union = next(f for f in schema["fields"] if f["name"] == "payload")["type"]
    return next(r for r in union if r["name"] == simple_name)  # type: ignore[no-any-return]


def add_priority(schema: dict[str, Any]) -> None:
    payload_record(schema, "TaskAssigned")["fields"].append(
        {"name": "priority", "type": "long", "default": 5, "doc": "scheduling priority"})


# -- round trips ---------------------------------------------------------------------------


def test_every_typed_event_type_has_a_sample() -> None:
    assert set(SAMPLE_PAYLOADS) == set(EVENT_PAYLOADS)
    assert set(SAMPLE_COMMAND_PAYLOADS) == set(COMMAND_PAYLOADS)


@pytest.mark.parametrize("event_type", sorted(SAMPLE_PAYLOADS))
def test_typed_event_round_trips(event_type: str) -> None:
    event = sealed(event_type)
    data = encode_event(event)
    assert data[:2] == MAGIC
    assert data[2:HEADER_SIZE] == registry().fingerprint(EVENT)
    back = decode_event(data)
    assert back == event
    # Defaults are filled in at seal time: the payload names every field of the record.
    record = registry().get(EVENT).named_types[EVENT_PAYLOADS[event_type]]
    assert set(back.payload) == {f["name"] for f in record["fields"]}


def test_user_defined_event_round_trips_as_json() -> None:
    payload = {"b": [1, 2, (3, 4)], "a": {"nested": None}, "n": 1.5, "s": "é"}
    event = sealed("research.note", payload)
    assert event.payload == {"a": {"nested": None}, "b": [1, 2, [3, 4]], "n": 1.5, "s": "é"}
    assert decode_event(encode_event(event)) == event


def test_sealed_wire_bytes_equal_a_fresh_encoding() -> None:
    new = NewEvent("task.assigned", "tests", SAMPLE_PAYLOADS["task.assigned"], {"z": "1", "a": "2"})
    event, wire = seal_encoded("agent-1", StreamHead(), new, 1)
    assert wire == encode_event(event)
    assert decode_event(wire) == event


def test_generic_event_encoding_is_the_typed_one() -> None:
    event = sealed("llm.call")
    name, record = decode(encode_event(event))
    assert name == EVENT
    assert record == {**event.to_json(), "timestamp": event.timestamp}
    assert encode(EVENT, record) == encode_event(event)


@pytest.mark.parametrize("command_type", sorted(SAMPLE_COMMAND_PAYLOADS))
def test_command_round_trips(command_type: str) -> None:
    command = {"id": "cmd-1", "stream_id": "agent-1", "type": command_type, "issuer": "tests",
               "timestamp": T0, "payload": SAMPLE_COMMAND_PAYLOADS[command_type],
               "reply_to": "ares.replies", "metadata": {}}
    name, back = decode(encode(COMMAND, command))
    assert name == COMMAND
    spec_fields = {f["name"] for f in registry().get(COMMAND).named_types[
        COMMAND_PAYLOADS[command_type]]["fields"]}
    assert set(back["payload"]) == spec_fields
    assert {k: back["payload"][k] for k in command["payload"]} == command["payload"]
    assert {k: v for k, v in back.items() if k != "payload"} == {
        k: v for k, v in command.items() if k != "payload"}


OTHER_RECORDS: dict[str, dict[str, Any]] = {
    REPLY: {"correlation_id": "cmd-1", "status": "conflict", "stream_id": "agent-1",
            "stream_version": 7, "expected_version": 5, "actual_version": 7,
            "message": "version conflict", "timestamp": T0},
    SNAPSHOT: {"stream_id": "agent-1", "version": 40, "hash": "f" * 64, "events_offset": 1234,
               "agent_kind": "Researcher", "incarnation": 2, "taken_at": T0,
               "state": b'{"notes":[]}', "state_encoding": "json"},
    HEARTBEAT: {"worker_id": "rm-0", "timestamp": T0, "interval_ms": 1000, "agents": [
        {"agent_id": "agent-1", "version": 40, "incarnation": 2, "status": "running",
         "progress": None},
        {"agent_id": "agent-2", "version": 3, "incarnation": 0, "status": "idle",
         "progress": "waiting"},
    ]},
    ALERT: {"id": "a-1", "stream_id": "agent-1", "kind": "death_loop", "severity": "critical",
            "message": "5 deaths", "source": "health_checker", "timestamp": T0,
            "details": {"deaths": "5"}},
    SCHEDULE: {"name": "digest", "agent_id": "mailer-1", "cron": "0 9 * * MON-FRI",
               "timezone": "Europe/Paris", "input_json": '{"kind":"daily"}',
               "catchup": "once", "paused": False, "issuer": "cli", "created_at": T0,
               "since": T0, "last_tick": T0, "ticks": 3, "fired_by": "rm-0",
               "updated_at": T0},
}


@pytest.mark.parametrize("name", sorted(OTHER_RECORDS))
def test_record_round_trips(name: str) -> None:
    data = encode(name, OTHER_RECORDS[name])
    assert data[2:HEADER_SIZE] == registry().fingerprint(name)
    assert decode(data) == (name, OTHER_RECORDS[name])


def test_naive_timestamps_are_utc_not_local_time() -> None:
    naive = datetime(2026, 1, 2, 3, 4, 5)
    _, back = decode(encode(REPLY, {**OTHER_RECORDS[REPLY], "timestamp": naive}))
    assert back["timestamp"] == naive.replace(tzinfo=UTC)
    event = seal_encoded("agent-1", StreamHead(), NewEvent("x", "tests"), 1, naive)[0]
    assert event.timestamp == naive.replace(tzinfo=UTC)


# -- errors --------------------------------------------------------------------------------


def reason_of(call: Callable[[], object]) -> CodecError:
    with pytest.raises(CodecError) as info:
        call()
    assert info.value.reason in REASONS
    assert str(info.value).startswith(info.value.reason + ": ")
    assert isinstance(info.value, SchemaError)
    return info.value


def test_bad_magic() -> None:
    err = reason_of(lambda: decode_event(b'{"type": "json"}'))
    assert err.reason == "bad_magic"
    assert "7b 22" in str(err)


@pytest.mark.parametrize("cut", [1, 5, HEADER_SIZE + 3, -70, -1])
def test_truncated(cut: int) -> None:
    data = encode_event(sealed())
    assert reason_of(lambda: decode_event(data[:cut])).reason == "truncated"


def test_unknown_fingerprint() -> None:
    data = MAGIC + b"\x01\x02\x03\x04\x05\x06\x07\x08" + b"\x00"
    err = reason_of(lambda: decode(data))
    assert err.reason == "unknown_fingerprint"
    assert "0102030405060708" in str(err)


def test_schema_mismatch_on_invalid_utf8() -> None:
    data = bytearray(encode_event(sealed()))
    data[HEADER_SIZE + 1] = 0xFF  # first byte of the id string
    err = reason_of(lambda: decode_event(bytes(data)))
    assert err.reason == "schema_mismatch"
    assert "UnicodeDecodeError" in str(err)


def test_schema_mismatch_on_trailing_bytes() -> None:
    err = reason_of(lambda: decode_event(encode_event(sealed()) + b"\x00"))
    assert err.reason == "schema_mismatch"
    assert "1 bytes after the body" in str(err)


def test_schema_mismatch_on_an_invalid_union_index() -> None:
    event = sealed()
    # Encode the six fields before `payload` alone to find where the union index is.
    fields = [{k: v for k, v in f.items() if not k.startswith("__")}
              for f in registry().get(EVENT).parsed["fields"][:6]]
    head = BytesIO()
    schemaless_writer(head, parse_schema({"type": "record", "name": "Head", "fields": fields}),
                      {**event.to_json(), "timestamp": event.timestamp})
    data = bytearray(encode_event(event))
    at = HEADER_SIZE + len(head.getvalue())
    union = registry().get(EVENT).parsed["fields"][6]["type"]
    branch = [r["name"] for r in union].index(EVENT_PAYLOADS["task.assigned"])
    assert data[at] == 2 * branch  # zig-zag: the byte found is the union index
    data[at] = 0x7E  # branch 63: the union has 20
    assert reason_of(lambda: decode_event(bytes(data))).reason == "schema_mismatch"


def test_decode_event_refuses_other_records() -> None:
    err = reason_of(lambda: decode_event(encode(REPLY, OTHER_RECORDS[REPLY])))
    assert err.reason == "schema_mismatch"
    assert REPLY in str(err)


def test_missing_required_field_is_named() -> None:
    err = reason_of(lambda: sealed("task.assigned", {"input_json": "{}"}))
    assert err.reason == "invalid_payload"
    assert "'task_id'" in str(err)
    assert "task.assigned" in str(err)


@pytest.mark.parametrize(("payload", "needle"), [
    ({"task_id": 7}, "'task_id' must be string, got int"),
    ({"task_id": "t", "inptu_json": "{}"}, "unknown field(s) ['inptu_json']"),
    ({"task_id": "t", "input_json": {"a": 1}}, "'input_json' must be string, got dict"),
])
def test_invalid_typed_payloads(payload: dict[str, Any], needle: str) -> None:
    err = reason_of(lambda: sealed("task.assigned", payload))
    assert err.reason == "invalid_payload"
    assert needle in str(err)


@pytest.mark.parametrize("bad", [True, 1.5, "1"])
def test_only_ints_are_longs(bad: object) -> None:
    payload = {"incarnation": bad, "parent_incarnation": 1}
    err = reason_of(lambda: sealed("agent.resurrecting", payload))
    assert f"'incarnation' must be long, got {type(bad).__name__}" in str(err)


@pytest.mark.parametrize(("payload", "metadata"), [
    ({"x": float("nan")}, None),
    ({"x": object()}, None),
    ({"x": 1}, {"k": 1}),
])
def test_invalid_json_payloads_and_metadata(payload: dict[str, Any],
                                            metadata: dict[str, Any] | None) -> None:
    assert reason_of(lambda: sealed("user.event", payload, metadata)).reason == "invalid_payload"


def test_unknown_command_type() -> None:
    command = {"id": "c", "stream_id": "a", "type": "agent.explode", "issuer": "t",
               "timestamp": T0, "payload": {}}
    err = reason_of(lambda: encode(COMMAND, command))
    assert err.reason == "invalid_payload"
    assert "agent.explode" in str(err)


def test_missing_field_of_a_plain_record_is_named() -> None:
    reply = {k: v for k, v in OTHER_RECORDS[REPLY].items() if k != "status"}
    err = reason_of(lambda: encode(REPLY, reply))
    assert err.reason == "invalid_payload"
    assert "status" in str(err)


def test_unknown_record_name() -> None:
    assert reason_of(lambda: encode("ares.v1.Nope", {})).reason == "invalid_payload"


# -- evolution and the wire-format extension point --------------------------------------------


def test_records_of_a_released_writer_are_read_with_the_current_schema(tmp_path: Path) -> None:
    old_dir, new_dir = evolved_dirs(tmp_path, add_priority)
    old, new = Codec(load_registry(old_dir)), Codec(load_registry(new_dir))
    assert old.schemas.fingerprint(EVENT) != new.schemas.fingerprint(EVENT)
    event = sealed("task.assigned", codec=old)
    back = new.decode_event(old.encode_event(event))
    assert back.payload == {**event.payload, "priority": 5}
    assert replace(back, payload=event.payload) == event


def test_a_writer_newer_than_every_known_schema_is_unknown(tmp_path: Path) -> None:
    old_dir, new_dir = evolved_dirs(tmp_path, add_priority)
    newer = Codec(load_registry(new_dir)).encode_event(
        sealed("task.assigned", codec=Codec(load_registry(new_dir))))
    err = reason_of(lambda: Codec(load_registry(old_dir)).decode_event(newer))
    assert err.reason == "unknown_fingerprint"


class SchemaIdFormat:
    """A Confluent-style framing (00 + 4-byte schema id), to prove the extension point."""

    def __init__(self, schemas: SchemaRegistry) -> None:
        self.ids = {sf.name: i for i, sf in enumerate(schemas.current.values(), start=1)}
        self.by_id = {i: schemas.current[name] for name, i in self.ids.items()}

    def header(self, schema: SchemaFile) -> bytes:
        return b"\x00" + struct.pack(">I", self.ids[schema.name])

    def writer_of(self, data: bytes) -> tuple[SchemaFile, int]:
        if data[:1] != b"\x00":
            raise CodecError("bad_magic", f"expected 00, got {data[:1].hex()}")
        return self.by_id[struct.unpack(">I", data[1:5])[0]], 5


def test_the_wire_format_is_pluggable() -> None:
    codec = Codec(wire=SchemaIdFormat(registry()))
    event = sealed()
    data = codec.encode_event(event)
    assert data[:1] == b"\x00"
    assert codec.decode_event(data) == event
    assert data[5:] == Codec().encode_event(event)[HEADER_SIZE:]  # same body, other header
    assert isinstance(Codec().wire, SingleObjectEncoding)


def test_schema_mismatch_on_a_timestamp_no_datetime_can_hold() -> None:
    """A damaged timestamp varint: the compiled reader's datetime overflows; the record is
    malformed like any other (found by hypothesis in test_avro_reader)."""
    event = sealed()
    body = default_codec().event_body(event, hash_=event.hash)
    stamp = long_bytes(timestamp_micros(event.timestamp))
    far = long_bytes(2**62)  # ~146,000 years after 1970
    assert body.count(stamp) == 1
    data = MAGIC + default_codec().schemas.get(EVENT).fingerprint + body.replace(stamp, far)
    err = reason_of(lambda: decode_event(data))
    assert err.reason == "schema_mismatch"
    assert "OverflowError" in str(err)
