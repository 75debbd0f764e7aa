"""Live events for ``GET /events/stream``: one follower of ``ares.events``, many listeners.

One consumer per process (not one per client) follows every partition from the end with
``read_committed`` and hands each event to the listeners whose filter matches, in the order
it reads them: a stream's events are in version order (one partition each). The follower
starts with the first listener and is positioned at the log end *before* ``subscribe``
returns, so a client that saw its subscription confirmed misses nothing appended after.

A listener that cannot keep up (its queue of ``MAX_QUEUED`` events is full) is dropped with a
reason rather than slowing down everyone else or growing without bound.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import Gauge

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.events.model import Event, EventFilter
from ares.events.wire.codec import decode_event
from ares.tasks import cancel_and_wait, stop_client

log = logging.getLogger(__name__)
MAX_QUEUED = 1000
LISTENERS = Gauge("ares_replay_sse_listeners", "Clients following /events/stream")


@dataclass(frozen=True, slots=True)
class LiveEvent:
    partition: int
    offset: int
    event: Event

    @property
    def id(self) -> str:
        return f"{self.partition}-{self.offset}"


@dataclass(eq=False, slots=True)
class Listener:
    event_filter: EventFilter
    queue: asyncio.Queue[LiveEvent | None] = field(
        default_factory=lambda: asyncio.Queue(MAX_QUEUED))
    dropped: str | None = None  # why the feed gave up on it

    async def next(self) -> LiveEvent | None:
        """The next event; None once dropped (``dropped`` says why)."""
        return await self.queue.get()


class LiveFeed:
    def __init__(self, settings: Settings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self._listeners: set[Listener] = set()
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._start_lock = asyncio.Lock()

    async def subscribe(self, event_filter: EventFilter) -> Listener:
        listener = Listener(event_filter)
        async with self._start_lock:
            if self._task is None or self._task.done():
                await self._start()
            self._listeners.add(listener)
        LISTENERS.set(len(self._listeners))
        return listener

    def unsubscribe(self, listener: Listener) -> None:
        self._listeners.discard(listener)
        LISTENERS.set(len(self._listeners))

    async def _start(self) -> None:
        if self._consumer is not None:  # a follower that failed: start afresh
            await stop_client(self._consumer)
            self._consumer = None
        consumer = new_consumer(self.settings, fetch_max_wait_ms=100)
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p)
                   for p in sorted(await topic_partitions(consumer, self.topic))]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, ends[tp])
                await consumer.position(tp)  # resolved now: the end as of this moment
        except BaseException:
            await stop_client(consumer)
            raise
        self._consumer = consumer
        self._task = asyncio.create_task(self._follow(consumer), name="replay-live-feed")

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=1000)
                for tp, records in batch.items():
                    for record in records:
                        try:
                            event = decode_event(record.value or b"")
                        except SchemaError as exc:
                            log.error("live feed skips undecodable record %s/%d@%d: %s",
                                      tp.topic, tp.partition, record.offset, exc)
                            continue
                        self._deliver(LiveEvent(tp.partition, record.offset, event))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("live feed failed")
            for listener in list(self._listeners):
                self._drop(listener, f"the live feed failed: {type(exc).__name__}: {exc}")

    def _deliver(self, live: LiveEvent) -> None:
        for listener in list(self._listeners):
            if not listener.event_filter.matches(live.event):
                continue
            try:
                listener.queue.put_nowait(live)
            except asyncio.QueueFull:
                self._drop(listener, f"too slow: more than {MAX_QUEUED} events queued")

    def _drop(self, listener: Listener, reason: str) -> None:
        listener.dropped = reason
        self.unsubscribe(listener)
        while True:  # make room for the end marker
            try:
                listener.queue.put_nowait(None)
                return
            except asyncio.QueueFull:
                listener.queue.get_nowait()

    async def close(self) -> None:
        for listener in list(self._listeners):
            self._drop(listener, "the server is stopping")
        task, self._task = self._task, None
        await cancel_and_wait(task)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_client(consumer)
