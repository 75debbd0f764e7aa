"""Reads that survive trimming: summaries in place of the events the log no longer holds.

``SummarisedReader.read`` answers like ``EventStore.read``. Where the stream's first events
were trimmed from ``ares.events``, the summaries covering them come first, as synthetic
``event.summary`` events (``summary_text``, ``event_count``, ``outcome``, covered
versions, anchor hash), then the raw events still in the log. A summary may end inside the
raw events (the partition was trimmed short of it): both are returned, and the raw event at
the summary's last version must carry the anchor hash.

``verify_summarised`` is the audit's check of such a read: every summary continues the
chain where the previous item left it (``prev_hash``), every raw event after a summary
follows its anchor, and versions missing with no summary to cover them are a truncation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from aiokafka.errors import KafkaError

from ares.config import Settings
from ares.events.chain import ChainError, verify_chain
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.routing import partition_for
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Direction, Event, StreamHead
from ares.events.ports import SummaryAnchor
from ares.summaries.record import Summary, is_summary_event, summary_range
from ares.summaries.store import load_summaries
from ares.topics import EVENTS, SUMMARIES, TopicPlan, load_topics

TRUNCATED = "truncated"
ANCHOR_MISMATCH = "anchor_mismatch"


class SummarisedReader:
    """``read``/``stream_version`` of the event store, with summaries for trimmed ranges."""

    def __init__(self, store: KafkaEventStore, scanner: PartitionScanner,
                 summaries_topic: str) -> None:
        self.store = store
        self._scanner = scanner
        self._summaries_topic = summaries_topic

    @classmethod
    async def open(cls, settings: Settings, plan: TopicPlan | None = None) -> SummarisedReader:
        """A reader that owns no partition (safe beside running services)."""
        plan = plan or load_topics(settings)
        store = await KafkaEventStore.open(settings, owned=[], topic=plan.name(EVENTS))
        return await cls.wrap(store, settings, plan)

    @classmethod
    async def wrap(cls, store: KafkaEventStore, settings: Settings,
                   plan: TopicPlan | None = None) -> SummarisedReader:
        """A reader over an open store (it takes it over: ``close`` closes both)."""
        plan = plan or load_topics(settings)
        try:
            scanner = await PartitionScanner.open(settings)
        except BaseException:
            await store.close()
            raise
        return cls(store, scanner, plan.name(SUMMARIES))

    async def close(self) -> None:
        await self.store.close()
        await self._scanner.close()

    async def summaries(self, stream_id: str) -> list[Summary]:
        """Every live summary of ``stream_id``, in version order."""
        partition = partition_for(stream_id, self.store.partitions)
        try:
            loaded = await load_summaries(self._scanner, self._summaries_topic, partition,
                                          stream_id)
        except KafkaError as exc:
            raise translate(exc, f"reading the summaries of {stream_id!r}") from exc
        return loaded.of(stream_id)

    async def read(self, stream_id: str, from_version: int | None = None,
                   limit: int | None = None,
                   direction: Direction = Direction.FORWARD) -> list[Event]:
        raw = await self.store.read(stream_id)
        if raw and raw[0].version == 1:
            return _select(raw, from_version, limit, direction)  # nothing trimmed
        return with_summaries(raw, await self.summaries(stream_id), from_version, limit,
                              direction)

    async def stream_version(self, stream_id: str) -> int:
        version = await self.store.stream_version(stream_id)
        if version:
            return version
        found = await self.summaries(stream_id)
        return found[-1].to_version if found else 0

    async def head(self, stream_id: str) -> int:
        """``EventSource.head``: the last version, summarised history included."""
        return await self.stream_version(stream_id)

    async def version_at(self, stream_id: str, at: datetime) -> int:
        """``EventSource.version_at``: the events before the first one stamped after ``at``."""
        version = 0
        for event in await self.read(stream_id):
            if event.timestamp > at:
                break
            version = event.version
        return version


class SummaryAnchors:
    """The replay reader's ``SummarySource`` (``ares.replay_reader.source``) over
    ``ares.summaries``: ``AuditScope(summaries=SummaryAnchors(reader))``."""

    def __init__(self, reader: SummarisedReader) -> None:
        self._reader = reader

    async def summaries(self, stream_id: str) -> list[SummaryAnchor]:
        return [anchor_of(s) for s in await self._reader.summaries(stream_id)]


def anchor_of(summary: Summary) -> SummaryAnchor:
    return SummaryAnchor(summary.stream_id, summary.from_version, summary.to_version,
                         summary.anchor_hash, summary.prev_hash, summary.text,
                         summary.event_count, summary.outcome)


def with_summaries(raw: Sequence[Event], summaries: Iterable[Summary],
                   from_version: int | None = None, limit: int | None = None,
                   direction: Direction = Direction.FORWARD) -> list[Event]:
    """Raw events of one stream (all that the log holds, in order) with the summaries of
    the versions before them in front, selected like ``EventStore.read``."""
    first_raw = raw[0].version if raw else None
    covering = [s.to_event() for s in sorted(summaries, key=lambda s: s.from_version)
                if first_raw is None or s.from_version < first_raw]
    return _select([*covering, *raw], from_version, limit, direction)


def _select(items: Sequence[Event], from_version: int | None, limit: int | None,
            direction: Direction) -> list[Event]:
    if direction is Direction.FORWARD:
        low = from_version or 1
        selected = [e for e in items if _last_version(e) >= low]
    else:
        selected = [e for e in reversed(items)
                    if from_version is None or _first_version(e) <= from_version]
    return selected if limit is None else selected[:limit]


def _first_version(event: Event) -> int:
    return summary_range(event)[0] if is_summary_event(event) else event.version


def _last_version(event: Event) -> int:
    return event.version  # a summary's version is its last covered version


@dataclass(slots=True)
class _Overlap:
    """Raw events inside the last summary's range (the log was trimmed short of it)."""

    first: int
    last: int
    prev_hash: str
    anchor: str
    previous: Event | None = None


def verify_summarised(items: Iterable[Event], start: StreamHead | None = None) -> StreamHead:
    """Check a forward read (summaries and raw events, as ``SummarisedReader.read`` returns
    them) from ``start`` (default: before version 1); the head reached.

    Raises ``ChainError`` (an ``IntegrityError``): ``truncated`` for versions neither in
    the log nor covered by a summary, ``anchor_mismatch`` for an event at a summary's last
    version whose hash is not the anchor, and the chain's own kinds (``gap``,
    ``prev_hash_mismatch``, ``hash_mismatch``, ...) otherwise.
    """
    head = start if start is not None else StreamHead()
    overlap: _Overlap | None = None
    for item in items:
        if is_summary_event(item):
            head = _summary_link(item, head)
            first, last = summary_range(item)
            overlap = _Overlap(first, last, item.prev_hash, item.hash)
            continue
        if item.version > head.version:
            if item.version > head.version + 1:
                raise _truncated(item.stream_id, head.version + 1, item.version - 1)
            head, overlap = verify_chain([item], head), None
            continue
        if overlap is None or item.version < overlap.first:
            raise ChainError(item.stream_id, item.version, "duplicate",
                             f"version {item.version} appears again after version "
                             f"{head.version}")
        _check_overlapping(item, overlap)
    return head


def _summary_link(item: Event, head: StreamHead) -> StreamHead:
    first, last = summary_range(item)
    if first > head.version + 1:
        raise _truncated(item.stream_id, head.version + 1, first - 1)
    if first != head.version + 1 or last < first:
        raise ChainError(item.stream_id, first, "duplicate",
                         f"summary of versions {first}..{last} overlaps what precedes it "
                         f"(version {head.version})")
    if item.prev_hash != head.hash:
        raise ChainError(item.stream_id, first, "prev_hash_mismatch",
                         f"summary of versions {first}..{last} follows {item.prev_hash[:16]}"
                         f"..., the chain is at {head.hash[:16]}... (version {head.version})")
    return StreamHead(last, item.hash)


def _check_overlapping(item: Event, overlap: _Overlap) -> None:
    """A raw event inside the last summary: chained to its raw predecessor (or, as the
    summary's first version, to the summary's prev_hash), its own hash right, and at the
    summary's last version equal to the anchor."""
    previous = overlap.previous
    if previous is not None:
        verify_chain([item], StreamHead(previous.version, previous.hash))
    elif item.version == overlap.first:
        verify_chain([item], StreamHead(item.version - 1, overlap.prev_hash))
    else:  # its predecessor is only summarised: check its own content hash
        verify_chain([item], StreamHead(item.version - 1, item.prev_hash))
    if item.version == overlap.last and item.hash != overlap.anchor:
        raise ChainError(item.stream_id, item.version, ANCHOR_MISMATCH,
                         f"the summary of versions {overlap.first}..{overlap.last} is anchored "
                         f"at {overlap.anchor[:16]}..., the event has {item.hash[:16]}...")
    overlap.previous = item


def _truncated(stream_id: str, first: int, last: int) -> ChainError:
    span = f"version {first}" if first == last else f"versions {first}..{last}"
    return ChainError(stream_id, first, TRUNCATED,
                      f"{span} are not in the log and no summary covers them")


def anchor_matches(summary: Summary, event: Event) -> bool:
    """Whether ``event`` (of the same stream) agrees with ``summary``'s anchor: the event at
    its last version has the anchor as hash, the one after it as prev_hash."""
    if event.stream_id != summary.stream_id:
        return False
    if event.version == summary.to_version:
        return event.hash == summary.anchor_hash
    if event.version == summary.to_version + 1:
        return event.prev_hash == summary.anchor_hash
    return False


__all__ = ["ANCHOR_MISMATCH", "TRUNCATED", "SummarisedReader", "SummaryAnchors",
           "anchor_matches", "anchor_of", "verify_summarised", "with_summaries"]
