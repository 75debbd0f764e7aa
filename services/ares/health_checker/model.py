"""Values of the health checker's pure core: what it knows of agents, workers and
partitions, and the actions it asks the service to carry out."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum

from ares.health_checker.fingerprint import DeathFacts, Fingerprint

# Alert ids are uuid5 of a key that names the situation (agent + the death that crossed
# the threshold, worker + its last heartbeat...): a restarted checker that rebuilds the
# same situation from the topics derives the same id and sees it already emitted.
ALERT_NAMESPACE = uuid.UUID("5d0c2f0e-9a51-4b7e-8d1c-6a0f3e2b7c41")

# Alert kinds raised by the health checker (the Alert record's ``kind``).
DEATH_LOOP = "death_loop"
WORKER_LOST = "worker_lost"
RESURRECTION_LATE = "resurrection_late"

# Verdict causes (agent.declare_dead ``cause``, then agent.dead ``cause``).
HEARTBEAT_TIMEOUT = "heartbeat_timeout"
STALLED = "stalled"


def alert_id(key: str) -> str:
    return str(uuid.uuid5(ALERT_NAMESPACE, key))


class Phase(StrEnum):
    """What the checker believes of an agent, from its events (and beats when unknown)."""

    UNKNOWN = "unknown"  # seen in heartbeats only (its lifecycle predates the lookback)
    STARTING = "starting"  # resumed by an operator, not started yet
    RUNNING = "running"
    DEAD = "dead"
    RESURRECTING = "resurrecting"
    STOPPED = "stopped"
    QUARANTINED = "quarantined"
    HANDED_OFF = "handed_off"  # a graceful shutdown handed it to the next owner


class Outcome(StrEnum):
    """How the resurrection that should follow a death turned out."""

    CONFIRMED = "confirmed"  # agent.resurrected and a heartbeat of the new incarnation
    LATE = "late"  # not confirmed within the deadline (alert)
    FAILED = "failed"  # quarantined, or died again before it was confirmed
    ABANDONED = "abandoned"  # stopped by an operator before it came back


@dataclass(slots=True)
class Death:
    """A death whose resurrection is being tracked."""

    facts: DeathFacts
    resurrected_at: float | None = None
    incarnation: int | None = None  # of the announced resurrection
    late: bool = False


@dataclass(slots=True)
class Loop:
    alert_id: str
    fingerprint: Fingerprint
    detected_at: float  # event time of the death that crossed the threshold
    window_s: float
    quarantine_sent_at: float | None = None


@dataclass(slots=True)
class Verdict:
    """A death verdict the checker reached for one incarnation."""

    cause: str
    incarnation: int
    decided_at: float
    evidence_at: float  # the last sign of life (or progress) it was judged from
    sent: bool = False
    reply: str = ""
    late_alerted: bool = False


@dataclass(slots=True)
class AgentView:
    agent_id: str
    partition: int
    phase: Phase = Phase.UNKNOWN
    kind: str | None = None
    declared_step_timeout: float | None = None
    incarnation: int = 0
    worker: str | None = None  # who runs it, per the events
    version: int = 0
    pending: set[str] = field(default_factory=set)  # open tasks
    paused: bool = False  # waiting for an operator (tool call in doubt)
    waiting: bool = False  # in a durable wait (a signal, a timer): progress is not expected
    first_known: float | None = None
    last_progress: float | None = None
    last_start: float | None = None  # agent.started / agent.resurrected
    grace_until: float = 0.0
    last_work: tuple[str, int] | None = None
    # From heartbeats.
    last_seen: float | None = None
    seen_worker: str | None = None
    seen_incarnation: int = 0
    seen_version: int = 0
    seen_progress: str | None = None
    seen_status: str | None = None
    # Deaths that count towards a loop since the last healthy incarnation, oldest first.
    deaths: list[DeathFacts] = field(default_factory=list)
    open_death: Death | None = None
    loop: Loop | None = None
    verdict: Verdict | None = None
    # Its worker was reported lost: waiting for another worker to take it over.
    lost_from: str | None = None
    lost_at: float = 0.0
    lost_alerted: bool = False

    @property
    def busy(self) -> bool:
        return bool(self.pending) and not self.paused and not self.waiting

    @property
    def expects_beats(self) -> bool:
        if self.phase is Phase.RUNNING:
            return self.seen_status != "stopping"
        return self.phase is Phase.UNKNOWN and self.seen_status == "running"


@dataclass(slots=True)
class WorkerView:
    worker_id: str
    interval_s: float
    last_beat: float
    agents: dict[int, frozenset[str]] = field(default_factory=dict)  # its last beat per p
    stopping: bool = False  # its last beat said it was shutting down
    lost: bool = False


@dataclass(slots=True)
class PartitionView:
    owner: str | None = None
    owner_since: float = 0.0
    last_beat: float | None = None
    interval_s: float = 1.0
    live: bool = False  # caught up with its topics: decisions allowed


@dataclass(frozen=True, slots=True)
class GroupState:
    """The runtime managers' consumer group, as the service last described it."""

    stable: bool
    members: frozenset[str]
    observed_at: float


# -- actions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeclareDead:
    agent_id: str
    cause: str
    incarnation: int
    worker: str | None
    last_seen: float | None
    detail: str
    evidence_at: float
    decided_at: float

    @property
    def key(self) -> str:
        return f"verdict/{self.agent_id}/{self.incarnation}"


@dataclass(frozen=True, slots=True)
class QuarantineAgent:
    agent_id: str
    reason: str
    deaths: int

    @property
    def key(self) -> str:
        return f"quarantine/{self.agent_id}"


@dataclass(frozen=True, slots=True)
class RaiseAlert:
    id: str
    kind: str
    stream_id: str
    severity: str
    message: str
    details: dict[str, str]
    at: float

    @property
    def key(self) -> str:
        return f"alert/{self.id}"


Action = DeclareDead | QuarantineAgent | RaiseAlert
