"""The EventStore contract: one abstract suite, subclassed once per adapter.

A subclass provides ``open_store``: a factory whose every call opens a new store on the same
backend; the newest one owns the streams (the previous one is fenced).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from ares.errors import ConflictError, FencedError
from ares.events.chain import verify_chain
from ares.events.model import Direction, EventFilter, NewEvent, StreamHead
from ares.events.ports import EventStore
from ares.tasks import wait_for

OpenStore = Callable[[], Awaitable[EventStore]]


def new(n: int = 1, type_: str = "test.happened") -> list[NewEvent]:
    return [NewEvent(type=type_, module="contract-test", payload={"n": i}) for i in range(n)]


class EventStoreContract:
    @pytest.fixture
    def open_store(self) -> OpenStore:
        """Overridden by each adapter's subclass (which may tear its stores down)."""
        raise NotImplementedError

    @pytest.fixture
    async def store(self, open_store: OpenStore) -> EventStore:
        return await open_store()

    @pytest.fixture
    def stream(self) -> str:
        return f"agent-{uuid.uuid4().hex[:12]}"

    async def test_append_to_new_stream_with_expected_zero(self, store: EventStore,
                                                           stream: str) -> None:
        assert await store.stream_version(stream) == 0
        assert await store.append(stream, new(3), expected_version=0) == 3
        events = await store.read(stream)
        assert [e.version for e in events] == [1, 2, 3]
        assert [e.payload["n"] for e in events] == [0, 1, 2]
        assert all(e.stream_id == stream and e.module == "contract-test" for e in events)
        assert await store.stream_version(stream) == 3

    async def test_expected_version_conflicts_name_both_versions(self, store: EventStore,
                                                                 stream: str) -> None:
        await store.append(stream, new(2), expected_version=0)
        with pytest.raises(ConflictError) as zero:
            await store.append(stream, new(), expected_version=0)
        assert (zero.value.expected, zero.value.actual) == (0, 2)
        assert "expected version 0" in str(zero.value)
        assert "actual version 2" in str(zero.value)
        with pytest.raises(ConflictError):
            await store.append(stream, new(), expected_version=5)
        assert await store.append(stream, new(), expected_version=2) == 3
        assert await store.append(stream, new(), expected_version=-1) == 4
        assert await store.stream_version(stream) == 4

    async def test_reads_forward_backward_with_limits(self, store: EventStore,
                                                      stream: str) -> None:
        await store.append(stream, new(10))
        assert [e.version for e in await store.read(stream, from_version=4, limit=3)] == [4, 5, 6]
        assert [e.version for e in await store.read(stream, from_version=9)] == [9, 10]
        backward = await store.read(stream, direction=Direction.BACKWARD, limit=3)
        assert [e.version for e in backward] == [10, 9, 8]
        backward_from = await store.read(stream, from_version=3, direction=Direction.BACKWARD)
        assert [e.version for e in backward_from] == [3, 2, 1]
        assert await store.read(stream, from_version=11) == []
        assert await store.read(f"{stream}-unknown") == []

    async def test_reappending_an_event_id_is_a_noop(self, store: EventStore,
                                                     stream: str) -> None:
        batch = new(2)
        assert await store.append(stream, batch, expected_version=0) == 2
        await store.append(stream, new())
        # A retry of the first append (same ids, same expected version) changes nothing.
        assert await store.append(stream, batch, expected_version=0) == 2
        assert [e.id for e in await store.read(stream)][:2] == [e.id for e in batch]
        assert await store.stream_version(stream) == 3

    async def test_two_concurrent_appenders_exactly_one_wins(self, store: EventStore,
                                                             stream: str) -> None:
        await store.append(stream, new(), expected_version=0)
        results = await asyncio.gather(
            store.append(stream, new(), expected_version=1),
            store.append(stream, new(), expected_version=1),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["ConflictError", "int"]
        assert await store.stream_version(stream) == 2

    async def test_versions_contiguous_and_chain_valid_after_10k_appends(
        self, store: EventStore
    ) -> None:
        streams = [f"bulk-{uuid.uuid4().hex[:8]}-{i}" for i in range(100)]

        async def fill(stream_id: str) -> None:
            for version in range(100):
                await store.append(stream_id, new(), expected_version=version)

        await asyncio.gather(*(fill(s) for s in streams))
        for stream_id in streams:
            events = await store.read(stream_id)
            assert [e.version for e in events] == list(range(1, 101))
            verify_chain(events, StreamHead())

    async def test_read_all_has_every_stream_in_order(self, store: EventStore) -> None:
        streams = [f"all-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
        for round_ in range(3):
            for stream_id in streams:
                await store.append(stream_id, new(), expected_version=round_)
        seen: dict[str, list[int]] = {s: [] for s in streams}
        async for event in store.read_all():
            if event.stream_id in seen:
                seen[event.stream_id].append(event.version)
        assert seen == {s: [1, 2, 3] for s in streams}

    async def test_subscribe_yields_matching_live_events(self, store: EventStore,
                                                         stream: str) -> None:
        await store.append(stream, new(1, "test.step.done"))  # before the call: not yielded
        subscription = store.subscribe(EventFilter(stream_id=stream, type_prefix="test.step."))
        try:
            await store.append(stream, new(1, "test.noted") + new(2, "test.step.done"))
            first = await wait_for(anext(subscription), 30)
            second = await wait_for(anext(subscription), 30)
        finally:
            await subscription.aclose()
        assert [(e.type, e.version) for e in (first, second)] == [
            ("test.step.done", 3), ("test.step.done", 4)
        ]

    async def test_old_owner_is_fenced_after_a_new_owner_takes_over(
        self, open_store: OpenStore, store: EventStore, stream: str
    ) -> None:
        await store.append(stream, new(), expected_version=0)
        successor = await open_store()
        with pytest.raises(FencedError):
            await store.append(stream, new(), expected_version=1)
        assert await successor.append(stream, new(), expected_version=1) == 2
        events = await successor.read(stream)
        assert [e.version for e in events] == [1, 2]
        verify_chain(events, StreamHead())
