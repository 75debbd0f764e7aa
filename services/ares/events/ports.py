"""The ports of the event log, in one module: what the services and the SDK depend on,
each with its adapters in modules of their own (memory, Kafka, PostgreSQL).

=================  ========================================================================
``EventStore``     append-only streams with optimistic concurrency: ``events.memory``,
                   ``events.kafka_store``
``EventSource``    what a replay reads: ``replay_reader.source.MemorySource``,
                   ``replay_reader.kafka_source.KafkaStreamReader``,
                   ``compactor.reader.SummarisedReader`` (tests/contract/ holds each to one
                   contract)
``SummarySource``  the summaries of trimmed history, each a ``SummaryAnchor``
``StreamIndex``    stream -> (partition, offset) for fast seeks: the PostgreSQL projection
=================  ========================================================================
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ares.errors import AresError
from ares.events.model import Direction, Event, EventFilter, NewEvent
from ares.events.subscription import Subscription

__all__ = [
    "EventSource",
    "EventStore",
    "IndexEntry",
    "IndexSlice",
    "IndexUnavailableError",
    "StreamIndex",
    "SummaryAnchor",
    "SummarySource",
]


class EventStore(Protocol):
    """Append-only streams of events with optimistic concurrency.

    ``expected_version``: ``0`` the stream must be empty, ``-1`` no check, ``n > 0`` the
    stream must be at exactly ``n``; otherwise ``ConflictError`` naming both versions.
    Re-appending events whose ids are already in the stream is a no-op that returns the
    stream version they were written at (retry-safe).
    """

    async def append(
        self, stream_id: str, events: Sequence[NewEvent], expected_version: int = -1
    ) -> int:
        """Append atomically; returns the stream's new version."""
        ...

    async def read(
        self,
        stream_id: str,
        from_version: int | None = None,
        limit: int | None = None,
        direction: Direction = Direction.FORWARD,
    ) -> list[Event]:
        """Events of one stream, ``limit`` at most. Forward reads go up from ``from_version``
        (default 1); backward reads go down from it (default: the last event)."""
        ...

    def read_all(self) -> AsyncIterator[Event]:
        """Every committed event of every stream, in log order."""
        ...

    def subscribe(self, event_filter: EventFilter) -> Subscription:
        """Live events appended after the call that match the filter."""
        ...

    async def stream_version(self, stream_id: str) -> int:
        """0 for an unknown stream."""
        ...

    async def close(self) -> None: ...


class EventSource(Protocol):
    async def read(self, stream_id: str, from_version: int, limit: int) -> list[Event]:
        """Up to ``limit`` events of the stream from ``from_version`` on, in version order
        (what the log holds: a replay verifies it, so a source never repairs anything)."""
        ...

    async def head(self, stream_id: str) -> int:
        """The stream's last version as the log holds it; 0 for an unknown stream."""
        ...

    async def version_at(self, stream_id: str, at: datetime) -> int:
        """The stream's version as of ``at``: the events before the first one whose
        timestamp is after ``at`` (0 when the first event is after it)."""
        ...


@dataclass(frozen=True, slots=True)
class SummaryAnchor:
    """A summary of versions ``from_version..to_version`` of a stream, anchored by the hash
    of the event at ``to_version`` (what the compactor writes to ``ares.summaries``)."""

    stream_id: str
    from_version: int
    to_version: int
    anchor_hash: str
    prev_hash: str | None = None  # hash before from_version (zeros for 1); None: unknown
    text: str = ""
    event_count: int = 0
    outcome: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id, "from_version": self.from_version,
                "to_version": self.to_version, "anchor_hash": self.anchor_hash,
                "prev_hash": self.prev_hash, "text": self.text,
                "event_count": self.event_count, "outcome": self.outcome}


class SummarySource(Protocol):
    async def summaries(self, stream_id: str) -> list[SummaryAnchor]:
        """The stream's summaries, oldest first."""
        ...


class IndexUnavailableError(AresError):
    """The stream index cannot be asked (PostgreSQL down, schema missing): read the log."""

    retriable = True


@dataclass(frozen=True, slots=True)
class IndexEntry:
    version: int
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class IndexSlice:
    """Index entries of one stream, and ``projected``: the offset of the stream's partition
    below which every event is in the index (the projector's position)."""

    entries: Sequence[IndexEntry]
    projected: int


class StreamIndex(Protocol):
    async def locate(self, stream_id: str, partition: int, from_version: int,
                     limit: int) -> IndexSlice:
        """Up to ``limit`` entries from ``from_version`` on, in version order."""
        ...

    async def version_after(self, stream_id: str, partition: int,
                            at: datetime) -> tuple[int | None, int]:
        """The first indexed version whose timestamp is after ``at`` (None: none is), and
        the projected offset of the partition."""
        ...

    async def last(self, stream_id: str, partition: int) -> tuple[IndexEntry | None, int]:
        """The stream's last indexed entry (None: none), and the projected offset."""
        ...
