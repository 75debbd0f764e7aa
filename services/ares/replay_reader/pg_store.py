"""The projections in PostgreSQL (asyncpg): the projector's writes and every read of them.

Exactly-once into the database: ``apply`` writes a batch's rows AND the Kafka offsets after
its records in one transaction, under a transaction-scoped advisory lock, after checking
that the stored offsets are still the ones the batch started from. A crash rolls the whole
batch back and the projector resumes from the stored offsets; a second projector on the
same schema can neither interleave nor double-apply (its check fails and it re-seeks).

Driver errors are translated at this edge: a connection that cannot be made or is lost, or
a schema that does not exist yet, is ``ProjectionUnavailableError`` (retriable), which the
readers answer by scanning Kafka and the projector by reconnecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from ares.events.ports import IndexEntry, IndexSlice, IndexUnavailableError
from ares.lifecycle.genealogy import genealogy
from ares.replay_reader import migrations
from ares.replay_reader.projection import (
    AGENT_COLUMNS,
    ALERT_COLUMNS,
    GENEALOGY_COLUMNS,
    INDEX_COLUMNS,
    LIFECYCLE_COLUMNS,
    STREAM_COLUMNS,
    AgentRow,
    BatchRows,
    genealogy_rows,
    lifecycle_event,
)
from ares.tasks import wait_for

DEFAULT_SCHEMA = "ares_projections"
Offsets = dict[tuple[str, int], int]
_RECONNECT_EVERY_S = 2.0
_STAGES = {"stage_index": "stream_index", "stage_streams": "streams", "stage_agents": "agents",
           "stage_lifecycle": "lifecycle_events", "stage_alerts": "alerts"}


class ProjectionUnavailableError(IndexUnavailableError):
    """PostgreSQL cannot be reached, or the projections schema is missing."""


class OffsetConflictError(Exception):
    """The stored offsets moved under this projector (another one wrote): re-seek."""


_UNAVAILABLE = (OSError, asyncio.TimeoutError, asyncpg.InterfaceError,
                asyncpg.exceptions.PostgresConnectionError,
                asyncpg.exceptions.CannotConnectNowError,
                asyncpg.exceptions.InvalidSchemaNameError,
                asyncpg.exceptions.UndefinedTableError,
                asyncpg.exceptions.AdminShutdownError)


class ProjectionStore:
    def __init__(self, dsn: str, schema: str = DEFAULT_SCHEMA, *, events_topic: str,
                 max_connections: int = 4, timeout_s: float = 5.0) -> None:
        self.dsn = dsn
        self.schema = migrations.check_schema_name(schema)
        self.events_topic = events_topic
        self._max = max_connections
        self._timeout = timeout_s
        self._pool: asyncpg.Pool | None = None
        self._last_attempt = 0.0
        self._connect_lock = asyncio.Lock()

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                await wait_for(pool.close(), self._timeout)

    async def _get_pool(self, *, force: bool = False) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        async with self._connect_lock:
            if self._pool is not None:
                return self._pool
            if not force and time.monotonic() - self._last_attempt < _RECONNECT_EVERY_S:
                raise ProjectionUnavailableError("PostgreSQL was unreachable a moment ago")
            self._last_attempt = time.monotonic()
            try:
                self._pool = await asyncpg.create_pool(
                    self.dsn, min_size=1, max_size=self._max, timeout=self._timeout,
                    command_timeout=60, server_settings={"search_path": self.schema})
            except _UNAVAILABLE as exc:
                raise ProjectionUnavailableError(f"PostgreSQL: {type(exc).__name__}: "
                                                 f"{exc}") from exc
            return self._pool

    @contextlib.asynccontextmanager
    async def connection(self, *, force: bool = False) -> AsyncIterator[Any]:
        """A pooled connection; driver errors become ``ProjectionUnavailableError``."""
        pool = await self._get_pool(force=force)
        try:
            async with pool.acquire(timeout=self._timeout) as conn:
                yield conn
        except _UNAVAILABLE as exc:
            if not isinstance(exc, asyncpg.exceptions.UndefinedTableError | asyncpg.exceptions
                              .InvalidSchemaNameError):
                await self.close()
            raise ProjectionUnavailableError(f"PostgreSQL: {type(exc).__name__}: {exc}") \
                from exc

    # -- schema ----------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        async with self.connection(force=True) as conn:
            applied: list[int] = await migrations.migrate(conn, self.schema)
            return applied

    async def drop(self) -> None:
        async with self.connection(force=True) as conn:
            await migrations.drop_schema(conn, self.schema)

    # -- the projector's side --------------------------------------------------------------

    async def load_offsets(self) -> Offsets:
        async with self.connection(force=True) as conn:
            rows = await conn.fetch("SELECT topic, partition, next_offset FROM projector_offsets")
        return {(r["topic"], r["partition"]): r["next_offset"] for r in rows}

    async def load_agents(self, agent_ids: Sequence[str]) -> dict[str, AgentRow]:
        async with self.connection() as conn:
            rows = await conn.fetch("SELECT * FROM agents WHERE agent_id = ANY($1::text[])",
                                    list(agent_ids))
        return {r["agent_id"]: AgentRow.from_record(r) for r in rows}

    async def apply(self, rows: BatchRows, offsets: Offsets, expected: Mapping[tuple[str, int],
                    int | None]) -> None:
        """Write a batch and the offsets after it, atomically (see the module docstring)."""
        async with self.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))",
                               f"{self.schema}:project")
            stored = {(r["topic"], r["partition"]): r["next_offset"] for r in await conn.fetch(
                "SELECT topic, partition, next_offset FROM projector_offsets")}
            for key, position in expected.items():
                if stored.get(key) != position:
                    raise OffsetConflictError(f"{key[0]}/{key[1]}: stored offset "
                                              f"{stored.get(key)}, expected {position}")
            await self._stage_tables(conn)
            await self._write(conn, rows)
            await conn.executemany(
                "INSERT INTO projector_offsets (topic, partition, next_offset) VALUES ($1, $2, $3)"
                " ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset,"
                " updated_at = now()", [(t, p, o) for (t, p), o in offsets.items()])

    async def _stage_tables(self, conn: Any) -> None:
        for stage, table in _STAGES.items():
            await conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {table}) "
                               "ON COMMIT DELETE ROWS")

    async def _write(self, conn: Any, rows: BatchRows) -> None:
        if rows.index:
            await conn.copy_records_to_table("stage_index", records=rows.index,
                                             columns=INDEX_COLUMNS)
            await conn.execute("INSERT INTO stream_index SELECT * FROM stage_index "
                               "ON CONFLICT DO NOTHING")
        if rows.streams:
            await conn.copy_records_to_table("stage_streams", records=rows.streams,
                                             columns=STREAM_COLUMNS)
            await conn.execute(_UPSERT_STREAMS)
        if rows.agents:
            await conn.copy_records_to_table("stage_agents", columns=AGENT_COLUMNS,
                                             records=[a.record() for a in rows.agents.values()])
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in AGENT_COLUMNS[1:])
            await conn.execute(f"INSERT INTO agents SELECT * FROM stage_agents "
                               f"ON CONFLICT (agent_id) DO UPDATE SET {sets}")
        if rows.lifecycle:
            await conn.copy_records_to_table("stage_lifecycle", records=rows.lifecycle,
                                             columns=LIFECYCLE_COLUMNS)
            await conn.execute("INSERT INTO lifecycle_events SELECT * FROM stage_lifecycle "
                               "ON CONFLICT DO NOTHING")
            await self._regenerate_genealogy(conn, rows.genealogy_agents)
        if rows.alerts:
            await conn.copy_records_to_table("stage_alerts", records=rows.alerts,
                                             columns=ALERT_COLUMNS)
            await conn.execute("INSERT INTO alerts SELECT * FROM stage_alerts "
                               "ON CONFLICT DO NOTHING")

    async def _regenerate_genealogy(self, conn: Any, agent_ids: list[str]) -> None:
        stored = await conn.fetch("SELECT * FROM lifecycle_events WHERE agent_id = ANY($1) "
                                  "ORDER BY agent_id, version", agent_ids)
        by_agent: dict[str, list[Any]] = {}
        for row in stored:
            by_agent.setdefault(row["agent_id"], []).append(lifecycle_event(row))
        records = [rec for agent_id, events in by_agent.items()
                   for rec in genealogy_rows(agent_id, genealogy(events))]
        await conn.execute("DELETE FROM genealogy WHERE agent_id = ANY($1)", agent_ids)
        if records:
            await conn.copy_records_to_table("genealogy", records=records,
                                             columns=GENEALOGY_COLUMNS)

    # -- reads -----------------------------------------------------------------------------

    async def list_agents(self, limit: int, after: str | None = None,
                          status: str | None = None, kind: str | None = None) -> list[Any]:
        async with self.connection() as conn:
            rows: list[Any] = await conn.fetch(
                "SELECT * FROM agents WHERE ($1::text IS NULL OR agent_id > $1) "
                "AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR kind = $3) "
                "ORDER BY agent_id LIMIT $4", after, status, kind, limit)
            return rows

    async def agent(self, agent_id: str) -> Any | None:
        async with self.connection() as conn:
            return await conn.fetchrow("SELECT * FROM agents WHERE agent_id = $1", agent_id)

    async def team(self, agent_id: str) -> list[Any]:
        """The rows of ``agent_id`` and of every agent below it, in no order: the agents it
        delegated to and those naming it as their parent, transitively (``views.team``
        builds the tree from them). Empty when it is not projected. The recursion's UNION
        drops the rows it already has, so a cycle of delegations ends. A schema its
        projector has not migrated to 0002_team_links yet (a rolling upgrade) is
        ``ProjectionUnavailableError``: the reader answers from the log meanwhile."""
        async with self.connection() as conn:
            try:
                rows: list[Any] = await conn.fetch(_TEAM, agent_id)
            except asyncpg.exceptions.UndefinedColumnError as exc:
                raise ProjectionUnavailableError(
                    f"schema {self.schema!r} predates migration 0002_team_links: {exc}") \
                    from exc
            return rows

    async def genealogy(self, agent_id: str) -> list[Any]:
        async with self.connection() as conn:
            rows: list[Any] = await conn.fetch(
                "SELECT * FROM genealogy WHERE agent_id = $1 ORDER BY seq", agent_id)
            return rows

    async def alerts(self, limit: int, stream_id: str | None = None,
                     before: str | None = None) -> list[Any]:
        """Newest first; ``before``: the id of the last alert of the previous page (an
        unknown id ends the listing: an empty page)."""
        async with self.connection() as conn:
            rows: list[Any] = await conn.fetch(
                "SELECT * FROM alerts WHERE ($1::text IS NULL OR stream_id = $1) AND "
                "($2::text IS NULL OR (ts, alert_id) < "
                "(SELECT ts, alert_id FROM alerts WHERE alert_id = $2)) "
                "ORDER BY ts DESC, alert_id DESC LIMIT $3", stream_id, before, limit)
            return rows

    async def heads(self, stream_ids: Sequence[str] | None = None) -> dict[str, tuple[int, str]]:
        """The head (version, hash) of streams as projected (every stream when None)."""
        async with self.connection() as conn:
            rows = await conn.fetch(
                "SELECT stream_id, version, last_hash FROM streams "
                "WHERE $1::text[] IS NULL OR stream_id = ANY($1)",
                None if stream_ids is None else list(stream_ids))
        return {r["stream_id"]: (r["version"], r["last_hash"]) for r in rows}

    async def offsets(self) -> list[Any]:
        async with self.connection() as conn:
            rows: list[Any] = await conn.fetch(
                "SELECT topic, partition, next_offset, updated_at FROM projector_offsets "
                "ORDER BY topic, partition")
            return rows

    # -- StreamIndex -----------------------------------------------------------------------

    async def locate(self, stream_id: str, partition: int, from_version: int,
                     limit: int) -> IndexSlice:
        async with self.connection() as conn, conn.transaction(isolation="repeatable_read",
                                                               readonly=True):
            projected = await self._projected(conn, partition)
            rows = await conn.fetch(
                'SELECT version, partition, "offset" FROM stream_index WHERE stream_id = $1 '
                "AND version >= $2 ORDER BY version LIMIT $3", stream_id, from_version, limit)
        entries = [IndexEntry(r["version"], r["partition"], r["offset"]) for r in rows]
        return IndexSlice([e for e in entries if e.partition == partition], projected)

    async def version_after(self, stream_id: str, partition: int,
                            at: datetime) -> tuple[int | None, int]:
        async with self.connection() as conn, conn.transaction(isolation="repeatable_read",
                                                               readonly=True):
            projected = await self._projected(conn, partition)
            version = await conn.fetchval(
                "SELECT min(version) FROM stream_index WHERE stream_id = $1 AND ts > $2",
                stream_id, at)
        return version, projected

    async def last(self, stream_id: str, partition: int) -> tuple[IndexEntry | None, int]:
        async with self.connection() as conn, conn.transaction(isolation="repeatable_read",
                                                               readonly=True):
            projected = await self._projected(conn, partition)
            row = await conn.fetchrow(
                'SELECT version, partition, "offset" FROM stream_index WHERE stream_id = $1 '
                "ORDER BY version DESC LIMIT 1", stream_id)
        entry = None if row is None else IndexEntry(row["version"], row["partition"],
                                                     row["offset"])
        return entry, projected

    async def _projected(self, conn: Any, partition: int) -> int:
        value = await conn.fetchval("SELECT next_offset FROM projector_offsets WHERE topic = $1 "
                                    "AND partition = $2", self.events_topic, partition)
        return 0 if value is None else int(value)


_TEAM = """
WITH RECURSIVE team(agent_id) AS (
    SELECT agent_id FROM agents WHERE agent_id = $1
  UNION
    SELECT below.agent_id FROM team CROSS JOIN LATERAL (
        SELECT unnest(p.delegated_to) AS agent_id FROM agents p WHERE p.agent_id = team.agent_id
      UNION ALL
        SELECT c.agent_id FROM agents c WHERE c.parent_id = team.agent_id
    ) AS below
)
SELECT agents.* FROM agents JOIN team USING (agent_id)
"""

_UPSERT_STREAMS = """
INSERT INTO streams SELECT * FROM stage_streams
ON CONFLICT (stream_id) DO UPDATE SET
    version = GREATEST(streams.version, EXCLUDED.version),
    last_hash = CASE WHEN EXCLUDED.version >= streams.version THEN EXCLUDED.last_hash
                     ELSE streams.last_hash END,
    first_offset = LEAST(streams.first_offset, EXCLUDED.first_offset),
    last_offset = GREATEST(streams.last_offset, EXCLUDED.last_offset),
    events = streams.events + EXCLUDED.events,
    first_event_at = LEAST(streams.first_event_at, EXCLUDED.first_event_at),
    last_event_at = EXCLUDED.last_event_at,
    last_event_type = EXCLUDED.last_event_type
"""
