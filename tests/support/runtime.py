"""In-process runtime managers and stream watchers for integration tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ares.config import Settings
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event
from ares.topics import EVENTS, TopicPlan


async def read_stream(settings: Settings, plan: TopicPlan, stream_id: str) -> list[Event]:
    store = await KafkaEventStore.open(settings, owned=[], topic=plan.name(EVENTS))
    try:
        return await store.read(stream_id)
    finally:
        await store.close()


async def wait_for_events(settings: Settings, plan: TopicPlan, stream_id: str,
                          done: Callable[[list[Event]], bool],
                          timeout_s: float = 60.0) -> list[Event]:
    """Poll the stream until ``done(events)``; the events, or an error showing them."""
    deadline = time.monotonic() + timeout_s
    events: list[Event] = []
    while time.monotonic() < deadline:
        events = await read_stream(settings, plan, stream_id)
        if done(events):
            return events
        await asyncio.sleep(0.3)
    types = [f"{e.version}:{e.type}" for e in events]
    raise AssertionError(f"stream {stream_id} did not get there in {timeout_s}s: {types}")


def types_of(events: list[Event]) -> list[str]:
    return [e.type for e in events]
