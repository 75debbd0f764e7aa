"""``ares run replay-reader``: the projector, the HTTP API and the live feed, one process.

One port serves the API, ``/openapi.json`` and the probes (``/healthz``, ``/readyz``,
``/metrics``): the HTTP server is the API itself, so the service is run with
``serve(service)`` and no separate probe server. Ready once the API listens: reads do not
wait for the projector (they fall back to the log), so a replica whose projector stands by
(another leads the schema) or waits for PostgreSQL still serves.

The projector runs as a background task (the ``Service`` base's, launched once the API
listens); if it fails for a reason it does not retry (a bug), the service ends with that
error and the orchestrator restarts the process. The stop drains the HTTP server first,
while the projector still runs, then ends the projector and closes the readers and the
API's command client (started by the first write, ``POST /agents/{id}/signals/{name}``).
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from aiohttp import web

from ares.agents.registry import build_registry
from ares.config import Settings
from ares.events.kafka.dlq import REPLAY_READER, DeadLetters
from ares.probes import serve_app, tls_context
from ares.replay_reader.http_api import ReplayApi
from ares.replay_reader.kafka_source import KafkaStreamReader
from ares.replay_reader.live import LiveFeed
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projector import Projector
from ares.replay_reader.wiring import CompactedSummaries, Topics, projection_store
from ares.service import Service
from ares.topics import load_topics

log = logging.getLogger(__name__)


class ReplayReaderService(Service):
    name = "replay-reader"

    def __init__(self, settings: Settings, *, http_port: int, schema: str | None = None,
                 project: bool = True, agents: Sequence[str] = (), host: str = "0.0.0.0",
                 read_concurrency: int = 4) -> None:
        super().__init__()
        self.settings = settings
        self.http_port = http_port
        self.host = host
        self.schema = schema
        self.project = project
        self.registry = build_registry(agents)
        self.read_concurrency = read_concurrency
        self.projector: Projector | None = None
        self.api: ReplayApi | None = None
        self.port: int | None = None
        self._store: ProjectionStore | None = None
        self._projector_store: ProjectionStore | None = None
        self._reader: KafkaStreamReader | None = None
        self._feed: LiveFeed | None = None
        self._summaries: CompactedSummaries | None = None
        self._runner: web.AppRunner | None = None
        self._letters: DeadLetters | None = None

    @property
    def ready(self) -> bool:
        return self._runner is not None and self.api is not None and not self.api.draining

    async def on_start(self) -> None:
        topics = Topics.of(self.settings)
        self._store = projection_store(self.settings, topics, self.schema)
        self._reader = await KafkaStreamReader.open(self.settings, topics.events, self._store,
                                                    self.read_concurrency)
        self._feed = LiveFeed(self.settings, topics.events)
        if self.project:
            self._projector_store = projection_store(self.settings, topics, self.schema,
                                                     max_connections=2)
            self._letters = DeadLetters(self.settings, load_topics(self.settings).name,
                                        REPLAY_READER)
            self.projector = Projector(self.settings, self._projector_store, topics.events,
                                       topics.alerts, letters=self._letters)
        if self._letters is not None:
            await self._letters.start()  # what ares.dlq holds, before the first record
        self._summaries = CompactedSummaries(self.settings)
        self.api = ReplayApi(self.settings, self._reader, self._store, self._feed,
                             self.registry, snapshots_topic=topics.snapshots,
                             ready=lambda: self._runner is not None,
                             summaries=self._summaries)
        # With ARES_METRICS_PORT the probes and /metrics have a listener of their own
        # (`ares run replay-reader` starts it), and the API's port does not serve them.
        probes_here = self.settings.metrics_port is None
        runner = web.AppRunner(self.api.app(probes=probes_here), access_log=None,
                               handle_signals=False, shutdown_timeout=5.0)
        tls = tls_context(self.settings.http_tls_cert_file, self.settings.http_tls_key_file)
        self.port = await serve_app(runner, self.host, self.http_port, ssl_context=tls)
        self._runner = runner
        log.info("replay reader: API and /openapi.json%s on %s://%s:%d; projections in "
                 "schema %r%s", " and probes" if probes_here else "",
                 "https" if tls else "http", self.host, self.port, self._store.schema,
                 "" if self.project else " (not projecting)")

    def background(self) -> dict[str, Coroutine[Any, Any, None]]:
        return {} if self.projector is None else {"replay-projector": self.projector.run()}

    async def on_stop(self) -> None:
        if self.api is not None:
            self.api.draining = True
        if self._feed is not None:
            await self._feed.close()  # ends the SSE responses, so the server can stop
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def on_shutdown(self) -> None:
        if self.api is not None:
            await self.api.close()  # after the drain: no write is in flight any more
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        if self._letters is not None:
            await self._letters.stop()
            self._letters = None
        if self._summaries is not None:
            await self._summaries.close()
        for store in (self._store, self._projector_store):
            if store is not None:
                await store.close()
