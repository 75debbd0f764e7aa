"""What the compactor knows of one ``ares.events`` partition, built by scanning it.

Per stream: where each of its versions still in the log lies (an array of offsets, 8 bytes
an event), its head, and the ``EventFact`` of every event not yet summarised. The service
keeps an index between passes and scans only what was appended since; a one-off pass
(`ares compaction run --once`, `status`) builds one from the log start.
"""

from __future__ import annotations

import bisect
import logging
from array import array
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from ares.compactor.summariser import EventFact
from ares.events.kafka.reader import PartitionScanner
from ares.events.model import Event
from ares.lifecycle import events as ev

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StreamIndex:
    stream_id: str
    first_version: int  # first version still in the log
    offsets: array[int] = field(default_factory=lambda: array("q"))
    head_hash: str = ""
    head_at_us: int = 0
    facts: list[EventFact] = field(default_factory=list)  # unsummarised, version order
    kind: str | None = None  # agent kind, from an agent.started met in the log
    broken: str | None = None  # why the log of this stream cannot be trusted

    @property
    def head_version(self) -> int:
        return self.first_version + len(self.offsets) - 1

    @property
    def first_offset(self) -> int:
        return self.offsets[0]

    @property
    def head_offset(self) -> int:
        return self.offsets[-1]

    def offset_of(self, version: int) -> int | None:
        i = version - self.first_version
        return self.offsets[i] if 0 <= i < len(self.offsets) else None

    def first_offset_after(self, version: int) -> int | None:
        """Offset of the first event still in the log with a version above ``version``."""
        return self.offset_of(max(version + 1, self.first_version))

    def facts_between(self, first: int, last: int) -> list[EventFact]:
        lo = bisect.bisect_left(self.facts, first, key=lambda f: f.version)
        hi = bisect.bisect_right(self.facts, last, key=lambda f: f.version)
        return self.facts[lo:hi]

    def forget_facts_through(self, version: int) -> None:
        cut = bisect.bisect_right(self.facts, version, key=lambda f: f.version)
        if cut:
            del self.facts[:cut]

    def forget_offsets_before(self, offset: int) -> bool:
        """Drop the versions trimmed from the log; False when none of the stream is left."""
        cut = bisect.bisect_left(self.offsets, offset)
        if cut:
            del self.offsets[:cut]
            self.first_version += cut
        return len(self.offsets) > 0


class PartitionIndex:
    """The streams of one partition of ``ares.events``, up to ``next_offset``."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.streams: dict[str, StreamIndex] = {}
        self.next_offset: int | None = None  # where the next update scans from
        # Per stream, the version through which it is summarised: no facts kept for those.
        self.summarised: dict[str, int] = {}
        self.log_start = 0
        self.end_offset = 0  # the LSO of the last update

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def observe(self, offset: int, event: Event) -> None:
        """Take the next event of the partition, in log order (pure)."""
        stream = self.streams.get(event.stream_id)
        if stream is None:
            stream = self.streams[event.stream_id] = StreamIndex(event.stream_id, event.version)
        elif stream.broken is None and event.version != stream.head_version + 1:
            what = "duplicate" if event.version <= stream.head_version else "gap"
            stream.broken = (f"{what}: version {event.version} at offset {offset} after "
                             f"version {stream.head_version}")
            log.error("compactor: stream %s on %s/%d: %s; it is neither summarised nor "
                      "trimmed past", event.stream_id, self.topic, self.partition, stream.broken)
        if stream.broken is not None and event.version != stream.head_version + 1:
            return
        fact = EventFact.of(event, offset)
        stream.offsets.append(offset)
        stream.head_hash = event.hash
        stream.head_at_us = fact.timestamp_us
        if event.type == ev.AGENT_STARTED and isinstance(event.payload.get("kind"), str):
            stream.kind = str(event.payload["kind"])
        if event.version > self.summarised.get(event.stream_id, 0):
            stream.facts.append(fact)

    def forget_before(self, log_start: int) -> None:
        """The log now starts at ``log_start`` (a trim): drop what is gone."""
        self.log_start = max(self.log_start, log_start)
        for stream_id in list(self.streams):
            if not self.streams[stream_id].forget_offsets_before(self.log_start):
                del self.streams[stream_id]

    async def update(self, scanner: PartitionScanner, log_start: int) -> int:
        """Scan what was appended since the last update; the number of events read.

        ``log_start``: the partition's current first offset. Starts over from there when
        the log no longer holds ``next_offset`` (trimmed by someone else since)."""
        tp = self.tp
        if self.next_offset is not None and log_start > self.next_offset:
            log.warning("compactor: %s/%d was trimmed past the index (%d > %d): rescanning",
                        self.topic, self.partition, log_start, self.next_offset)
            self.streams.clear()
            self.next_offset = None
        self.forget_before(log_start)
        start = self.next_offset if self.next_offset is not None else log_start
        end = await scanner.last_stable_offset(tp)
        read, last = 0, start - 1
        if start < end:
            # The scan may go past ``end`` (it reads to the LSO at its own start).
            async for offset, event in scanner.scan(tp, start):
                self.observe(offset, event)
                read, last = read + 1, offset
        self.next_offset = max(end, start, last + 1)
        self.end_offset = end
        return read
