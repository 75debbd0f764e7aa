"""Genealogy: every incarnation of an agent, derived from its stream's lifecycle events.

Derived from events, so it survives every restart (the seed's genealogy lived in memory and
was lost with its process). An incarnation is one run of the agent: it begins with
``agent.started`` (first start, or a start after a stop or a quarantine) or
``agent.resurrected`` (which also carries its recovery record), and ends with
``agent.dead``, ``agent.stopped``, or a later start that replaced it without a recorded
end (``replaced``: e.g. events of a lost worker that never reported the death).

Resurrection attempts that failed before their incarnation ran (``agent.dead`` between
``agent.resurrecting`` and ``agent.resurrected``) are counted on the incarnation that
finally ran (``attempts``, ``backoff_ms``); a quarantine is noted on the incarnation after
whose death (or during which) it happened.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ares.events.model import Event
from ares.lifecycle.recovery import RecoveryRecord
from ares.lifecycle.state import (
    AGENT_DEAD,
    AGENT_QUARANTINED,
    AGENT_RESURRECTED,
    AGENT_RESURRECTING,
    AGENT_STARTED,
    AGENT_STOPPED,
)

# How an incarnation ended (None: it still runs, as far as the stream says).
DEAD = "dead"
STOPPED = "stopped"
REPLACED = "replaced"


@dataclass(frozen=True, slots=True)
class Incarnation:
    number: int
    parent: int | None  # the incarnation it follows (None for the first)
    started_at: datetime
    ended_at: datetime | None
    end: str | None  # dead | stopped | replaced | None (running)
    cause_of_death: str | None  # agent.dead cause, with the error when there is one
    recovery_record: RecoveryRecord | None  # None: not a resurrection
    worker: str | None
    attempts: int = 1  # resurrection attempts it took (1 for a plain start)
    backoff_ms: tuple[int, ...] = ()  # the delay before each attempt
    stop_reason: str | None = None
    quarantined: str | None = None  # reason of a quarantine during or after it
    first_version: int = 0  # stream versions from its start event to its end event
    last_version: int = 0

    @property
    def lifetime_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {
            "incarnation": self.number, "parent": self.parent,
            "started_at": self.started_at.isoformat(),
            "ended_at": None if self.ended_at is None else self.ended_at.isoformat(),
            "lifetime_s": self.lifetime_s, "end": self.end,
            "cause_of_death": self.cause_of_death, "stop_reason": self.stop_reason,
            "quarantined": self.quarantined, "worker": self.worker,
            "attempts": self.attempts, "backoff_ms": list(self.backoff_ms),
            "recovery": (None if self.recovery_record is None
                         else self.recovery_record.to_json()),
            "first_version": self.first_version, "last_version": self.last_version,
        }


def genealogy(events: Iterable[Event]) -> list[Incarnation]:
    """The incarnations of the stream ``events`` belong to, oldest first."""
    builder = _Builder()
    for event in events:
        builder.apply(event)
    return builder.incarnations


def genealogy_json(agent_id: str, incarnations: Iterable[Incarnation]) -> dict[str, Any]:
    """The document of ``ares agents genealogy ID --json``."""
    return {"agent_id": agent_id, "incarnations": [i.to_json() for i in incarnations]}


@dataclass(frozen=True, slots=True)
class _Attempts:
    """A resurrection announced (agent.resurrecting) whose incarnation has not run yet."""

    number: int
    parent: int | None
    count: int
    backoff_ms: tuple[int, ...]


class _Builder:
    def __init__(self) -> None:
        self.incarnations: list[Incarnation] = []
        self.pending: _Attempts | None = None

    @property
    def current(self) -> Incarnation | None:
        return self.incarnations[-1] if self.incarnations else None

    def _update(self, **changes: Any) -> None:
        current = self.incarnations[-1]
        values = {name: getattr(current, name) for name in Incarnation.__slots__}
        values.update(changes)
        self.incarnations[-1] = Incarnation(**values)

    def _running(self) -> bool:
        return self.current is not None and self.current.end is None

    def apply(self, event: Event) -> None:
        p: Mapping[str, Any] = event.payload if isinstance(event.payload, Mapping) else {}
        if event.type == AGENT_STARTED:
            self._begin(event, _int(p, "incarnation"), None, None)
        elif event.type == AGENT_RESURRECTING:
            self._announce(p)
        elif event.type == AGENT_RESURRECTED:
            self._begin(event, _int(p, "incarnation"), _int(p, "parent_incarnation"),
                        RecoveryRecord.from_event(event))
        elif event.type == AGENT_DEAD and self._running():
            self._update(ended_at=event.timestamp, end=DEAD, cause_of_death=_cause(p),
                         last_version=event.version)
        elif event.type == AGENT_STOPPED:
            self.pending = None  # a stop during the backoff abandons the resurrection
            if self._running():
                self._update(ended_at=event.timestamp, end=STOPPED,
                             stop_reason=_str(p, "reason"), last_version=event.version)
        elif event.type == AGENT_QUARANTINED:
            self.pending = None
            if self.current is not None:
                self._update(quarantined=_str(p, "reason") or "unspecified")
        if self._running():
            self._update(last_version=event.version)

    def _announce(self, p: Mapping[str, Any]) -> None:
        number = _int(p, "incarnation")
        backoff = _int(p, "backoff_ms") or 0
        pending = self.pending
        if pending is not None and pending.number == number:
            self.pending = _Attempts(pending.number, pending.parent, pending.count + 1,
                                     (*pending.backoff_ms, backoff))
        else:
            parent = _int(p, "parent_incarnation")
            self.pending = _Attempts(number if number is not None else self._next(), parent,
                                     1, (backoff,))

    def _begin(self, event: Event, number: int | None, parent: int | None,
               record: RecoveryRecord | None) -> None:
        if self._running():
            self._update(ended_at=event.timestamp, end=REPLACED)
        pending = self.pending
        attempts = 1
        backoff: tuple[int, ...] = ()
        if pending is not None and (number is None or pending.number == number):
            number = pending.number
            parent = pending.parent if parent is None else parent
            attempts, backoff = pending.count, pending.backoff_ms
        if number is None:
            number = self._next()
        if parent is None and self.current is not None:
            parent = self.current.number
        self.pending = None
        self.incarnations.append(Incarnation(
            number=number, parent=parent, started_at=event.timestamp, ended_at=None, end=None,
            cause_of_death=None, recovery_record=record,
            worker=_str(event.payload, "worker"), attempts=attempts, backoff_ms=backoff,
            first_version=event.version, last_version=event.version))

    def _next(self) -> int:
        return 0 if self.current is None else self.current.number + 1


def _cause(p: Mapping[str, Any]) -> str:
    cause = _str(p, "cause") or "unknown"
    error_type, message = _str(p, "error_type"), _str(p, "error_message")
    if error_type is None and message is None:
        return cause
    error = ": ".join(x for x in (error_type, message) if x)
    return f"{cause} ({error})"


def _str(p: Mapping[str, Any], key: str) -> str | None:
    value = p.get(key) if isinstance(p, Mapping) else None
    return value if isinstance(value, str) else None


def _int(p: Mapping[str, Any], key: str) -> int | None:
    value = p.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = ["DEAD", "REPLACED", "STOPPED", "Incarnation", "genealogy", "genealogy_json"]
