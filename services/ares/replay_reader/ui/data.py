"""What the dashboard's pages read, beyond the JSON API's handlers: the fleet page's
filtered, counted SQL page, the latest heartbeats, and the diff between two replayed states.

The fleet page filters on more than ``GET /agents`` does (worker, quarantined, in doubt) and
shows page numbers with a total, so it runs its own ``SELECT`` on the projection's ``agents``
table through the store's pooled connection; its rows are turned into documents by the
projection's own ``agent_json``, as the API's are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.events.wire.codec import decode
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projection import agent_json
from ares.tasks import wait_for
from ares.topics.spec import HEARTBEATS

log = logging.getLogger(__name__)

PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
# The alert kind a paused task raises (``runtime_manager.host``): the in-doubt filter.
IN_DOUBT_ALERT = "tool_in_doubt"
HEARTBEATS_TTL_S = 2.0
HEARTBEATS_RETRY_S = 30.0  # after a failed read (no topic, no broker): pages stay fast
_HEARTBEAT_RECORDS = 8  # per partition: the latest records, so every worker of it shows


@dataclass(frozen=True, slots=True)
class FleetFilter:
    status: str | None = None
    kind: str | None = None
    worker: str | None = None
    quarantined: bool = False
    in_doubt: bool = False

    def query(self) -> dict[str, str]:
        """As query parameters (for the pager's links)."""
        out: dict[str, str] = {}
        for name in ("status", "kind", "worker"):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.quarantined:
            out["quarantined"] = "1"
        if self.in_doubt:
            out["in_doubt"] = "1"
        return out


@dataclass(slots=True)
class FleetPage:
    items: list[dict[str, Any]]
    total: int
    page: int
    size: int
    kinds: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))


_WHERE = ("($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR kind = $2) "
          "AND ($3::text IS NULL OR worker = $3) AND (NOT $4::bool OR status = 'quarantined') "
          "AND (NOT $5::bool OR EXISTS (SELECT 1 FROM alerts WHERE alerts.stream_id = "
          f"agents.agent_id AND alerts.kind = '{IN_DOUBT_ALERT}'))")


async def fleet_page(store: ProjectionStore, flt: FleetFilter, page: int,
                     size: int = PAGE_SIZE) -> FleetPage:
    """One page of agents (by agent id) and the count of all that match; SQL paging, so
    10,000 agents cost one page's rows. ``ProjectionUnavailableError`` when PostgreSQL is."""
    args = (flt.status, flt.kind, flt.worker, flt.quarantined, flt.in_doubt)
    async with store.connection() as conn:
        total = int(await conn.fetchval(f"SELECT count(*) FROM agents WHERE {_WHERE}", *args))
        pages = max(1, -(-total // size))
        page = min(max(page, 1), pages)
        rows = await conn.fetch(f"SELECT * FROM agents WHERE {_WHERE} ORDER BY agent_id "
                                "LIMIT $6 OFFSET $7", *args, size, (page - 1) * size)
        kinds = [r["kind"] for r in await conn.fetch(
            "SELECT DISTINCT kind FROM agents ORDER BY kind LIMIT 200")]
        workers = [r["worker"] for r in await conn.fetch(
            "SELECT DISTINCT worker FROM agents WHERE worker IS NOT NULL ORDER BY worker "
            "LIMIT 200")]
    return FleetPage([agent_json(r) for r in rows], total, page, size, kinds, workers)


async def workers_summary(store: ProjectionStore) -> list[dict[str, Any]]:
    """Agents hosted per worker, by status, as the projection last saw them."""
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT worker, status, count(*) AS n FROM agents GROUP BY worker, status "
            "ORDER BY worker NULLS LAST, status")
    by_worker: dict[str | None, dict[str, Any]] = {}
    for r in rows:
        entry = by_worker.setdefault(r["worker"], {"worker": r["worker"], "agents": 0,
                                                   "statuses": {}})
        entry["agents"] += int(r["n"])
        entry["statuses"][r["status"]] = int(r["n"])
    return list(by_worker.values())


# -- heartbeats --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Beat:
    """What the latest heartbeat of a worker on a partition says."""

    worker_id: str
    partition: int
    offset: int
    at: datetime
    interval_ms: int
    agents: tuple[Mapping[str, Any], ...]

    @property
    def age_s(self) -> float:
        return max(0.0, (datetime.now(UTC) - self.at).total_seconds())


class Heartbeats:
    """The latest records of every partition of ``ares.heartbeats``, read on demand with
    one consumer kept for the process and cached for ``HEARTBEATS_TTL_S``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topic(HEARTBEATS)
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        self._cached: tuple[float, list[Beat]] | None = None
        self.error: str | None = None

    async def latest(self) -> list[Beat]:
        """Per (worker, partition), the newest beat; [] when Kafka cannot be read."""
        async with self._lock:
            if self._cached is not None and time.monotonic() < self._cached[0]:
                return self._cached[1]
            try:
                beats = await wait_for(self._read(), 10)
                self.error = None
                ttl = HEARTBEATS_TTL_S
            except Exception as exc:  # the page says so; never fails because of it
                log.warning("heartbeats unreadable: %s", exc)
                self.error = f"{type(exc).__name__}: {exc}"
                await self.close()
                beats = []
                ttl = HEARTBEATS_RETRY_S
            self._cached = (time.monotonic() + ttl, beats)
            return beats

    async def _read(self) -> list[Beat]:
        if self._consumer is None:
            consumer = new_consumer(self.settings, fetch_max_wait_ms=50)
            await consumer.start()
            self._consumer = consumer
        consumer = self._consumer
        tps = [TopicPartition(self.topic, p)
               for p in sorted(await topic_partitions(consumer, self.topic))]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        wanted = {}
        for tp in tps:
            if ends[tp] > starts[tp]:
                consumer.seek(tp, max(starts[tp], ends[tp] - _HEARTBEAT_RECORDS))
                wanted[tp] = ends[tp]
        newest: dict[tuple[str, int], Beat] = {}
        while wanted:
            batch = await consumer.getmany(*wanted, timeout_ms=500)
            for tp, records in batch.items():
                for record in records:
                    beat = _beat(tp.partition, record.offset, record.value)
                    if beat is not None:
                        newest[(beat.worker_id, tp.partition)] = beat
            for tp in list(wanted):
                if await consumer.position(tp) >= wanted[tp]:
                    del wanted[tp]
            if not batch and wanted:  # read_committed: aborted or control records left
                break
        return sorted(newest.values(), key=lambda b: (b.worker_id, b.partition))

    async def end_offsets(self, topic: str) -> dict[int, int]:
        """The log end offset of every partition of ``topic`` ({} when Kafka cannot say)."""
        async with self._lock:
            try:
                if self._consumer is None:
                    consumer = new_consumer(self.settings, fetch_max_wait_ms=50)
                    await consumer.start()
                    self._consumer = consumer
                tps = [TopicPartition(topic, p) for p in
                       sorted(await topic_partitions(self._consumer, topic))]
                ends = await wait_for(self._consumer.end_offsets(tps), 10)
            except Exception as exc:
                log.warning("end offsets of %s unreadable: %s", topic, exc)
                return {}
            return {tp.partition: int(offset) for tp, offset in ends.items()}

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()


def _beat(partition: int, offset: int, value: bytes | None) -> Beat | None:
    if value is None:
        return None
    try:
        _, datum = decode(value)
    except SchemaError:
        return None
    at = datum.get("timestamp")
    if not isinstance(at, datetime):
        return None
    return Beat(str(datum.get("worker_id", "")), partition, offset,
                at if at.tzinfo else at.replace(tzinfo=UTC), int(datum.get("interval_ms") or 0),
                tuple(datum.get("agents") or ()))


def beats_by_agent(beats: Sequence[Beat]) -> dict[str, tuple[Beat, Mapping[str, Any]]]:
    """Each agent's newest mention in a heartbeat: (the beat, what it says of the agent)."""
    out: dict[str, tuple[Beat, Mapping[str, Any]]] = {}
    for beat in sorted(beats, key=lambda b: b.at):
        for agent in beat.agents:
            out[str(agent.get("agent_id"))] = (beat, agent)
    return out


# -- replay diffs ------------------------------------------------------------------------


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A JSON document as ``path -> leaf`` (lists of scalars kept whole)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in value:
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        if not value and prefix:
            out[prefix] = {}
        return out
    if isinstance(value, list) and any(isinstance(v, Mapping | list) for v in value):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def diff(before: Any, after: Any) -> list[dict[str, Any]]:
    """What changed from ``before`` to ``after``: one entry per path (added, removed or
    changed), in path order."""
    old, new = flatten(before), flatten(after)
    changes = []
    for path in sorted(old.keys() | new.keys()):
        if path not in old:
            changes.append({"path": path, "change": "added", "before": None, "after": new[path]})
        elif path not in new:
            changes.append({"path": path, "change": "removed", "before": old[path],
                            "after": None})
        elif old[path] != new[path]:
            changes.append({"path": path, "change": "changed", "before": old[path],
                            "after": new[path]})
    return changes
