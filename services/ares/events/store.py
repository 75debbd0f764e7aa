"""The ports of the event store. Adapters (memory, Kafka) live in modules of their own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from ares.events.model import Direction, Event, EventFilter, NewEvent
from ares.events.subscription import Subscription


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
