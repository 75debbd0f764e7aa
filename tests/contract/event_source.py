"""The EventSource contract: one abstract suite, subclassed once per adapter.

A subclass provides ``source_of``: given streams (stream id -> its sealed events, versions
1..n), it writes them to its backend and returns a source that holds them. The events are
sealed here (``ares.events.chain.seal_encoded``, fixed ids and timestamps), so every adapter
is held to the same expected bytes: a writer that re-seals them (the Kafka store) must
arrive at the same hashes.

A subclass whose backend spreads streams over partitions overrides ``partitions``: the
leak tests pick stream ids that land on one partition (``ares.events.kafka.routing``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from ares.events.chain import seal_encoded, verify_chain
from ares.events.kafka.routing import partition_for
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.ports import EventSource

Streams = Mapping[str, Sequence[Event]]
SourceOf = Callable[[Streams], Awaitable[EventSource]]

T0 = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICK = timedelta(microseconds=1)  # the timestamps' precision
EVERYTHING = 1_000  # a limit above any stream of the suite


def sealed(stream_id: str, count: int, stamps: Sequence[datetime] | None = None,
           ) -> list[Event]:
    """Versions 1..count of a stream, sealed with the chain; event i stamped ``stamps[i]``
    (default ``T0 + i * STEP``)."""
    head, events = StreamHead(), []
    for i in range(count):
        new = NewEvent(type="test.happened", module="contract-test",
                       payload={"n": i, "text": f"événement {i} of {stream_id}",
                                "nested": {"items": [i, None, True], "ratio": i / 4}},
                       metadata={"trace": f"{stream_id}/{i}"},
                       timestamp=stamps[i] if stamps is not None else T0 + i * STEP)
        event = seal_encoded(stream_id, head, new, i + 1)[0]
        head = StreamHead(event.version, event.hash)
        events.append(event)
    return events


def news_of(events: Sequence[Event]) -> list[NewEvent]:
    """What a writer appends to seal ``events`` again: same ids, timestamps and content."""
    return [NewEvent(type=e.type, module=e.module, payload=e.payload, metadata=e.metadata,
                     id=e.id, timestamp=e.timestamp) for e in events]


def interleaved(streams: Streams) -> list[Event]:
    """Every stream's events round-robin, as a shared partition holds them."""
    out: list[Event] = []
    longest = max((len(events) for events in streams.values()), default=0)
    for i in range(longest):
        out.extend(events[i] for events in streams.values() if i < len(events))
    return out


def sharing_a_partition(first: str, partitions: int, count: int) -> list[str]:
    """``count`` stream ids on ``first``'s partition, each after ``first`` extending it (a
    reader that matched keys by prefix would mix them up)."""
    target, found, i = partition_for(first, partitions), [first], 0
    while len(found) < count:
        candidate = f"{first}{i}"
        if partition_for(candidate, partitions) == target:
            found.append(candidate)
        i += 1
    return found


class EventSourceContract:
    @pytest.fixture
    def source_of(self) -> SourceOf:
        """Overridden by each adapter's subclass (which may tear its sources down)."""
        raise NotImplementedError

    @pytest.fixture
    def partitions(self) -> int:
        """How many partitions the adapter spreads streams over."""
        return 1

    @pytest.fixture
    def stream(self) -> str:
        return f"source-{uuid.uuid4().hex[:12]}"

    # -- read --------------------------------------------------------------------------------

    async def test_read_from_version_1_returns_every_event_in_version_order(
            self, source_of: SourceOf, stream: str) -> None:
        events = sealed(stream, 7)
        source = await source_of({stream: events})
        got = await source.read(stream, 1, EVERYTHING)
        assert [e.version for e in got] == [1, 2, 3, 4, 5, 6, 7]
        assert got == events

    async def test_read_from_a_middle_version_starts_there(self, source_of: SourceOf,
                                                           stream: str) -> None:
        events = sealed(stream, 7)
        source = await source_of({stream: events})
        assert await source.read(stream, 4, EVERYTHING) == events[3:]
        assert await source.read(stream, 7, EVERYTHING) == events[6:]

    async def test_limit_is_honoured(self, source_of: SourceOf, stream: str) -> None:
        events = sealed(stream, 7)
        source = await source_of({stream: events})
        assert await source.read(stream, 1, 1) == events[:1]
        assert await source.read(stream, 1, 3) == events[:3]
        assert await source.read(stream, 3, 2) == events[2:4]
        assert await source.read(stream, 5, 7) == events[4:]  # fewer left than the limit

    async def test_a_limit_of_zero_reads_nothing(self, source_of: SourceOf,
                                                 stream: str) -> None:
        source = await source_of({stream: sealed(stream, 3)})
        assert await source.read(stream, 1, 0) == []

    async def test_paging_forward_then_back_gives_the_same_pages(self, source_of: SourceOf,
                                                                 stream: str) -> None:
        events = sealed(stream, 10)
        source = await source_of({stream: events})
        pages, version = [], 1
        while page := await source.read(stream, version, 3):
            pages.append(page)
            version = page[-1].version + 1
        assert [[e.version for e in p] for p in pages] == [[1, 2, 3], [4, 5, 6], [7, 8, 9],
                                                           [10]]
        assert [e for page in pages for e in page] == events
        # Going back after going forward (a replay stepping backwards) reads the same.
        assert await source.read(stream, 2, 3) == events[1:4]
        assert await source.read(stream, 1, 2) == events[:2]
        assert await source.read(stream, 9, 3) == events[8:]

    async def test_read_past_the_head_is_empty(self, source_of: SourceOf, stream: str) -> None:
        source = await source_of({stream: sealed(stream, 4)})
        assert await source.read(stream, 5, EVERYTHING) == []
        assert await source.read(stream, 500, 10) == []

    async def test_an_unknown_stream_reads_empty(self, source_of: SourceOf,
                                                 stream: str) -> None:
        source = await source_of({stream: sealed(stream, 2)})
        assert await source.read(f"{stream}-unknown", 1, EVERYTHING) == []
        assert await source.read(f"{stream}-unknown", 3, 5) == []

    async def test_events_read_back_equal_the_written_and_their_chain_verifies(
            self, source_of: SourceOf, stream: str) -> None:
        events = sealed(stream, 6)
        source = await source_of({stream: events})
        got = await source.read(stream, 1, EVERYTHING)
        assert [e.id for e in got] == [e.id for e in events]
        assert [(e.prev_hash, e.hash) for e in got] == [(e.prev_hash, e.hash) for e in events]
        assert [e.payload for e in got] == [e.payload for e in events]
        assert [e.metadata for e in got] == [e.metadata for e in events]
        assert [e.timestamp for e in got] == [e.timestamp for e in events]
        assert all(e.stream_id == stream and e.type == "test.happened" for e in got)
        assert verify_chain(got, StreamHead()) == StreamHead(6, events[-1].hash)
        # A page from the middle continues the chain of the page before it.
        middle = await source.read(stream, 3, 2)
        assert verify_chain(middle, StreamHead(2, events[1].hash)) == StreamHead(
            4, events[3].hash)

    async def test_streams_sharing_a_partition_do_not_leak_into_reads(
            self, source_of: SourceOf, stream: str, partitions: int) -> None:
        ids = sharing_a_partition(stream, partitions, 3)
        streams = {s: sealed(s, n) for s, n in zip(ids, (3, 5, 4), strict=True)}
        source = await source_of(streams)
        for stream_id, events in streams.items():
            assert await source.read(stream_id, 1, EVERYTHING) == events
            assert await source.read(stream_id, 2, 2) == events[1:3]
            assert await source.read(stream_id, len(events) + 1, EVERYTHING) == []

    # -- head ------------------------------------------------------------------------------

    async def test_head_is_the_last_version(self, source_of: SourceOf, stream: str) -> None:
        source = await source_of({stream: sealed(stream, 7), f"{stream}-one": sealed(
            f"{stream}-one", 1)})
        assert await source.head(stream) == 7
        assert await source.head(f"{stream}-one") == 1

    async def test_an_unknown_stream_has_head_zero(self, source_of: SourceOf,
                                                   stream: str) -> None:
        source = await source_of({stream: sealed(stream, 2)})
        assert await source.head(f"{stream}-unknown") == 0

    async def test_streams_sharing_a_partition_do_not_leak_into_heads_or_times(
            self, source_of: SourceOf, stream: str, partitions: int) -> None:
        ids = sharing_a_partition(stream, partitions, 3)
        # The shortest stream's id is a prefix of the others'; the others start later.
        streams = {ids[0]: sealed(ids[0], 3),
                   ids[1]: sealed(ids[1], 5, [T0 + STEP / 2 + i * STEP for i in range(5)]),
                   ids[2]: sealed(ids[2], 4, [T0 - STEP + i * STEP for i in range(4)])}
        source = await source_of(streams)
        assert [await source.head(s) for s in ids] == [3, 5, 4]
        assert [await source.version_at(s, T0) for s in ids] == [1, 0, 2]
        assert [await source.version_at(s, T0 + 10 * STEP) for s in ids] == [3, 5, 4]

    # -- version_at ------------------------------------------------------------------------

    async def test_version_at_before_the_first_event_is_zero(self, source_of: SourceOf,
                                                             stream: str) -> None:
        source = await source_of({stream: sealed(stream, 3)})
        assert await source.version_at(stream, T0 - TICK) == 0
        assert await source.version_at(stream, T0 - timedelta(days=365)) == 0

    async def test_version_at_each_event_and_between_gives_that_version(
            self, source_of: SourceOf, stream: str) -> None:
        events = sealed(stream, 5)
        source = await source_of({stream: events})
        for event in events:
            assert await source.version_at(stream, event.timestamp) == event.version
            assert await source.version_at(stream, event.timestamp + STEP / 2) == event.version
            assert await source.version_at(stream, event.timestamp - TICK) == event.version - 1

    async def test_version_at_after_the_last_event_is_the_head(self, source_of: SourceOf,
                                                               stream: str) -> None:
        events = sealed(stream, 5)
        source = await source_of({stream: events})
        assert await source.version_at(stream, events[-1].timestamp + TICK) == 5
        assert await source.version_at(stream, events[-1].timestamp + timedelta(days=9)) == 5

    async def test_version_at_of_an_unknown_stream_is_zero(self, source_of: SourceOf,
                                                           stream: str) -> None:
        source = await source_of({stream: sealed(stream, 2)})
        assert await source.version_at(f"{stream}-unknown", T0 + timedelta(days=1)) == 0

    async def test_version_at_stops_at_the_first_event_after_the_time(
            self, source_of: SourceOf, stream: str) -> None:
        """Timestamps are the writer's (imported history may go back in time): the version
        as of T is the events before the first one stamped after T, not the highest version
        stamped at or before T."""
        stamps = [T0, T0 + 2 * STEP, T0 + STEP, T0 + 3 * STEP]
        source = await source_of({stream: sealed(stream, 4, stamps)})
        assert await source.version_at(stream, T0 + STEP) == 1
        assert await source.version_at(stream, T0 + STEP * 5 / 2) == 3
        assert await source.version_at(stream, T0 + 3 * STEP) == 4
