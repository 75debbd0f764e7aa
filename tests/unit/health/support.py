"""A partition of agents and workers for the health checker's pure core, on a test clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ares.events.model import Event
from ares.health_checker.config import HealthConfig
from ares.health_checker.detector import HealthState
from ares.health_checker.model import Action, DeclareDead, Outcome, QuarantineAgent, RaiseAlert
from tests.unit.runtime.streams import EPOCH0, Stream

P = 0  # the partition of every agent here


@dataclass
class Recorder:
    """A ``HealthObserver`` that remembers what it was told."""

    verdicts: list[tuple[str, float]] = field(default_factory=list)
    outcomes: list[tuple[Outcome, float | None]] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)

    def verdict(self, cause: str, latency_s: float) -> None:
        self.verdicts.append((cause, latency_s))

    def resurrection(self, outcome: Outcome, seconds: float | None) -> None:
        self.outcomes.append((outcome, seconds))

    def alert(self, kind: str) -> None:
        self.alerts.append(kind)


class World:
    """Streams, heartbeats and the state they are fed to; times are seconds after T0."""

    def __init__(self, config: HealthConfig | None = None, *, live: bool = True) -> None:
        self.config = config or HealthConfig(step_timeout_s=None)
        self.observer = Recorder()
        self.state = HealthState(self.config, self.observer)
        self.state.assign([P])
        if live:
            self.state.set_live(P)
        self.streams: dict[str, Stream] = {}
        self.log: list[tuple[int, Event]] = []  # every event fed, for rebuilds

    def event(self, agent: str, type_: str, at: float,
              payload: Mapping[str, Any] | None = None) -> Event:
        stream = self.streams.setdefault(agent, Stream(agent))
        event = stream.add(type_, payload, at)
        self.log.append((P, event))
        self.state.observe_event(P, event)
        return event

    def start(self, agent: str, at: float, kind: str = "test.kind", incarnation: int = 1,
              worker: str = "w1", config: str = "{}") -> None:
        self.event(agent, "agent.started", at, {"kind": kind, "config_json": config,
                                                 "incarnation": incarnation,
                                                 "worker": worker})

    def dead(self, agent: str, at: float, cause: str = "exception", incarnation: int = 1,
             error_type: str | None = "RuntimeError", message: str | None = "boom",
             traceback_digest: str | None = "tb1") -> Event:
        return self.event(agent, "agent.dead", at, {
            "cause": cause, "error_type": error_type, "error_message": message,
            "traceback_digest": traceback_digest, "last_event_type": None,
            "last_version": 0, "incarnation": incarnation})

    def resurrect(self, agent: str, at: float, incarnation: int, worker: str = "w1",
                  attempt: int = 1) -> None:
        """agent.resurrecting then agent.resurrected (the new ``incarnation``) at ``at``."""
        self.event(agent, "agent.resurrecting", at, {
            "incarnation": incarnation, "parent_incarnation": incarnation - 1,
            "attempt": attempt, "backoff_ms": 0, "cause": "exception"})
        self.event(agent, "agent.resurrected", at, {
            "incarnation": incarnation, "parent_incarnation": incarnation - 1,
            "worker": worker, "snapshot_version": None, "replayed_events": 0,
            "recovery_ms": 1})

    def beat(self, worker: str, at: float, agents: Sequence[Mapping[str, Any]] = (),
             interval_ms: int = 1000, partition: int = P) -> None:
        self.state.observe_heartbeat(partition, worker, EPOCH0 + at, interval_ms,
                                     [dict(a) for a in agents])

    def beats(self, worker: str, start: float, end: float,
              agents: Sequence[Mapping[str, Any]] = ()) -> None:
        """One beat a second in [start, end]."""
        t = start
        while t <= end + 1e-9:
            self.beat(worker, t, agents)
            t += 1.0

    def due(self, at: float) -> list[Action]:
        return self.state.due(EPOCH0 + at)

    def settle(self, at: float) -> list[Action]:
        """``due`` with every action reported done."""
        actions = self.due(at)
        for action in actions:
            self.state.completed(action, True, EPOCH0 + at, "ok")
        return actions


def agent_beat(agent: str, version: int, incarnation: int = 1, status: str = "running",
               progress: str | None = None) -> dict[str, Any]:
    return {"agent_id": agent, "version": version, "incarnation": incarnation,
            "status": status, "progress": progress}


def verdicts(actions: Sequence[Action]) -> list[DeclareDead]:
    return [a for a in actions if isinstance(a, DeclareDead)]


def alerts(actions: Sequence[Action], kind: str | None = None) -> list[RaiseAlert]:
    return [a for a in actions if isinstance(a, RaiseAlert) and kind in (None, a.kind)]


def quarantines(actions: Sequence[Action]) -> list[QuarantineAgent]:
    return [a for a in actions if isinstance(a, QuarantineAgent)]
