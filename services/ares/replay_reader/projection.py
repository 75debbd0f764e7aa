"""What the projector writes for a batch of records: pure, no I/O.

``project`` turns decoded records of ``ares.events`` and ``ares.alerts`` into the rows of
every table (``migrations/``), given the agents' rows as they were
before the batch. Agents are ``ares.views.tally.AgentTally``, the read model the views
are built on (the runtime's own lifecycle fold plus the SDK's token records), so the
projection can disagree neither with the host nor with ``ares agents``; genealogy is
recomputed by the caller from the stored lifecycle events with
``ares.lifecycle.genealogy``. The same code serves the projector and the reads that
fall back to scanning Kafka when PostgreSQL is down.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ares.events.model import Event
from ares.lifecycle import state as lc
from ares.lifecycle.genealogy import Incarnation
from ares.views.tally import AgentTally

AGENT_COLUMNS = (
    "agent_id", "kind", "status", "incarnation", "restarts", "deaths", "resurrections",
    "worker", "version", "last_event_type", "last_event_at", "last_death_cause",
    "quarantine_reason", "tasks_assigned", "tasks_completed", "tasks_failed", "tasks_pending",
    "llm_calls", "tokens_prompt", "tokens_completion", "tokens_reused", "resumes", "lifecycle",
    "parent_id", "delegated_to",  # 0002_team_links.sql (added columns come last)
)
INDEX_COLUMNS = ("stream_id", "version", "partition", "offset", "event_type", "module", "ts",
                 "hash")
STREAM_COLUMNS = ("stream_id", "partition", "version", "last_hash", "first_offset",
                  "last_offset", "events", "first_event_at", "last_event_at", "last_event_type")
LIFECYCLE_COLUMNS = ("agent_id", "version", "event_id", "event_type", "ts", "payload",
                     "metadata")
GENEALOGY_COLUMNS = ("agent_id", "seq", "incarnation", "parent", "started_at", "ended_at",
                     "lifetime_s", "end_kind", "cause_of_death", "stop_reason", "quarantined",
                     "worker", "attempts", "backoff_ms", "first_version", "last_version",
                     "recovery")
ALERT_COLUMNS = ("alert_id", "stream_id", "kind", "severity", "message", "source", "ts",
                 "details", "partition", "offset")


@dataclass(frozen=True, slots=True)
class AgentRow(AgentTally):
    """One agent as the projection holds it: the shared read model (``AgentTally``: the
    lifecycle fold and its counters, ``fold`` included) mapped to its ``agents`` row."""

    def record(self) -> tuple[Any, ...]:
        """The row in ``AGENT_COLUMNS`` order."""
        s = self.lifecycle
        last_at = None if s.last_event_time is None else _from_epoch(s.last_event_time)
        return (s.agent_id, s.kind, s.status.value, s.incarnation, len(s.restarts),
                self.deaths, self.resurrections, s.worker, s.version, s.last_event_type,
                last_at, s.last_death_cause, s.quarantine_reason, s.tasks_assigned,
                s.tasks_completed, s.tasks_failed, len(s.pending_tasks), self.llm_calls,
                self.tokens_prompt, self.tokens_completion, self.tokens_reused, self.resumes,
                json.dumps(s.to_json(), sort_keys=True), s.parent_id, list(self.delegated_to))

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> AgentRow:
        lifecycle = row["lifecycle"]
        data = json.loads(lifecycle) if isinstance(lifecycle, str) else lifecycle
        return cls(lc.AgentLifecycle.from_json(data), int(row["deaths"]),
                   int(row["resurrections"]), int(row["llm_calls"]),
                   int(row["tokens_prompt"]), int(row["tokens_completion"]),
                   int(row["tokens_reused"]), int(row["resumes"]),
                   tuple(str(c) for c in row["delegated_to"] or ()))

    def to_json(self) -> dict[str, Any]:
        """The API's Agent document."""
        return agent_json(dict(zip(AGENT_COLUMNS, self.record(), strict=True)))


def agent_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """An ``agents`` row (or ``AgentRow.record()`` zipped with the columns) as JSON."""
    last_at = row["last_event_at"]
    lifecycle = row["lifecycle"]
    state = json.loads(lifecycle) if isinstance(lifecycle, str) else lifecycle
    return {
        "agent_id": row["agent_id"], "kind": row["kind"], "status": row["status"],
        "incarnation": row["incarnation"], "restarts": row["restarts"],
        "deaths": row["deaths"], "resurrections": row["resurrections"],
        "worker": row["worker"], "version": row["version"],
        "last_event_type": row["last_event_type"],
        "last_event_at": None if last_at is None else last_at.isoformat(),
        "last_death_cause": row["last_death_cause"],
        "quarantine_reason": row["quarantine_reason"],
        "tasks": {"assigned": row["tasks_assigned"], "completed": row["tasks_completed"],
                  "failed": row["tasks_failed"], "pending": row["tasks_pending"]},
        "tokens": {"llm_calls": row["llm_calls"], "prompt": row["tokens_prompt"],
                   "completion": row["tokens_completion"],
                   "spent": row["tokens_prompt"] + row["tokens_completion"],
                   "reused": row["tokens_reused"], "resumes": row["resumes"]},
        "pending_tasks": [t[0] for t in state.get("pending_tasks", [])],
        "waiting_for": _waiting_json(state.get("waiting")),
        "pending_signals": [g[1] for g in state.get("signals", [])],
        # .get: a reader may serve a schema its projector has not migrated yet (a roll).
        "parent_id": row.get("parent_id"),
    }


def _waiting_json(waiting: Any) -> dict[str, Any] | None:
    """The lifecycle's ``waiting`` as the API shows it."""
    return lc.WaitingFor.from_json(waiting).to_document() if waiting else None


@dataclass(frozen=True, slots=True)
class Located:
    """A decoded event with where the log holds it."""

    partition: int
    offset: int
    event: Event


@dataclass(slots=True)
class BatchRows:
    index: list[tuple[Any, ...]] = field(default_factory=list)
    streams: list[tuple[Any, ...]] = field(default_factory=list)
    agents: dict[str, AgentRow] = field(default_factory=dict)  # changed agents, new rows
    lifecycle: list[tuple[Any, ...]] = field(default_factory=list)
    alerts: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def genealogy_agents(self) -> list[str]:
        """Agents whose genealogy must be recomputed (they got lifecycle events)."""
        return sorted({row[0] for row in self.lifecycle})


def project(events: Sequence[Located], agents: Mapping[str, AgentRow],
            alerts: Sequence[tuple[int, int, Mapping[str, Any]]] = ()) -> BatchRows:
    """The rows of a batch. ``agents``: rows before the batch of the agents it touches
    (absent: not an agent so far). ``alerts``: (partition, offset, decoded Alert)."""
    rows = BatchRows()
    by_stream: dict[str, list[Located]] = {}
    for located in events:
        by_stream.setdefault(located.event.stream_id, []).append(located)
        e = located.event
        rows.index.append((e.stream_id, e.version, located.partition, located.offset, e.type,
                           e.module, e.timestamp, e.hash))
    for stream_id, located_events in by_stream.items():
        rows.streams.append(_stream_row(stream_id, located_events))
        stream_events = [x.event for x in located_events]
        row = agents.get(stream_id)
        if row is None:
            started = next((i for i, e in enumerate(stream_events)
                            if e.type == lc.AGENT_STARTED), None)
            if started is None:
                continue  # not an agent's stream (plain appends), as the host sees it
            row = AgentRow(lc.AgentLifecycle(stream_id))
            stream_events = stream_events[started:]
        rows.agents[stream_id] = row.fold(stream_events)
        rows.lifecycle.extend(_lifecycle_row(e) for e in stream_events
                              if e.type in lc.LIFECYCLE_TYPES)
    for partition, offset, alert in alerts:
        rows.alerts.append((alert["id"], alert.get("stream_id", ""), alert["kind"],
                            alert["severity"], alert["message"], alert["source"],
                            alert["timestamp"], json.dumps(dict(alert.get("details", {}))),
                            partition, offset))
    return rows


def _stream_row(stream_id: str, located: Sequence[Located]) -> tuple[Any, ...]:
    """The batch's part of a ``streams`` row; the upsert merges it with the stored one."""
    top = max(located, key=lambda x: x.event.version)
    first, last = located[0], located[-1]
    return (stream_id, first.partition, top.event.version, top.event.hash, first.offset,
            last.offset, len(located), first.event.timestamp, last.event.timestamp,
            last.event.type)


def _lifecycle_row(event: Event) -> tuple[Any, ...]:
    return (event.stream_id, event.version, event.id, event.type, event.timestamp,
            json.dumps(dict(event.payload), sort_keys=True),
            json.dumps(dict(event.metadata), sort_keys=True))


def lifecycle_event(row: Mapping[str, Any]) -> Event:
    """A stored lifecycle event, as the genealogy reads it (no hashes: not verified here)."""
    payload, metadata = row["payload"], row["metadata"]
    return Event(id=row["event_id"], stream_id=row["agent_id"], type=row["event_type"],
                 module="", version=int(row["version"]), timestamp=row["ts"],
                 payload=json.loads(payload) if isinstance(payload, str) else payload,
                 metadata=json.loads(metadata) if isinstance(metadata, str) else metadata,
                 prev_hash="", hash="")


def genealogy_rows(agent_id: str, incarnations: Sequence[Incarnation]) -> list[tuple[Any, ...]]:
    rows = []
    for seq, i in enumerate(incarnations):
        recovery = None if i.recovery_record is None else json.dumps(i.recovery_record.to_json())
        rows.append((agent_id, seq, i.number, i.parent, i.started_at, i.ended_at, i.lifetime_s,
                     i.end, i.cause_of_death, i.stop_reason, i.quarantined, i.worker,
                     i.attempts, json.dumps(list(i.backoff_ms)), i.first_version,
                     i.last_version, recovery))
    return rows


def genealogy_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``genealogy`` row in the shape of ``Incarnation.to_json()``."""
    backoff, recovery = row["backoff_ms"], row["recovery"]
    ended = row["ended_at"]
    return {
        "incarnation": row["incarnation"], "parent": row["parent"],
        "started_at": row["started_at"].isoformat(),
        "ended_at": None if ended is None else ended.isoformat(),
        "lifetime_s": row["lifetime_s"], "end": row["end_kind"],
        "cause_of_death": row["cause_of_death"], "stop_reason": row["stop_reason"],
        "quarantined": row["quarantined"], "worker": row["worker"],
        "attempts": row["attempts"],
        "backoff_ms": json.loads(backoff) if isinstance(backoff, str) else backoff,
        "recovery": json.loads(recovery) if isinstance(recovery, str) else recovery,
        "first_version": row["first_version"], "last_version": row["last_version"],
    }


def _from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
