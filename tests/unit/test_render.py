"""Rendering of events and dumped records: one safe line for people, stable JSON for scripts."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from ares.cli import render
from ares.cli.render import RawRecord
from ares.events.chain import seal_encoded
from ares.events.kafka.dlq import DeadLetter
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.wire.codec import encode, encode_event
from ares.events.wire.schemas import (
    ALERT,
    COMMAND,
    EVENT,
    HEARTBEAT,
    REPLY,
    SCHEDULE,
    SNAPSHOT,
    registry,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
ENVELOPE = {"id", "stream_id", "type", "module", "version", "timestamp", "payload", "metadata",
            "prev_hash", "hash", "signature", "key_id"}
DUMP_KEYS = {"topic", "partition", "offset", "timestamp", "key", "key_base64", "headers",
             "size", "record", "value", "error", "value_base64", "dead_letter"}

RECORDS: dict[str, dict[str, Any]] = {
    COMMAND: {"id": "cmd-1", "stream_id": "agent-1", "type": "task.assign", "issuer": "tests",
              "timestamp": T0, "payload": {"task_id": "t-9", "input_json": "{}"},
              "reply_to": "ares.replies", "metadata": {}},
    REPLY: {"correlation_id": "cmd-1", "status": "conflict", "stream_id": "agent-1",
            "stream_version": 7, "expected_version": 5, "actual_version": 7,
            "message": "version conflict", "timestamp": T0},
    SNAPSHOT: {"stream_id": "agent-1", "version": 40, "hash": "f" * 64, "events_offset": 1234,
               "agent_kind": "Researcher", "incarnation": 2, "taken_at": T0,
               "state": b'{"notes":[]}', "state_encoding": "json"},
    HEARTBEAT: {"worker_id": "rm-0", "timestamp": T0, "interval_ms": 1000, "agents": [
        {"agent_id": "agent-1", "version": 40, "incarnation": 2, "status": "running",
         "progress": None}]},
    ALERT: {"id": "a-1", "stream_id": "agent-1", "kind": "death_loop", "severity": "critical",
            "message": "5 deaths", "source": "health_checker", "timestamp": T0,
            "details": {"deaths": "5"}},
    SCHEDULE: {"name": "digest", "agent_id": "mailer-1", "cron": "0 9 * * MON-FRI",
               "timezone": "Europe/Paris", "input_json": "null", "catchup": "once",
               "paused": True, "issuer": "cli", "created_at": T0, "since": T0,
               "last_tick": T0, "ticks": 3, "fired_by": "rm-0", "updated_at": T0},
}


def event(event_type: str = "task.assigned", payload: dict[str, Any] | None = None,
          stream: str = "agent-1", module: str = "tests") -> Event:
    new = NewEvent(event_type, module,
                   {"task_id": "t-1", "input_json": '{"text":"hi"}'} if payload is None
                   else payload, {"trace": "t1"}, timestamp=T0)
    return seal_encoded(stream, StreamHead(), new, 1)[0]


def raw(value: bytes | None, *, key: bytes | None = b"agent-1",
        headers: tuple[tuple[str, bytes], ...] = (), topic: str = "p.ares.commands") -> RawRecord:
    return RawRecord(topic=topic, partition=1, offset=17, timestamp_ms=T0_MS, key=key,
                     value=value, headers=headers)


# -- values ----------------------------------------------------------------------------------


def test_format_time_is_utc_with_milliseconds() -> None:
    assert render.format_time(T0) == "2026-01-02T03:04:05.678Z"
    assert render.format_time(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000Z"
    assert render.format_time(None) == "-"


def test_kafka_timestamps() -> None:
    assert render.time_of_ms(-1) is None
    assert render.format_time(render.time_of_ms(T0_MS)) == "2026-01-02T03:04:05.678Z"


def test_one_line_escapes_control_characters() -> None:
    assert render.one_line("plain text é") == "plain text é"
    # A newline would split a record's line; ESC would let data repaint the terminal.
    assert render.one_line("a\nb\x1b[31mred\t") == "a\\nb\\x1b[31mred\\t"


def test_short_json_is_compact_sorted_and_cut() -> None:
    assert render.short_json({"b": 1, "a": "x"}) == '{"a":"x","b":1}'
    cut = render.short_json({"text": "y" * 500}, width=20)
    assert len(cut) == 20
    assert cut.endswith("…")


def test_jsonable_handles_datetimes_bytes_and_nesting() -> None:
    value = render.jsonable({"at": T0, "raw": b"\x00\xff", "list": ({"x": b"a"},)})
    assert value == {"at": T0.isoformat(), "raw": "AP8=", "list": [{"x": "YQ=="}]}
    json.dumps(value)


def test_bytes_preview() -> None:
    assert render.bytes_preview(b"") == "0 bytes"
    assert render.bytes_preview(b"\xde\xad") == "2 bytes: de ad"
    long = render.bytes_preview(bytes(range(40)), limit=4)
    assert long == "40 bytes: 00 01 02 03 …"


def test_keys_as_text_or_hex() -> None:
    assert render.key_label(b"agent-1") == "agent-1"
    assert render.key_label(None) == "(no key)"
    assert render.key_label(b"\xff\xfe") == "0xfffe"
    assert render.key_text(b"\xff") is None


# -- events ----------------------------------------------------------------------------------


def test_event_line() -> None:
    line = render.event_line(event())
    assert line == ('v1  2026-01-02T03:04:05.678Z  task.assigned  [tests]  '
                    '{"input_json":"{\\"text\\":\\"hi\\"}","task_id":"t-1"}')
    assert render.event_line(event(), with_stream=True).startswith("agent-1  v1  ")


def test_event_line_stays_one_line() -> None:
    line = render.event_line(event("note\nadded", {"text": "a\nb" * 200}, stream="s\x1b"),
                             with_stream=True)
    assert "\n" not in line
    assert "\x1b" not in line
    assert len(line) < 200


def test_event_json_is_exactly_the_envelope() -> None:
    ev = event()
    line = render.json_line(render.event_json(ev))
    assert "\n" not in line
    obj = json.loads(line)
    assert set(obj) == ENVELOPE
    assert list(obj) == ["id", "stream_id", "type", "module", "version", "timestamp",
                         "payload", "metadata", "prev_hash", "hash", "signature", "key_id"]
    assert obj["version"] == 1
    assert obj["hash"] == ev.hash
    assert datetime.fromisoformat(obj["timestamp"]) == T0


# -- decoded records -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "needles"), [
    (COMMAND, ["command task.assign", "stream=agent-1", "issuer=tests", "reply_to=ares.replies",
               '"task_id":"t-9"']),
    (REPLY, ["reply conflict", "correlation=cmd-1", "v7", "expected_version=5",
             "actual_version=7", ": version conflict"]),
    (SNAPSHOT, ["snapshot stream=agent-1", "v40", "events_offset=1234", "state=12 bytes (json)"]),
    (HEARTBEAT, ["heartbeat worker=rm-0", "interval=1000ms", "agents=1 agent-1"]),
    (ALERT, ["alert critical death_loop", "source=health_checker: 5 deaths"]),
    (SCHEDULE, ["schedule digest agent=mailer-1", "cron='0 9 * * MON-FRI'", "paused",
                "ticks=3", "last_tick=2026-01-02T03:04:05.678Z", "fired_by=rm-0"]),
])
def test_every_record_has_a_summary(name: str, needles: list[str]) -> None:
    dumped = render.inspect_record(raw(encode(name, RECORDS[name])))
    assert dumped.decoded.name == name
    line = render.record_summary(name, dumped.decoded.record or {})
    for needle in needles:
        assert needle in line


def test_event_record_summary() -> None:
    dumped = render.inspect_record(raw(encode_event(event())))
    (line,) = render.dumped_lines(dumped)
    assert line.startswith("1:17  2026-01-02T03:04:05.678Z  key=agent-1  ")
    assert "v1 task.assigned [tests] stream=agent-1" in line


def test_unknown_shapes_fall_back_to_json() -> None:
    assert render.record_summary("x.Y", {"a": 1}) == 'x.Y {"a":1}'
    assert render.record_summary(HEARTBEAT, {"agents": 3}).startswith(HEARTBEAT)


def test_every_current_schema_is_covered() -> None:
    assert set(registry().current) == {EVENT, *RECORDS}


# -- dumped records --------------------------------------------------------------------------


def test_dump_json_of_a_decoded_record() -> None:
    obj = render.dumped_json(render.inspect_record(raw(encode(SNAPSHOT, RECORDS[SNAPSHOT]))))
    assert set(obj) == DUMP_KEYS
    assert obj["record"] == SNAPSHOT
    assert obj["value"]["state"] == base64.b64encode(b'{"notes":[]}').decode()
    assert obj["value"]["taken_at"] == T0.isoformat()
    assert obj["error"] is None
    assert obj["value_base64"] is None  # decoded and not a dead letter: no need for bytes
    assert obj["dead_letter"] is None
    assert (obj["topic"], obj["partition"], obj["offset"]) == ("p.ares.commands", 1, 17)
    assert obj["key"] == "agent-1"
    json.loads(render.json_line(obj))


@pytest.mark.parametrize(("value", "reason"), [
    (b"garbage!", "bad_magic"),
    (b"\xc3\x01\x00", "truncated"),
    (b"\xc3\x01" + b"\x00" * 8 + b"body", "unknown_fingerprint"),
    (b"", "truncated"),
])
def test_undecodable_records_are_shown_not_fatal(value: bytes, reason: str) -> None:
    dumped = render.inspect_record(raw(value))
    obj = render.dumped_json(dumped)
    assert obj["record"] is None
    assert obj["value"] is None
    assert obj["error"]["reason"] == reason
    assert obj["error"]["detail"]
    assert base64.b64decode(obj["value_base64"]) == value
    assert obj["size"] == len(value)
    lines = render.dumped_lines(dumped)
    assert lines[0].endswith(f"UNDECODABLE {reason}: {dumped.decoded.detail}")
    assert lines[1] == f"    value {render.bytes_preview(value)}"


def test_a_body_cut_short_is_undecodable() -> None:
    data = encode(COMMAND, RECORDS[COMMAND])
    dumped = render.inspect_record(raw(data[:-5]))
    assert dumped.decoded.reason in {"truncated", "schema_mismatch"}


def test_a_tombstone() -> None:
    dumped = render.inspect_record(raw(None, topic="p.ares.snapshots"))
    obj = render.dumped_json(dumped)
    assert (obj["record"], obj["error"], obj["size"], obj["value_base64"]) == (
        None, None, None, None)
    assert render.dumped_lines(dumped)[0].endswith("tombstone (no value: deletes the key on "
                                                   "compaction)")


def test_a_key_that_is_not_utf8() -> None:
    obj = render.dumped_json(render.inspect_record(raw(b"x", key=b"\xff\x00")))
    assert obj["key"] is None
    assert obj["key_base64"] == "/wA="
    obj = render.dumped_json(render.inspect_record(raw(b"x", key=None)))
    assert (obj["key"], obj["key_base64"]) == (None, None)


def test_large_values_are_not_inlined_in_human_mode() -> None:
    lines = render.dumped_lines(render.inspect_record(raw(b"z" * 500)))
    assert lines[2] == "    base64: use --json for the whole value"
    lines = render.dumped_lines(render.inspect_record(raw(b"zz")))
    assert lines[2] == "    base64 eno="


# -- dead letters ----------------------------------------------------------------------------


def dead_letter(value: bytes | None = b"garbage!") -> DeadLetter:
    return DeadLetter(reason="bad_magic", detail="expected c3 01, got 67 61",
                      source_topic="p.ares.commands", source_partition=1, source_offset=42,
                      key=b"agent-1", value=value, time=T0)


def test_dead_letter_json() -> None:
    letter = dead_letter()
    dumped = render.inspect_record(raw(letter.value, headers=tuple(letter.headers()),
                                       topic="p.ares.dlq"), dead_letters=True)
    obj = render.dumped_json(dumped)
    assert obj["dead_letter"] == {
        "reason": "bad_magic", "detail": "expected c3 01, got 67 61",
        "source_topic": "p.ares.commands", "source_partition": 1, "source_offset": 42,
        "time": T0.isoformat()}
    assert base64.b64decode(obj["value_base64"]) == b"garbage!"
    assert obj["headers"]["ares.dlq.reason"] == "bad_magic"


def test_dead_letter_lines() -> None:
    letter = dead_letter()
    lines = render.dumped_lines(render.inspect_record(
        raw(letter.value, headers=tuple(letter.headers())), dead_letters=True))
    assert lines[0].endswith("key=agent-1  DEAD LETTER bad_magic: expected c3 01, got 67 61")
    assert lines[1] == "    from p.ares.commands/1@42, rejected 2026-01-02T03:04:05.678Z"
    assert lines[2] == "    original 8 bytes: 67 61 72 62 61 67 65 21"
    assert lines[3] == f"    base64 {base64.b64encode(b'garbage!').decode()}"


def test_a_dead_letter_that_decodes_says_what_it_is() -> None:
    # e.g. a valid record rejected for another reason (oversized, wrong partition...).
    value = encode(COMMAND, RECORDS[COMMAND])
    letter = dead_letter(value)
    dumped = render.inspect_record(raw(value, headers=tuple(letter.headers())))
    assert dumped.dead_letter is not None  # found by its headers, whatever the topic
    assert render.dumped_lines(dumped)[-1].startswith("    decodes as command task.assign")
    assert render.dumped_json(dumped)["value_base64"] is not None


def test_malformed_dead_letter_headers_are_shown() -> None:
    headers = (("ares.dlq.reason", b"oversized"), ("ares.dlq.source.partition", b"x"),
               ("ares.dlq.source.offset", b"9"), ("ares.dlq.time", b"yesterday"))
    dumped = render.inspect_record(raw(b"v", headers=headers), dead_letters=True)
    letter = dumped.dead_letter
    assert letter is not None
    assert (letter.reason, letter.source_partition, letter.source_offset) == ("oversized", -1, 9)
    assert "malformed dead-letter headers" in letter.detail


def test_a_record_without_headers_on_the_dlq() -> None:
    dumped = render.inspect_record(raw(b"v"), dead_letters=True)
    assert dumped.dead_letter is not None
    assert render.dumped_json(dumped)["dead_letter"]["reason"] == "unknown"
