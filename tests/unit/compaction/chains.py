"""Sealed streams and a partition log for the compactor's pure logic."""

from __future__ import annotations

from collections.abc import Sequence

from ares.compactor.index import PartitionIndex
from ares.compactor.summariser import EventFact
from ares.events.chain import seal_encoded
from ares.events.model import Event, NewEvent, StreamHead
from tests.unit.compaction.workload import agent_events


def sealed(stream_id: str, news: Sequence[NewEvent], head: StreamHead | None = None,
           ) -> list[Event]:
    head = head or StreamHead()
    out = []
    for new in news:
        event = seal_encoded(stream_id, head, new, head.version + 1)[0]
        head = StreamHead(event.version, event.hash)
        out.append(event)
    return out


def agent_stream(stream_id: str, count: int) -> list[Event]:
    return sealed(stream_id, agent_events(stream_id, count))


def facts(events: Sequence[Event], first_offset: int = 0) -> list[EventFact]:
    return [EventFact.of(e, first_offset + i) for i, e in enumerate(events)]


def interleave(streams: dict[str, list[Event]], log_start: int = 0,
               ) -> tuple[PartitionIndex, dict[tuple[str, int], int]]:
    """One partition holding the streams round-robin; the index and (stream, version) ->
    offset."""
    index = PartitionIndex("ares.events", 0)
    offsets: dict[tuple[str, int], int] = {}
    cursors = dict.fromkeys(streams, 0)
    offset = log_start
    while any(cursors[s] < len(streams[s]) for s in streams):
        for stream_id, events in streams.items():
            i = cursors[stream_id]
            if i < len(events):
                index.observe(offset, events[i])
                offsets[(stream_id, events[i].version)] = offset
                cursors[stream_id] = i + 1
                offset += 1
    index.end_offset = offset
    return index, offsets
