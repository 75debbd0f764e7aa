"""The summary record: what a compacted range of a stream was, anchored to its hash chain.

One record per covered range ``[from_version, to_version]`` of a stream on
``ares.summaries``, keyed ``<stream>:<from>-<to>`` so that log compaction keeps every live
summary of a stream (a key per agent would keep only the latest). The key is not the agent
id, so records are sent to the stream's partition explicitly: ``ares.summaries`` stays
co-partitioned with ``ares.events``.

The record is an ``ares.v1.Event`` of type ``summary`` with the typed ``SummaryWritten``
payload (``from_version``, ``to_version``, ``text``, ``facts_json``). Its envelope places
the summary in the chain it replaces: ``prev_hash`` is the hash of the event before
``from_version`` (64 zeros for version 1) and ``hash`` is the **anchor**, the hash of the
event at ``to_version``. ``facts_json`` repeats both next to the offsets and the facts, so
nothing depends on reading the envelope that way. A summary is not an event of the stream:
it never appears in ``ares.events`` and its ``hash`` is not a content hash.

Reads of a trimmed range return ``Summary.to_event()``: a synthetic event of type
``event.summary`` carrying the same anchor.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ares.errors import SchemaError
from ares.events.model import Event
from ares.events.wire.canonical import canonical_json
from ares.events.wire.codec import decode_event, encode
from ares.events.wire.schemas import EVENT

SUMMARY_TYPE = "summary"  # the record on ares.summaries (typed payload SummaryWritten)
SYNTHETIC_TYPE = "event.summary"  # what reads of a trimmed range return in its place
MODULE = "compactor"
FORMAT = 1
# Deterministic record ids: a summary rewritten after a restart is the same record.
_ID_NAMESPACE = uuid.UUID("6d1f4a52-3c1b-4f0e-9a57-5b7c2f0e8a11")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def summary_key(stream_id: str, from_version: int, to_version: int) -> str:
    return f"{stream_id}:{from_version}-{to_version}"


def parse_summary_key(key: str) -> tuple[str, int, int] | None:
    """(stream, from, to) of a summary key; None for other keys (trim records)."""
    stream_id, sep, span = key.rpartition(":")
    first, dash, last = span.partition("-")
    if not sep or not dash or not first.isdigit() or not last.isdigit():
        return None
    return stream_id, int(first), int(last)


def from_micros(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def to_micros(ts: datetime) -> int:
    aware = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class SummaryFacts:
    """What happened in a range, counted by rules (no LLM): the basis of the text."""

    event_count: int = 0
    tasks: tuple[str, ...] = ()  # task ids in first-seen order, at most MAX_TASK_IDS
    task_count: int = 0  # distinct tasks (may exceed len(tasks))
    tasks_completed: int = 0
    tasks_failed: int = 0
    tool_calls: Mapping[str, int] = field(default_factory=dict)  # tool -> calls
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    models: tuple[str, ...] = ()
    deaths: int = 0
    resurrections: int = 0
    snapshots: int = 0
    types: Mapping[str, int] = field(default_factory=dict)  # event type -> count
    request: str | None = None  # the user request the range was bound to
    outcome: str = "idle"
    first_at_us: int = 0
    last_at_us: int = 0

    @property
    def tool_call_count(self) -> int:
        return sum(self.tool_calls.values())

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def span_s(self) -> float:
        return max(self.last_at_us - self.first_at_us, 0) / 1_000_000

    def to_json(self) -> dict[str, Any]:
        return {
            "event_count": self.event_count, "tasks": list(self.tasks),
            "task_count": self.task_count, "tasks_completed": self.tasks_completed,
            "tasks_failed": self.tasks_failed, "tool_calls": dict(self.tool_calls),
            "llm_calls": self.llm_calls, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "models": list(self.models),
            "deaths": self.deaths, "resurrections": self.resurrections,
            "snapshots": self.snapshots, "types": dict(self.types), "request": self.request,
            "outcome": self.outcome, "first_at_us": self.first_at_us,
            "last_at_us": self.last_at_us,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SummaryFacts:
        try:
            return cls(
                event_count=int(data["event_count"]), tasks=tuple(map(str, data["tasks"])),
                task_count=int(data["task_count"]),
                tasks_completed=int(data["tasks_completed"]),
                tasks_failed=int(data["tasks_failed"]),
                tool_calls={str(k): int(v) for k, v in data["tool_calls"].items()},
                llm_calls=int(data["llm_calls"]), prompt_tokens=int(data["prompt_tokens"]),
                completion_tokens=int(data["completion_tokens"]),
                models=tuple(map(str, data["models"])), deaths=int(data["deaths"]),
                resurrections=int(data["resurrections"]), snapshots=int(data["snapshots"]),
                types={str(k): int(v) for k, v in data["types"].items()},
                request=None if data["request"] is None else str(data["request"]),
                outcome=str(data["outcome"]), first_at_us=int(data["first_at_us"]),
                last_at_us=int(data["last_at_us"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SchemaError(f"invalid_payload: summary facts: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class Summary:
    """Events ``from_version..to_version`` of ``stream_id``, summarised and anchored."""

    stream_id: str
    from_version: int
    to_version: int
    from_offset: int  # ares.events offset (the stream's partition) of from_version
    to_offset: int  # ... and of to_version
    prev_hash: str  # hash of the event before from_version (genesis: 64 zeros)
    anchor_hash: str  # hash of the event at to_version
    facts: SummaryFacts
    text: str

    @property
    def key(self) -> str:
        return summary_key(self.stream_id, self.from_version, self.to_version)

    @property
    def event_count(self) -> int:
        return self.to_version - self.from_version + 1

    @property
    def outcome(self) -> str:
        return self.facts.outcome

    @property
    def record_id(self) -> str:
        return str(uuid.uuid5(_ID_NAMESPACE, f"{self.key}:{self.anchor_hash}"))

    def covers(self, version: int) -> bool:
        return self.from_version <= version <= self.to_version

    def facts_document(self) -> dict[str, Any]:
        return {"format": FORMAT, "from_offset": self.from_offset,
                "to_offset": self.to_offset, "prev_hash": self.prev_hash,
                "anchor_hash": self.anchor_hash, "event_count": self.event_count,
                "outcome": self.outcome, "facts": self.facts.to_json()}

    def encode(self) -> bytes:
        """The ``ares.summaries`` record value (same summary, same bytes)."""
        return encode(EVENT, {
            "id": self.record_id, "stream_id": self.stream_id, "type": SUMMARY_TYPE,
            "module": MODULE, "version": self.to_version,
            "timestamp": self.facts.last_at_us,
            "payload": {"from_version": self.from_version, "to_version": self.to_version,
                        "text": self.text, "facts_json": canonical_json(self.facts_document())},
            "metadata": {}, "prev_hash": self.prev_hash, "hash": self.anchor_hash,
        })

    @classmethod
    def decode(cls, data: bytes) -> Summary:
        return cls.from_record(decode_event(data))

    @classmethod
    def from_record(cls, event: Event) -> Summary:
        if event.type != SUMMARY_TYPE:
            raise SchemaError(f"schema_mismatch: expected a {SUMMARY_TYPE!r} record, got "
                              f"{event.type!r}")
        payload = event.payload
        try:
            doc = json.loads(str(payload.get("facts_json") or "{}"))
            return cls(
                stream_id=event.stream_id, from_version=int(payload["from_version"]),
                to_version=int(payload["to_version"]),
                from_offset=int(doc["from_offset"]), to_offset=int(doc["to_offset"]),
                # Typed fields first (a later SummaryWritten may carry them), then the facts.
                prev_hash=str(payload.get("prev_hash") or doc["prev_hash"]),
                anchor_hash=str(payload.get("anchor_hash") or doc["anchor_hash"]),
                facts=SummaryFacts.from_json(doc["facts"]), text=str(payload["text"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"invalid_payload: summary of {event.stream_id!r}: "
                              f"{exc!r}") from exc

    def to_event(self) -> Event:
        """The synthetic ``event.summary`` a read of the trimmed range returns.

        ``version`` is the last covered version and ``prev_hash``/``hash`` are the chain
        hashes around the range, so a reader can check that it continues the chain.
        """
        return Event(
            id=self.record_id, stream_id=self.stream_id, type=SYNTHETIC_TYPE, module=MODULE,
            version=self.to_version, timestamp=from_micros(self.facts.last_at_us),
            payload={
                "summary_text": self.text, "event_count": self.event_count,
                "outcome": self.outcome, "from_version": self.from_version,
                "to_version": self.to_version, "anchor_hash": self.anchor_hash,
                "prev_hash": self.prev_hash, "from_offset": self.from_offset,
                "to_offset": self.to_offset, "facts": self.facts.to_json(),
            },
            metadata={"ares.synthetic": "true"}, prev_hash=self.prev_hash,
            hash=self.anchor_hash,
        )


def is_summary_event(event: Event) -> bool:
    return event.type == SYNTHETIC_TYPE


def summary_range(event: Event) -> tuple[int, int]:
    """(from_version, to_version) of a synthetic ``event.summary``."""
    return int(event.payload["from_version"]), int(event.payload["to_version"])


__all__ = [
    "MODULE", "SUMMARY_TYPE", "SYNTHETIC_TYPE", "Summary", "SummaryFacts",
    "is_summary_event", "parse_summary_key", "summary_key", "summary_range",
]
