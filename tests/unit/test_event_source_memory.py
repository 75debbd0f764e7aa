"""The in-memory adapter passes the EventSource contract."""

from __future__ import annotations

import pytest

from ares.events.ports import EventSource
from ares.replay_reader.source import MemorySource
from tests.contract.event_source import EventSourceContract, SourceOf, Streams, interleaved


class TestMemorySource(EventSourceContract):
    @pytest.fixture
    def source_of(self) -> SourceOf:  # type: ignore[override]
        async def of(streams: Streams) -> EventSource:
            # Newest first, streams mixed: the source orders what it is given.
            return MemorySource(reversed(interleaved(streams)))

        return of
