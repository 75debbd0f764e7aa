"""Sealed event streams for the runtime's pure logic: real hashes, chosen timestamps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ares.events.chain import seal_encoded
from ares.events.model import Event, NewEvent, StreamHead

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EPOCH0 = T0.timestamp()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class Stream:
    """Appends sealed events to one stream; ``at`` is seconds after ``T0``."""

    stream_id: str
    head: StreamHead = field(default_factory=StreamHead)
    events: list[Event] = field(default_factory=list)

    def add(self, type_: str, payload: Mapping[str, Any] | None = None, at_s: float = 0.0,
            metadata: Mapping[str, str] | None = None) -> Event:
        new = NewEvent(type_, "tests", dict(payload or {}), dict(metadata or {}),
                       timestamp=at(at_s))
        event = seal_encoded(self.stream_id, self.head, new, self.head.version + 1)[0]
        self.head = StreamHead(event.version, event.hash)
        self.events.append(event)
        return event


@dataclass
class PartitionLog:
    """One partition of ares.events: events of several streams, offset = list index."""

    log_start: int = 0
    records: list[Event] = field(default_factory=list)
    streams: dict[str, Stream] = field(default_factory=dict)

    def add(self, stream_id: str, type_: str, payload: Mapping[str, Any] | None = None,
            at_s: float = 0.0) -> tuple[int, Event]:
        stream = self.streams.setdefault(stream_id, Stream(stream_id))
        event = stream.add(type_, payload, at_s)
        self.records.append(event)
        return self.log_start + len(self.records) - 1, event

    def scan(self, from_offset: int) -> list[tuple[int, Event]]:
        start = max(from_offset, self.log_start) - self.log_start
        return [(self.log_start + i, e) for i, e in enumerate(self.records) if i >= start]

    def first_offset(self, stream_id: str) -> int:
        return next(o for o, e in self.scan(0) if e.stream_id == stream_id)
