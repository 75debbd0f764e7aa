"""The replay reader's in-memory ``EventSource`` and the rule that anchors summaries.

The ports (``EventSource``, ``SummarySource``, ``SummaryAnchor``, ``StreamIndex``) live in
``ares.events.ports``. ``MemorySource`` serves a list (unit tests, golden logs); the Kafka
adapter (``ares.replay_reader.kafka_source``) seeks through the PostgreSQL stream index and
scans when it is down.

Once the head of a stream is trimmed from ``ares.events``, its history lives on as
summaries, each anchored to the chain by the hash of the last event it covers. The audit
accepts a stream whose log begins at version ``k > 1`` only when a chain of summaries
covers versions ``1..k-1``, the last anchored to the ``prev_hash`` of event ``k``
(``anchor_for``); a replay starts folding there and says what was summarised. Until a
summary source is plugged in, ``NoSummaries`` says that nothing was ever trimmed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from ares.events.model import GENESIS_HASH, Event
from ares.events.ports import SummaryAnchor


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


