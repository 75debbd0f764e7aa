"""Command and Reply values and their wire form (Avro, ``ares.v1.Command``/``Reply``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from ares.errors import SchemaError
from ares.events.model import NewEvent, new_event_id, utc_now
from ares.events.wire.codec import decode, default_codec, encode
from ares.events.wire.schemas import COMMAND, COMMAND_PAYLOADS, REPLY, CodecError

# Command metadata: epoch milliseconds after which the sender no longer waits for it.
DEADLINE = "ares.deadline_ms"
# agent.signal: a signal's payload is a value for a decision (an approval, a webhook's
# gist), not a document: kept small, as it stays in the agent's state until consumed.
MAX_SIGNAL_PAYLOAD_BYTES = 64 * 1024
MAX_SIGNAL_NAME = 200


class InvalidCommandError(CodecError):
    """A well-formed command the owner cannot accept (unknown kind, bad config or input):
    rejected with its reason, and the original record dead-lettered."""


class ReplyStatus(StrEnum):
    OK = "ok"
    CONFLICT = "conflict"
    REJECTED = "rejected"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Command:
    """A request to the owner of ``stream_id``; ``id`` is also its reply's correlation id."""

    type: str
    stream_id: str
    payload: Mapping[str, Any]
    issuer: str = "cli"
    id: str = field(default_factory=new_event_id)
    timestamp: datetime = field(default_factory=utc_now)
    reply_to: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return encode(COMMAND, {
            "id": self.id, "stream_id": self.stream_id, "type": self.type,
            "issuer": self.issuer, "timestamp": self.timestamp, "payload": dict(self.payload),
            "reply_to": self.reply_to, "metadata": dict(self.metadata),
        })

    @classmethod
    def decode(cls, data: bytes) -> Command:
        name, record = decode(data)
        if name != COMMAND:
            raise CodecError("schema_mismatch", f"expected a {COMMAND}, got a {name}")
        if record["type"] not in COMMAND_PAYLOADS:
            raise CodecError("unknown_command", f"command type {record['type']!r} is not one of "
                             f"{sorted(COMMAND_PAYLOADS)}")
        return cls(type=record["type"], stream_id=record["stream_id"],
                   payload=record["payload"], issuer=record["issuer"], id=record["id"],
                   timestamp=record["timestamp"], reply_to=record.get("reply_to"),
                   metadata=record.get("metadata") or {})

    def expired(self, now_ms: int) -> bool:
        """Whether its sender's deadline has passed (the sender reported it as not done)."""
        raw = self.metadata.get(DEADLINE)
        try:
            return raw is not None and now_ms > int(raw)
        except ValueError:
            return False

    def events(self) -> list[NewEvent]:
        """The proposed events of an ``events.append`` command."""
        proposed = []
        for raw in self.payload["events"]:
            try:
                payload = json.loads(raw["payload_json"])
            except json.JSONDecodeError as exc:
                raise SchemaError(f"invalid_payload: event {raw['id']}: payload_json is not "
                                  f"JSON: {exc}") from exc
            proposed.append(NewEvent(type=raw["type"], module=raw["module"], payload=payload,
                                     metadata=raw.get("metadata") or {}, id=raw["id"],
                                     timestamp=raw.get("timestamp")))
        return proposed


def append_command(stream_id: str, events: Sequence[NewEvent], expected_version: int,
                   issuer: str = "cli") -> Command:
    codec = default_codec()
    return Command(type="events.append", stream_id=stream_id, issuer=issuer, payload={
        "expected_version": expected_version,
        "events": [{
            "id": e.id, "type": e.type, "module": e.module,
            # Validated here, at the edge, so a bad payload fails the caller, not the owner.
            "payload_json": codec.prepare_payload(e.type, e.payload).datum.get("json")
            or json.dumps(dict(e.payload), sort_keys=True, separators=(",", ":")),
            "metadata": dict(e.metadata), "timestamp": e.timestamp,
        } for e in events],
    })


@dataclass(frozen=True, slots=True)
class Reply:
    """The owner's answer to one command."""

    correlation_id: str
    status: ReplyStatus
    stream_id: str = ""
    stream_version: int = 0
    expected_version: int | None = None
    actual_version: int | None = None
    message: str = ""
    timestamp: datetime = field(default_factory=utc_now)

    def encode(self) -> bytes:
        return encode(REPLY, {
            "correlation_id": self.correlation_id, "status": str(self.status),
            "stream_id": self.stream_id, "stream_version": self.stream_version,
            "expected_version": self.expected_version, "actual_version": self.actual_version,
            "message": self.message, "timestamp": self.timestamp,
        })


def decode_reply(data: bytes) -> Reply:
    name, record = decode(data)
    if name != REPLY:
        raise CodecError("schema_mismatch", f"expected a {REPLY}, got a {name}")
    return Reply(correlation_id=record["correlation_id"], status=ReplyStatus(record["status"]),
                 stream_id=record["stream_id"], stream_version=record["stream_version"],
                 expected_version=record.get("expected_version"),
                 actual_version=record.get("actual_version"), message=record["message"],
                 timestamp=record["timestamp"])


# Event metadata naming the command that caused an event: the audit trail of who asked.
COMMAND_ID = "ares.command.id"
COMMAND_ISSUER = "ares.command.issuer"


def with_command_metadata(events: Sequence[NewEvent], command: Command) -> list[NewEvent]:
    """``events`` stamped with the id and issuer of the command that caused them."""
    stamp = {COMMAND_ID: command.id, COMMAND_ISSUER: command.issuer}
    return [replace(e, metadata={**e.metadata, **stamp}) for e in events]
