"""The memory adapter passes the EventStore contract."""

from __future__ import annotations

import pytest

from ares.events.memory import MemoryEventStore, MemoryLog
from ares.events.ports import EventStore
from tests.contract.event_store import EventStoreContract, OpenStore


class TestMemoryEventStore(EventStoreContract):
    @pytest.fixture
    async def open_store(self) -> OpenStore:  # type: ignore[override]
        log = MemoryLog()

        async def open_() -> EventStore:
            return MemoryEventStore(log)

        return open_
