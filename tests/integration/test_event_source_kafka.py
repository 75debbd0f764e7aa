"""The Kafka adapters pass the EventSource contract on the real broker (and PostgreSQL).

Each test's streams are written through a real ``KafkaEventStore`` that owns every
partition of the module's ``ares.events`` (round-robin, one event per append, so streams
interleave on their partition), then read by:

- ``KafkaStreamReader`` without an index (scanning);
- ``KafkaStreamReader`` over a projected ``ProjectionStore`` index (the projector run until
  caught up), and over an index that stops halfway through the streams (the tail scan);
- the compactor's ``SummarisedReader`` (nothing trimmed, so no summaries): it wraps a
  ``KafkaEventStore`` and reads ``ares.summaries`` through a ``PartitionScanner``, so it
  cannot be built without a broker.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import asyncpg
import pytest

from ares.config import Settings
from ares.events.kafka.store import KafkaEventStore
from ares.events.ports import EventSource
from ares.replay_reader.kafka_source import KafkaStreamReader
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projector import Projector
from ares.summaries.reader import SummarisedReader
from ares.topics import EVENTS, TopicPlan
from tests.contract.event_source import (
    EventSourceContract,
    SourceOf,
    Streams,
    interleaved,
    news_of,
)
from tests.support.kafka import applied_topics

PARTITIONS = 2


@pytest.fixture(scope="module")
def es_settings(kafka_bootstrap: str, postgres_dsn: str) -> Settings:
    """A topic prefix of this module's own (``applied_topics`` creates every ares topic)."""
    return Settings(kafka_bootstrap=kafka_bootstrap, postgres_dsn=postgres_dsn,
                    topic_prefix=f"es-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def plan(es_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(es_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture(scope="module")
async def writer(es_settings: Settings, plan: TopicPlan) -> AsyncIterator[KafkaEventStore]:
    """The owner of every partition: the contract uses fresh stream ids per test."""
    store = await KafkaEventStore.open(es_settings, topic=plan.name(EVENTS))
    assert store.owned == list(range(PARTITIONS))
    yield store
    await store.close()


@pytest.fixture(scope="module")
async def index(es_settings: Settings, plan: TopicPlan) -> AsyncIterator[ProjectionStore]:
    """The stream index in a projections schema of this module's own, dropped afterwards."""
    schema = f"es_{uuid.uuid4().hex[:10]}"
    store = ProjectionStore(es_settings.postgres_dsn, schema, events_topic=plan.name(EVENTS))
    yield store
    await store.close()
    conn = await asyncpg.connect(es_settings.postgres_dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def write(writer: KafkaEventStore, streams: Streams) -> None:
    """Append the streams' events round-robin (each stream's may start after version 1:
    the rest of a stream written before), then wait until the owner reads them back, so
    they are below the last stable offset for every reader."""
    for event in interleaved(streams):
        [new] = news_of([event])
        assert await writer.append(event.stream_id, [new],
                                   expected_version=event.version - 1) == event.version
    for stream_id, events in streams.items():
        if events:  # re-sealed by the store's writer: the same events, hashes and all
            assert await writer.read(stream_id, from_version=events[0].version) == list(events)


async def project(settings: Settings, index: ProjectionStore, plan: TopicPlan) -> None:
    await Projector(settings, index, plan.name(EVENTS), None).run(until_caught_up=True)


OpenReader = Callable[..., Awaitable[KafkaStreamReader]]


@pytest.fixture
async def open_reader(es_settings: Settings, plan: TopicPlan,
                      index: ProjectionStore) -> AsyncIterator[OpenReader]:
    opened: list[KafkaStreamReader] = []

    async def open_(*, indexed: bool) -> KafkaStreamReader:
        reader = await KafkaStreamReader.open(es_settings, plan.name(EVENTS),
                                              index if indexed else None)
        opened.append(reader)
        return reader

    yield open_
    for reader in opened:
        await reader.close()
    for reader in opened:  # an indexed reader must have used the index, never fallen back
        assert reader.index is None or reader.fallbacks == 0


class _OnTheBroker(EventSourceContract):
    """Every Kafka adapter reads streams written to the same PARTITIONS-partition topics."""

    @pytest.fixture
    def partitions(self) -> int:
        return PARTITIONS


class TestKafkaStreamReaderScanning(_OnTheBroker):
    @pytest.fixture
    def source_of(self, writer: KafkaEventStore,  # type: ignore[override]
                  open_reader: OpenReader) -> SourceOf:
        async def of(streams: Streams) -> EventSource:
            await write(writer, streams)
            return await open_reader(indexed=False)

        return of


class TestKafkaStreamReaderIndexed(_OnTheBroker):
    @pytest.fixture
    def source_of(self, es_settings: Settings, plan: TopicPlan,  # type: ignore[override]
                  writer: KafkaEventStore, index: ProjectionStore,
                  open_reader: OpenReader) -> SourceOf:
        async def of(streams: Streams) -> EventSource:
            await write(writer, streams)
            await project(es_settings, index, plan)
            return await open_reader(indexed=True)

        return of


class TestKafkaStreamReaderIndexTail(_OnTheBroker):
    """The projector indexed the first half of each stream only: the rest is read by
    scanning the partition from where the index ends."""

    @pytest.fixture
    def source_of(self, es_settings: Settings, plan: TopicPlan,  # type: ignore[override]
                  writer: KafkaEventStore, index: ProjectionStore,
                  open_reader: OpenReader) -> SourceOf:
        async def of(streams: Streams) -> EventSource:
            half = max(len(events) for events in streams.values()) // 2
            await write(writer, {s: events[:half] for s, events in streams.items()})
            await project(es_settings, index, plan)
            await write(writer, {s: events[half:] for s, events in streams.items()})
            return await open_reader(indexed=True)

        return of


class TestSummarisedReader(_OnTheBroker):
    @pytest.fixture
    async def source_of(self, es_settings: Settings,  # type: ignore[override]
                        plan: TopicPlan,
                        writer: KafkaEventStore) -> AsyncIterator[SourceOf]:
        opened: list[SummarisedReader] = []

        async def of(streams: Streams) -> EventSource:
            await write(writer, streams)
            reader = await SummarisedReader.open(es_settings, plan)  # owns no partition
            opened.append(reader)
            return cast(EventSource, reader)

        yield of
        for reader in opened:
            await reader.close()

    async def test_head_is_the_last_version(self, source_of: SourceOf, stream: str) -> None:
        await super().test_head_is_the_last_version(source_of, stream)

    async def test_an_unknown_stream_has_head_zero(self, source_of: SourceOf,
                                                   stream: str) -> None:
        await super().test_an_unknown_stream_has_head_zero(source_of, stream)

    async def test_streams_sharing_a_partition_do_not_leak_into_heads_or_times(
            self, source_of: SourceOf, stream: str, partitions: int) -> None:
        await super().test_streams_sharing_a_partition_do_not_leak_into_heads_or_times(
            source_of, stream, partitions)

    async def test_version_at_before_the_first_event_is_zero(self, source_of: SourceOf,
                                                             stream: str) -> None:
        await super().test_version_at_before_the_first_event_is_zero(source_of, stream)

    async def test_version_at_each_event_and_between_gives_that_version(
            self, source_of: SourceOf, stream: str) -> None:
        await super().test_version_at_each_event_and_between_gives_that_version(
            source_of, stream)

    async def test_version_at_after_the_last_event_is_the_head(self, source_of: SourceOf,
                                                               stream: str) -> None:
        await super().test_version_at_after_the_last_event_is_the_head(source_of, stream)

    async def test_version_at_of_an_unknown_stream_is_zero(self, source_of: SourceOf,
                                                           stream: str) -> None:
        await super().test_version_at_of_an_unknown_stream_is_zero(source_of, stream)

    async def test_version_at_stops_at_the_first_event_after_the_time(
            self, source_of: SourceOf, stream: str) -> None:
        await super().test_version_at_stops_at_the_first_event_after_the_time(
            source_of, stream)
