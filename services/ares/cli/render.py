"""How ares records look to people and to scripts: one line of text, or one JSON object.

Pure functions, no I/O: ``ares events read|tail|dump`` feed them values and print what they
return. Everything shown comes from the log, which an audit tool must not trust: text is
kept on one line and control characters are escaped (a key or header holding an ANSI
escape sequence must not repaint the operator's terminal), and bytes become hex/base64.

A dumped Kafka record is decoded with the generic codec; a record that does not decode is
shown with the codec's reason and a preview of its bytes, never dropped and never fatal.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ares.errors import SchemaError
from ares.events.kafka import dlq
from ares.events.model import Event
from ares.events.wire.codec import decode
from ares.events.wire.schemas import (
    ALERT,
    COMMAND,
    EVENT,
    HEARTBEAT,
    REPLY,
    SCHEDULE,
    SNAPSHOT,
    CodecError,
)

PAYLOAD_WIDTH = 100  # characters of a payload shown on a human line
PREVIEW_BYTES = 32  # bytes of an undecodable value shown as hex
BASE64_INLINE_BYTES = 96  # values up to this size are shown whole in base64 (human mode)

# -- values ----------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """``value`` with datetimes as ISO 8601 and bytes as base64, ready for ``json.dumps``."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return b64(bytes(value))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def json_line(obj: Mapping[str, Any]) -> str:
    """One compact JSON object on one line (newlines inside strings are escaped)."""
    return json.dumps(jsonable(obj), ensure_ascii=False, separators=(",", ":"))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def one_line(text: str) -> str:
    """``text`` with every non-printable character escaped: one safe terminal line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shorten(text: str, width: int = PAYLOAD_WIDTH) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def short_json(value: Any, width: int = PAYLOAD_WIDTH) -> str:
    """Compact JSON of ``value``, cut to ``width`` characters."""
    return shorten(one_line(json.dumps(jsonable(value), ensure_ascii=False,
                                       separators=(",", ":"), sort_keys=True)), width)


def format_time(when: datetime | None) -> str:
    """UTC, millisecond precision, ``Z``: sortable and the same on every operator's screen."""
    if when is None:
        return "-"
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def time_of_ms(timestamp_ms: int) -> datetime | None:
    """A Kafka record timestamp (ms since the epoch, -1 when absent) as a datetime."""
    return None if timestamp_ms < 0 else datetime.fromtimestamp(timestamp_ms / 1000, UTC)


def bytes_preview(data: bytes, limit: int = PREVIEW_BYTES) -> str:
    """``12 bytes: 67 61 72 …`` — the size and the first ``limit`` bytes in hex."""
    shown = data[:limit].hex(" ")
    more = " …" if len(data) > limit else ""
    return f"{len(data)} bytes: {shown}{more}" if data else "0 bytes"


def key_text(key: bytes | None) -> str | None:
    """A record key as text (agent ids are UTF-8); None when absent or not UTF-8."""
    if key is None:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


def key_label(key: bytes | None) -> str:
    if key is None:
        return "(no key)"
    text = key_text(key)
    return one_line(text) if text is not None else "0x" + key[:PREVIEW_BYTES].hex()


# -- events ----------------------------------------------------------------------------------


def event_line(event: Event, *, with_stream: bool = False) -> str:
    """``v3  2026-01-02T03:04:05.678Z  task.assigned  [tests]  {"task_id":"t-1"}``."""
    stream = f"{one_line(event.stream_id)}  " if with_stream else ""
    return (f"{stream}v{event.version}  {format_time(event.timestamp)}  "
            f"{one_line(event.type)}  [{one_line(event.module)}]  "
            f"{short_json(event.payload)}")


def event_json(event: Event) -> dict[str, Any]:
    """The contract of ``--json``: exactly the Event fields, in the envelope's order."""
    return event.to_json()


# -- any decoded record ----------------------------------------------------------------------


def _event_summary(r: Mapping[str, Any]) -> str:
    return (f"v{r.get('version')} {r.get('type')} [{r.get('module')}] "
            f"stream={r.get('stream_id')} {short_json(r.get('payload'))}")


def _command_summary(r: Mapping[str, Any]) -> str:
    reply = f" reply_to={r['reply_to']}" if r.get("reply_to") else ""
    return (f"command {r.get('type')} stream={r.get('stream_id')} issuer={r.get('issuer')} "
            f"id={r.get('id')}{reply} {short_json(r.get('payload'))}")


def _reply_summary(r: Mapping[str, Any]) -> str:
    versions = "".join(f" {name}={r[name]}" for name in ("expected_version", "actual_version")
                       if r.get(name) is not None)
    message = f": {r['message']}" if r.get("message") else ""
    return (f"reply {r.get('status')} correlation={r.get('correlation_id')} "
            f"stream={r.get('stream_id')} v{r.get('stream_version')}{versions}{message}")


def _snapshot_summary(r: Mapping[str, Any]) -> str:
    state = r.get("state")
    size = len(state) if isinstance(state, bytes | bytearray) else 0
    return (f"snapshot stream={r.get('stream_id')} v{r.get('version')} "
            f"events_offset={r.get('events_offset')} kind={r.get('agent_kind')} "
            f"incarnation={r.get('incarnation')} state={size} bytes "
            f"({r.get('state_encoding')})")


def _heartbeat_summary(r: Mapping[str, Any]) -> str:
    agents = r.get("agents") or []
    names = ",".join(str(a.get("agent_id")) for a in agents if isinstance(a, Mapping))
    return (f"heartbeat worker={r.get('worker_id')} interval={r.get('interval_ms')}ms "
            f"agents={len(agents)}" + (f" {shorten(names, 60)}" if names else ""))


def _alert_summary(r: Mapping[str, Any]) -> str:
    return (f"alert {r.get('severity')} {r.get('kind')} stream={r.get('stream_id')} "
            f"source={r.get('source')}: {r.get('message')}")


def _schedule_summary(r: Mapping[str, Any]) -> str:
    last = r.get("last_tick")
    return (f"schedule {r.get('name')} agent={r.get('agent_id')} cron={r.get('cron')!r} "
            f"tz={r.get('timezone')} catchup={r.get('catchup')}"
            + (" paused" if r.get("paused") else "")
            + f" ticks={r.get('ticks')} last_tick={format_time(last) if last else '-'}"
            + f" fired_by={r.get('fired_by') or '-'}")


_SUMMARIES: Mapping[str, Callable[[Mapping[str, Any]], str]] = {
    EVENT: _event_summary,
    COMMAND: _command_summary,
    REPLY: _reply_summary,
    SNAPSHOT: _snapshot_summary,
    HEARTBEAT: _heartbeat_summary,
    ALERT: _alert_summary,
    SCHEDULE: _schedule_summary,
}


def record_summary(name: str, record: Mapping[str, Any]) -> str:
    """One line saying what a decoded record is (any ares record; others as short JSON)."""
    summary = _SUMMARIES.get(name)
    try:
        text = summary(record) if summary is not None else f"{name} {short_json(record)}"
    except (AttributeError, TypeError):  # a record that is not the shape its name says
        text = f"{name} {short_json(record)}"
    return one_line(text)


# -- dumped Kafka records --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One Kafka record as read, before any decoding."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    def header_names(self) -> set[str]:
        return {name for name, _ in self.headers}


@dataclass(frozen=True, slots=True)
class Decoded:
    """What a value turned out to be: a record, a codec error, or nothing (a tombstone)."""

    name: str | None = None
    record: Mapping[str, Any] | None = None
    reason: str | None = None
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.name is not None


@dataclass(frozen=True, slots=True)
class DumpedRecord:
    """A raw record with its decoding and, on the DLQ, its dead-letter headers."""

    raw: RawRecord
    decoded: Decoded
    dead_letter: dlq.DeadLetter | None = None

    @property
    def tombstone(self) -> bool:
        return self.raw.value is None


def decode_value(value: bytes | None) -> Decoded:
    """Decode with the generic codec; every failure becomes a reason, never an exception."""
    if value is None:
        return Decoded()
    try:
        name, record = decode(value)
    except CodecError as exc:
        return Decoded(reason=exc.reason, detail=exc.detail)
    except SchemaError as exc:
        return Decoded(reason="schema_error", detail=str(exc))
    except Exception as exc:  # an audit tool shows what it cannot read, and goes on
        return Decoded(reason="decoder_failure", detail=f"{type(exc).__name__}: {exc}")
    return Decoded(name, record)


def dead_letter_of(raw: RawRecord) -> dlq.DeadLetter:
    """The dead letter a DLQ record carries; malformed headers are shown, not fatal."""
    try:
        return dlq.DeadLetter.from_record(raw.key, raw.value, raw.headers)
    except ValueError as exc:
        found = {name: value.decode(errors="replace") for name, value in raw.headers}
        return dlq.DeadLetter(
            reason=found.get(dlq.REASON, "unknown"),
            detail=f"{found.get(dlq.DETAIL, '')} [malformed dead-letter headers: {exc}]",
            source_topic=found.get(dlq.SOURCE_TOPIC, ""),
            source_partition=_int_or(found.get(dlq.SOURCE_PARTITION), -1),
            source_offset=_int_or(found.get(dlq.SOURCE_OFFSET), -1),
            key=raw.key, value=raw.value, time=None)


def _int_or(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def inspect_record(raw: RawRecord, *, dead_letters: bool = False) -> DumpedRecord:
    """Decode ``raw``; read dead-letter headers when ``dead_letters`` or when it has them."""
    letter = None
    if dead_letters or dlq.REASON in raw.header_names():
        letter = dead_letter_of(raw)
    return DumpedRecord(raw, decode_value(raw.value), letter)


def dumped_json(dumped: DumpedRecord) -> dict[str, Any]:
    """The ``dump --json`` object: the same keys for every record, null where not relevant.

    ``value_base64`` holds the bytes of a value that did not decode and the original bytes
    of every dead letter (a dead letter exists to be inspected and replayed).
    """
    raw, decoded, letter = dumped.raw, dumped.decoded, dumped.dead_letter
    key = key_text(raw.key)
    show_bytes = raw.value is not None and (not decoded.ok or letter is not None)
    return {
        "topic": raw.topic,
        "partition": raw.partition,
        "offset": raw.offset,
        "timestamp": _iso(time_of_ms(raw.timestamp_ms)),
        "key": key,
        "key_base64": b64(raw.key) if raw.key is not None and key is None else None,
        "headers": {name: value.decode(errors="replace") for name, value in raw.headers},
        "size": None if raw.value is None else len(raw.value),
        "record": decoded.name,
        "value": jsonable(decoded.record) if decoded.record is not None else None,
        "error": (None if decoded.reason is None
                  else {"reason": decoded.reason, "detail": decoded.detail}),
        "value_base64": b64(raw.value) if show_bytes and raw.value is not None else None,
        "dead_letter": None if letter is None else dead_letter_json(letter),
    }


def dead_letter_json(letter: dlq.DeadLetter) -> dict[str, Any]:
    return {
        "reason": letter.reason,
        "detail": letter.detail,
        "source_topic": letter.source_topic,
        "source_partition": letter.source_partition,
        "source_offset": letter.source_offset,
        "time": _iso(letter.time),
    }


def dumped_lines(dumped: DumpedRecord) -> list[str]:
    """The human form: a head line, then indented detail lines where there is more to say."""
    raw, decoded, letter = dumped.raw, dumped.decoded, dumped.dead_letter
    head = (f"{raw.partition}:{raw.offset}  {format_time(time_of_ms(raw.timestamp_ms))}  "
            f"key={key_label(raw.key)}  ")
    if letter is not None:
        lines = [head + one_line(f"DEAD LETTER {letter.reason}: {letter.detail}"),
                 "    " + one_line(f"from {letter.source_topic or '?'}/"
                                   f"{letter.source_partition}@{letter.source_offset}, "
                                   f"rejected {format_time(letter.time)}")]
        lines += _bytes_lines("original", raw.value)
        if decoded.name is not None and decoded.record is not None:
            lines.append("    decodes as " + record_summary(decoded.name, decoded.record))
        return lines
    if dumped.tombstone:
        return [head + "tombstone (no value: deletes the key on compaction)"]
    if decoded.name is not None and decoded.record is not None:
        return [head + record_summary(decoded.name, decoded.record)]
    return [head + one_line(f"UNDECODABLE {decoded.reason}: {decoded.detail}"),
            *_bytes_lines("value", raw.value)]


def _bytes_lines(label: str, data: bytes | None) -> list[str]:
    if data is None:
        return [f"    {label}: none"]
    lines = [f"    {label} {bytes_preview(data)}"]
    if data and len(data) <= BASE64_INLINE_BYTES:
        lines.append(f"    base64 {b64(data)}")
    elif data:
        lines.append("    base64: use --json for the whole value")
    return lines


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()
