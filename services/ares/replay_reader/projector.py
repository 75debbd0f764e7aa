"""The projector: ``ares.events`` and ``ares.alerts`` into PostgreSQL, exactly once.

It consumes every partition with ``read_committed`` (assigned, no consumer group: its
position lives in PostgreSQL, not in Kafka) and writes each batch's rows together with the
offsets after it in one database transaction (``ProjectionStore.apply``). After a crash it
seeks to the stored offsets, so no record is applied twice and none is skipped.

One projector writes per schema at a time: the others wait on a session advisory lock
(standbys; the per-transaction offset check makes even a split brain harmless). When
PostgreSQL goes away the projector keeps retrying with backoff, and when it is back it
re-seeks to the stored offsets and catches up. Agents' rows are cached in memory between
batches and only replaced after a commit, so a rolled-back batch leaves no trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import Counter, Gauge

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.dlq import DeadLetters, reason_of
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.events.wire.codec import decode, decode_event
from ares.events.wire.schemas import ALERT
from ares.replay_reader.pg_store import (
    OffsetConflictError,
    Offsets,
    ProjectionStore,
    ProjectionUnavailableError,
)
from ares.replay_reader.projection import AgentRow, BatchRows, Located, project
from ares.tasks import stop_client, wait_for

log = logging.getLogger(__name__)

EVENTS_PROJECTED = Counter("ares_projector_events_total", "Events written to the projections")
BATCHES = Counter("ares_projector_batches_total", "Projection transactions committed")
FAILURES = Counter("ares_projector_failures_total", "Projection batches rolled back", ["why"])
LAG = Gauge("ares_projector_lag_records", "Records between the projector and the log end",
            ["topic", "partition"])
_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class Projector:
    def __init__(self, settings: Settings, store: ProjectionStore, events_topic: str,
                 alerts_topic: str | None, *, max_batch: int = 5000,
                 lock_poll_s: float = 2.0, letters: DeadLetters | None = None) -> None:
        self.settings = settings
        # The replay reader dead-letters ares.events and ares.alerts: the projector reads
        # every record of both once, in order, from the log start (one leader per schema).
        self.letters = letters
        self.store = store
        self.topics = [t for t in (events_topic, alerts_topic) if t]
        self.events_topic = events_topic
        self.max_batch = max_batch
        self.lock_poll_s = lock_poll_s
        self.positions: dict[tuple[str, int], int | None] = {}
        self.caught_up = asyncio.Event()
        self.leader = False
        self.projected = 0
        self._agents: dict[str, AgentRow] = {}
        self._not_agents: set[str] = set()
        self._consumer: AIOKafkaConsumer | None = None
        self._lock_conn: Any = None
        self._targets: dict[TopicPartition, int] | None = None

    async def run(self, *, until_caught_up: bool = False,
                  on_progress: Callable[[Projector], None] | None = None) -> None:
        """Project until cancelled; with ``until_caught_up``, return once every partition
        reached the end it had when the call began (``ares projections rebuild``)."""
        attempt = 0
        try:
            while True:
                try:
                    await self._session(until_caught_up, on_progress)
                    return
                except (ProjectionUnavailableError, OffsetConflictError, OSError,
                        asyncpg.PostgresError, asyncpg.InterfaceError, KafkaError) as exc:
                    why = type(exc).__name__
                    FAILURES.labels(why).inc()
                    delay = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
                    attempt += 1
                    log.warning("projector: %s: %s; retrying in %.1fs from the stored offsets",
                                why, exc, delay)
                    await self._reset()
                    await asyncio.sleep(delay)
        finally:
            await self._reset()

    async def _reset(self) -> None:
        self._agents.clear()
        self._not_agents.clear()
        self.leader = False
        conn, self._lock_conn = self._lock_conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_client(consumer)  # then retried: a stray cancellation must not end us

    async def _session(self, until_caught_up: bool,
                       on_progress: Callable[[Projector], None] | None) -> None:
        if self._lock_conn is None or self._lock_conn.is_closed():
            await self.lead()
        await self.store.migrate()
        consumer = self._consumer = new_consumer(self.settings, fetch_max_wait_ms=200)
        await consumer.start()
        tps = [TopicPartition(t, p) for t in self.topics
               for p in sorted(await topic_partitions(consumer, t))]
        consumer.assign(tps)
        stored = await self.store.load_offsets()
        self.positions = {(tp.topic, tp.partition): stored.get((tp.topic, tp.partition))
                          for tp in tps}
        for tp in tps:
            position = self.positions[(tp.topic, tp.partition)]
            if position is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, position)
        if until_caught_up and self._targets is None:
            self._targets = {tp: int(o) for tp, o in (await consumer.end_offsets(tps)).items()}
        log.info("projector: leading schema %r from offsets %s", self.store.schema,
                 {f"{t}/{p}": o for (t, p), o in self.positions.items()})
        while True:
            if self._lock_conn is None or self._lock_conn.is_closed():
                raise ProjectionUnavailableError("lost the projector's leader connection")
            batch = await consumer.getmany(timeout_ms=500, max_records=self.max_batch)
            records = [r for rs in batch.values() for r in rs]
            if records:
                await self._project(records)
                if on_progress is not None:
                    on_progress(self)
            short = not records or len(records) < self.max_batch
            if short and await self._check_caught_up(consumer, tps) and until_caught_up:
                return

    async def lead(self, *, wait: bool = True) -> bool:
        """Take the schema's projector lock (a session advisory lock on a connection of its
        own), waiting as a standby while another projector holds it unless not ``wait``."""
        while True:
            try:
                conn = await asyncpg.connect(self.store.dsn, timeout=5)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                raise ProjectionUnavailableError(f"PostgreSQL: {type(exc).__name__}: "
                                                 f"{exc}") from exc
            got = await conn.fetchval("SELECT pg_try_advisory_lock(hashtext($1))",
                                      f"{self.store.schema}:projector")
            if got:
                self._lock_conn, self.leader = conn, True
                return True
            await conn.close()
            if not wait:
                return False
            log.info("projector: another projector leads schema %r; standing by",
                     self.store.schema)
            await asyncio.sleep(self.lock_poll_s)

    async def _project(self, records: list[Any]) -> None:
        located: list[Located] = []
        alerts: list[tuple[int, int, dict[str, Any]]] = []
        after: Offsets = {}
        for record in records:
            after[(record.topic, record.partition)] = record.offset + 1
            if record.value is None:
                self._rejected(record, "empty", "a record without a value (a tombstone)")
                continue
            try:
                if record.topic == self.events_topic:
                    located.append(Located(record.partition, record.offset,
                                           decode_event(record.value)))
                else:
                    name, alert = decode(record.value)
                    if name != ALERT:
                        raise SchemaError(f"schema_mismatch: a {name} on the alerts topic")
                    alerts.append((record.partition, record.offset, alert))
            except SchemaError as exc:
                FAILURES.labels("undecodable").inc()
                log.error("projector skips undecodable record %s/%d@%d: %s", record.topic,
                          record.partition, record.offset, exc)
                self._rejected(record, reason_of(exc, "undecodable"), str(exc))
        if self.letters is not None and not await self.letters.flush():
            # Not past a record whose dead letter is not written: the batch is redone.
            raise ProjectionUnavailableError("dead letters could not be written to ares.dlq")
        stream_ids = {x.event.stream_id for x in located}
        unknown = [s for s in stream_ids if s not in self._agents and s not in self._not_agents]
        if unknown:
            self._agents.update(await self.store.load_agents(unknown))
        rows = project(located, {s: self._agents[s] for s in stream_ids if s in self._agents},
                       alerts)
        expected = {key: self.positions.get(key) for key in after}
        await self.store.apply(rows, after, expected)
        self.positions.update(after)
        self._agents.update(rows.agents)
        self._not_agents.update(s for s in stream_ids if s not in self._agents)
        self.projected += len(located)
        EVENTS_PROJECTED.inc(len(located))
        BATCHES.inc()

    def _rejected(self, record: Any, reason: str, detail: str) -> None:
        if self.letters is not None:
            self.letters.reject(record, reason, detail)

    async def _check_caught_up(self, consumer: AIOKafkaConsumer,
                               tps: list[TopicPartition]) -> bool:
        ends = await consumer.end_offsets(tps)
        behind = False
        skipped: Offsets = {}
        for tp in tps:
            position = await consumer.position(tp)
            LAG.labels(tp.topic, str(tp.partition)).set(max(int(ends[tp]) - position, 0))
            target = ends[tp] if self._targets is None else self._targets[tp]
            behind = behind or position < target
            stored = self.positions.get((tp.topic, tp.partition))
            if stored is None or position > stored:
                skipped[(tp.topic, tp.partition)] = position
        if skipped:
            # Past records that yield no rows (transaction markers, aborted records): store
            # that too, or a restart would re-read them and the lag would never reach 0.
            await self.store.apply(BatchRows(), skipped,
                                   {key: self.positions.get(key) for key in skipped})
            self.positions.update(skipped)
        if not behind:
            self.caught_up.set()
        return not behind

    def lag(self) -> dict[str, int | None]:
        return {f"{t}/{p}": o for (t, p), o in self.positions.items()}


async def wait_caught_up(projector: Projector, timeout_s: float) -> bool:
    try:
        await wait_for(projector.caught_up.wait(), timeout_s)
    except TimeoutError:
        return False
    return True
