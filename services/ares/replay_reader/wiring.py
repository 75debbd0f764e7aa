"""Opening the replay reader's parts from settings: topics, the stream index, the reader."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ares.config import Settings
from ares.events.ports import SummaryAnchor
from ares.replay_reader.kafka_source import KafkaStreamReader
from ares.replay_reader.pg_store import DEFAULT_SCHEMA, ProjectionStore
from ares.summaries.reader import SummarisedReader, SummaryAnchors
from ares.topics import ALERTS, EVENTS, SNAPSHOTS, load_topics

ENV_SCHEMA = "ARES_PROJECTIONS_SCHEMA"


def default_schema() -> str:
    return os.environ.get(ENV_SCHEMA) or DEFAULT_SCHEMA


@dataclass(frozen=True, slots=True)
class Topics:
    events: str
    snapshots: str
    alerts: str

    @classmethod
    def of(cls, settings: Settings) -> Topics:
        plan = load_topics(settings)
        return cls(plan.name(EVENTS), plan.name(SNAPSHOTS), plan.name(ALERTS))


def projection_store(settings: Settings, topics: Topics, schema: str | None = None,
                     *, max_connections: int = 4) -> ProjectionStore:
    return ProjectionStore(settings.postgres_dsn, schema or default_schema(),
                           events_topic=topics.events, max_connections=max_connections)


@asynccontextmanager
async def open_reader(settings: Settings, topics: Topics, *, schema: str | None = None,
                      use_index: bool = True,
                      concurrency: int = 1) -> AsyncIterator[KafkaStreamReader]:
    """A stream reader over ``ares.events``, seeking through the index when ``use_index``
    (it connects lazily: PostgreSQL being down only makes reads scan)."""
    store = projection_store(settings, topics, schema) if use_index else None
    try:
        reader = await KafkaStreamReader.open(settings, topics.events, store, concurrency)
        try:
            yield reader
        finally:
            await reader.close()
    finally:
        if store is not None:
            await store.close()


class CompactedSummaries:
    """The ``SummarySource`` over ``ares.summaries`` (the compactor's), connected on first
    use: only a stream whose log begins after version 1 ever asks, so an untrimmed log
    costs nothing."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._reader: SummarisedReader | None = None

    async def summaries(self, stream_id: str) -> list[SummaryAnchor]:
        if self._reader is None:
            self._reader = await SummarisedReader.open(self.settings)
        return await SummaryAnchors(self._reader).summaries(stream_id)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
