"""An in-memory EventStore for unit tests of pure logic; passes the same contract suite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from ares.errors import FencedError
from ares.events.model import ANY_VERSION, Direction, Event, EventFilter, NewEvent
from ares.events.subscription import Subscription
from ares.events.writer import StreamTable


@dataclass(slots=True)
class MemoryLog:
    """The shared "broker" of memory stores: the log, the streams, and the owner epoch."""

    events: list[Event] = field(default_factory=list)
    streams: dict[str, list[Event]] = field(default_factory=dict)
    table: StreamTable = field(default_factory=StreamTable)
    epoch: int = 0
    subscribers: list[tuple[EventFilter, asyncio.Queue[Event]]] = field(default_factory=list)


class MemoryEventStore:
    """Single-writer semantics like the Kafka store: opening a new store on the same
    ``MemoryLog`` fences the previous one (its next append raises ``FencedError``)."""

    def __init__(self, log: MemoryLog | None = None) -> None:
        self._log = log if log is not None else MemoryLog()
        self._log.epoch += 1
        self._epoch = self._log.epoch
        self._lock = asyncio.Lock()

    @property
    def log(self) -> MemoryLog:
        return self._log

    async def append(
        self, stream_id: str, events: Sequence[NewEvent], expected_version: int = ANY_VERSION
    ) -> int:
        async with self._lock:
            if self._epoch != self._log.epoch:
                raise FencedError(
                    f"this writer (epoch {self._epoch}) was fenced by a newer owner "
                    f"(epoch {self._log.epoch})"
                )
            plan = self._log.table.plan(stream_id, events, expected_version)
            self._log.table.apply(plan)
            self._log.events.extend(plan.events)
            self._log.streams.setdefault(stream_id, []).extend(plan.events)
        for event in plan.events:
            for event_filter, queue in self._log.subscribers:
                if event_filter.matches(event):
                    queue.put_nowait(event)
        return plan.version

    async def read(
        self,
        stream_id: str,
        from_version: int | None = None,
        limit: int | None = None,
        direction: Direction = Direction.FORWARD,
    ) -> list[Event]:
        stream = self._log.streams.get(stream_id, [])
        if direction is Direction.FORWARD:
            start = max((from_version or 1) - 1, 0)
            selected = stream[start:]
        else:
            end = len(stream) if from_version is None else min(from_version, len(stream))
            selected = stream[:end][::-1]
        return selected if limit is None else selected[:limit]

    async def read_all(self) -> AsyncIterator[Event]:
        for event in list(self._log.events):
            yield event

    def subscribe(self, event_filter: EventFilter) -> Subscription:
        queue: asyncio.Queue[Event] = asyncio.Queue()
        entry = (event_filter, queue)
        self._log.subscribers.append(entry)
        return Subscription(queue, lambda: self._log.subscribers.remove(entry))

    async def stream_version(self, stream_id: str) -> int:
        return self._log.table.head(stream_id).version

    async def close(self) -> None:
        return None
