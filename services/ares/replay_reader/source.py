"""Ports of the replay reader: where a stream's events and its summaries come from.

``EventSource`` is what a ``ReplaySession`` reads: the Kafka adapter
(``ares.replay_reader.kafka_source``) seeks through the PostgreSQL stream index and scans
when it is down; ``MemorySource`` serves a list (unit tests, golden logs).

``SummarySource`` is the compactor's hook (issue 7): once the head of a stream is trimmed
from ``ares.events``, its history lives on as summaries, each anchored to the chain by the
hash of the last event it covers. The audit accepts a stream whose log begins at version
``k > 1`` only when a chain of summaries covers versions ``1..k-1``, the last anchored to
the ``prev_hash`` of event ``k``; a replay starts folding there and says what was
summarised. The compactor's reader adapts to this port (its ``Summary`` has every
field); until one is plugged in, ``NoSummaries`` says that nothing was ever trimmed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ares.errors import AresError
from ares.events.model import GENESIS_HASH, Event


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


class NoSummaries:
    """Nothing was ever compacted."""

    async def summaries(self, stream_id: str) -> list[SummaryAnchor]:
        return []


def anchor_for(summaries: Sequence[SummaryAnchor], first: Event) -> SummaryAnchor | None:
    """The last of a chain of summaries that covers versions ``1..first.version - 1``
    contiguously, each linked to the one before (``prev_hash``, when known), the last
    anchored to ``first`` (the first event the log still holds); None when the history
    before ``first`` is not accounted for."""
    version, digest, last = 0, GENESIS_HASH, None
    for summary in sorted(summaries, key=lambda s: s.from_version):
        if summary.to_version < first.version and summary.from_version == version + 1 and (
                summary.prev_hash is None or summary.prev_hash == digest):
            version, digest, last = summary.to_version, summary.anchor_hash, summary
    if last is not None and version == first.version - 1 and digest == first.prev_hash:
        return last
    return None


class MemorySource:
    """An ``EventSource`` over events held in memory (any order, any streams)."""

    def __init__(self, events: Iterable[Event]) -> None:
        self._streams: dict[str, list[Event]] = {}
        for event in events:
            self._streams.setdefault(event.stream_id, []).append(event)
        for stream in self._streams.values():
            stream.sort(key=lambda e: e.version)

    async def read(self, stream_id: str, from_version: int, limit: int) -> list[Event]:
        found = [e for e in self._streams.get(stream_id, ()) if e.version >= from_version]
        return found[:limit]

    async def head(self, stream_id: str) -> int:
        stream = self._streams.get(stream_id)
        return stream[-1].version if stream else 0

    async def version_at(self, stream_id: str, at: datetime) -> int:
        version = 0
        for event in self._streams.get(stream_id, ()):
            if event.timestamp > at:
                break
            version = event.version
        return version


# -- the stream index (the PostgreSQL projection implements it) ----------------------------


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
