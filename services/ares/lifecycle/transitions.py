"""What a lifecycle event means, decided once: one typed ``Transition`` per event type.

``read`` is the one dispatch over the lifecycle's event types (``ares.lifecycle.events``):
it parses an event's payload, field by field (a malformed field reads as ``None``), into a
``Transition`` whose class says what happened (a start, a death, a resurrection, a task
assigned...) and whose ``status`` says which ``Status`` it leads the agent to (``None``:
the status does not change). Stateless: the same event always reads the same.

``state.Folder`` accumulates transitions into an ``AgentLifecycle`` and reports each one it
applied (``Folder.step``, ``state.step``); every other reader of an agent's life (the health
checker, the chaos invariants, the summariser, the views, the projection, the demo) reacts
to these transitions or to the folded state, so none keeps its own table of event types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from ares.events.model import Event
from ares.lifecycle import events as ev


class Status(StrEnum):
    STARTING = "starting"  # no incarnation runs yet (new, or resumed and not yet started)
    RUNNING = "running"
    STOPPED = "stopped"
    DEAD = "dead"  # a death is recorded and no resurrection is announced yet
    RESURRECTING = "resurrecting"
    QUARANTINED = "quarantined"


@dataclass(frozen=True, slots=True)
class Started:
    """``agent.started``: an incarnation began running (first start, or after a stop,
    quarantine or resume)."""

    kind: str | None
    config_json: str | None
    incarnation: int | None
    worker: str | None
    status: ClassVar[Status | None] = Status.RUNNING


@dataclass(frozen=True, slots=True)
class Stopped:
    """``agent.stopped``: a voluntary end of the incarnation."""

    reason: str | None
    status: ClassVar[Status | None] = Status.STOPPED


@dataclass(frozen=True, slots=True)
class Died:
    """``agent.dead``: the incarnation ended abnormally (a death)."""

    cause: str | None
    incarnation: int | None
    error_type: str | None
    error_message: str | None
    traceback_digest: str | None
    last_event_type: str | None  # what the runtime says the incarnation appended last
    last_version: int | None
    status: ClassVar[Status | None] = Status.DEAD


@dataclass(frozen=True, slots=True)
class Resurrecting:
    """``agent.resurrecting``: the guard allowed a restart; ``attempt`` is its count of the
    deaths that still count (older ones are forgotten)."""

    attempt: int | None
    status: ClassVar[Status | None] = Status.RESURRECTING


@dataclass(frozen=True, slots=True)
class Resurrected:
    """``agent.resurrected``: recovery finished and a new incarnation runs."""

    incarnation: int | None
    worker: str | None
    status: ClassVar[Status | None] = Status.RUNNING


@dataclass(frozen=True, slots=True)
class Quarantined:
    """``agent.quarantined``: the restart budget is spent; ``deaths`` the guard counted."""

    reason: str | None
    deaths: int | None
    status: ClassVar[Status | None] = Status.QUARANTINED


@dataclass(frozen=True, slots=True)
class Resumed:
    """``agent.resumed``: an operator cleared a quarantine or stop; not started yet."""

    reason: str | None
    status: ClassVar[Status | None] = Status.STARTING


@dataclass(frozen=True, slots=True)
class HandedOff:
    """``agent.handed_off``: a graceful shutdown handed the agent to the next owner; it is
    neither a death nor a stop, so the status does not change."""

    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class TaskAssigned:
    task_id: str | None
    input_json: str | None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class TaskCompleted:
    task_id: str | None
    output_json: str | None = None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class TaskFailed:
    task_id: str | None
    retriable: bool  # only an explicit True: a retriable failure may be assigned again
    error_type: str | None = None
    error_message: str | None = None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    snapshot_version: int | None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """``signal.received``: a signal for the agent, kept until a wait consumes it."""

    signal_id: str | None
    name: str | None
    payload_json: str | None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class WaitStarted:
    """``wait.started``: a task began to wait for one of ``names`` (signals; empty for a
    timer) until ``deadline`` (epoch seconds; ``None``: no timeout)."""

    task_id: str | None
    kind: str | None  # signal | timer | approval
    names: tuple[str, ...]
    deadline: float | None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class WaitCompleted:
    """``wait.completed``: the wait ended; ``signal_id`` names the signal it consumed."""

    task_id: str | None
    outcome: str | None  # signal | timeout | elapsed
    signal_id: str | None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class DelegationDispatched:
    """``delegation.dispatched`` (the parent's stream): a task of this agent gave
    ``child_task_id`` to ``child_id``; its outcome comes back as the signal ``signal``."""

    task_id: str | None
    child_id: str | None
    child_kind: str | None
    child_task_id: str | None
    signal: str | None
    on_parent_stop: str | None  # stop | detach
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class DelegationStopped:
    """``delegation.stopped`` (the parent's stream): the parent's stop went to ``children``."""

    children: tuple[str, ...]
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class TaskDelegated:
    """``task.delegated`` (the child's stream): task ``task_id`` came from ``parent_id``'s
    task ``parent_task_id``; its outcome goes back as the signal ``signal``."""

    task_id: str | None
    parent_id: str | None
    parent_task_id: str | None
    signal: str | None
    on_parent_stop: str | None
    status: ClassVar[Status | None] = None


@dataclass(frozen=True, slots=True)
class DelegationReported:
    """``delegation.reported`` (the child's stream): the outcome of ``task_id`` went to its
    parent."""

    task_id: str | None
    status: ClassVar[Status | None] = None


Transition = (Started | Stopped | Died | Resurrecting | Resurrected | Quarantined | Resumed
              | HandedOff | TaskAssigned | TaskCompleted | TaskFailed | SnapshotTaken
              | SignalReceived | WaitStarted | WaitCompleted | DelegationDispatched
              | DelegationStopped | TaskDelegated | DelegationReported)
# The transitions after which no incarnation runs until a restart (the agent's life ended).
ENDINGS = (Stopped, Died, Quarantined)
# The transitions that (re)open the agent's life.
RESTARTS = (Started, Resurrected, Resumed)
TASK_ENDS = (TaskCompleted, TaskFailed)


def read(event: Event) -> Transition | None:
    """What ``event`` means for the agent's lifecycle; ``None``: nothing (not a lifecycle
    event: the agent's own records, tools, LLM calls...)."""
    reader = _READERS.get(event.type)
    if reader is None:
        return None
    payload = event.payload
    return reader(payload if isinstance(payload, Mapping) else {})


def starts_afresh(previous: Status | None) -> bool:
    """Whether an ``agent.started`` after ``previous`` (``None``: nothing known before)
    opens a new restart budget: a first start, or a restart after a stop, a quarantine or
    a resume. Any other start (after a death, say) keeps counting the deaths."""
    return previous in (None, Status.STARTING, Status.STOPPED, Status.QUARANTINED)


def _started(p: Mapping[str, Any]) -> Started:
    return Started(_str(p, "kind"), _str(p, "config_json"), _int(p, "incarnation"),
                   _str(p, "worker"))


def _died(p: Mapping[str, Any]) -> Died:
    return Died(_str(p, "cause"), _int(p, "incarnation"), _str(p, "error_type"),
                _str(p, "error_message"), _str(p, "traceback_digest"),
                _str(p, "last_event_type"), _int(p, "last_version"))


_READERS: dict[str, Callable[[Mapping[str, Any]], Transition]] = {
    ev.AGENT_STARTED: _started,
    ev.AGENT_STOPPED: lambda p: Stopped(_str(p, "reason")),
    ev.AGENT_DEAD: _died,
    ev.AGENT_RESURRECTING: lambda p: Resurrecting(_int(p, "attempt")),
    ev.AGENT_RESURRECTED: lambda p: Resurrected(_int(p, "incarnation"), _str(p, "worker")),
    ev.AGENT_QUARANTINED: lambda p: Quarantined(_str(p, "reason"), _int(p, "deaths")),
    ev.AGENT_RESUMED: lambda p: Resumed(_str(p, "reason")),
    ev.AGENT_HANDED_OFF: lambda p: HandedOff(),
    ev.TASK_ASSIGNED: lambda p: TaskAssigned(_str(p, "task_id"), _str(p, "input_json")),
    ev.TASK_COMPLETED: lambda p: TaskCompleted(_str(p, "task_id"), _str(p, "output_json")),
    ev.TASK_FAILED: lambda p: TaskFailed(_str(p, "task_id"), p.get("retriable") is True,
                                         _str(p, "error_type"), _str(p, "error_message")),
    ev.SNAPSHOT_TAKEN: lambda p: SnapshotTaken(_int(p, "snapshot_version")),
    ev.SIGNAL_RECEIVED: lambda p: SignalReceived(_str(p, "signal_id"), _str(p, "name"),
                                                 _str(p, "payload_json")),
    ev.WAIT_STARTED: lambda p: WaitStarted(_str(p, "task_id"), _str(p, "kind"), _names(p),
                                           _float(p, "deadline")),
    ev.WAIT_COMPLETED: lambda p: WaitCompleted(_str(p, "task_id"), _str(p, "outcome"),
                                               _str(p, "signal_id")),
    ev.DELEGATION_DISPATCHED: lambda p: DelegationDispatched(
        _str(p, "task_id"), _str(p, "child_id"), _str(p, "child_kind"),
        _str(p, "child_task_id"), _str(p, "signal"), _str(p, "on_parent_stop")),
    ev.DELEGATION_STOPPED: lambda p: DelegationStopped(_strings(p, "children")),
    ev.TASK_DELEGATED: lambda p: TaskDelegated(
        _str(p, "task_id"), _str(p, "parent_id"), _str(p, "parent_task_id"),
        _str(p, "signal"), _str(p, "on_parent_stop")),
    ev.DELEGATION_REPORTED: lambda p: DelegationReported(_str(p, "task_id")),
}


def _str(p: Mapping[str, Any], key: str) -> str | None:
    value = p.get(key)
    return value if isinstance(value, str) else None


def _float(p: Mapping[str, Any], key: str) -> float | None:
    value = p.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _names(p: Mapping[str, Any]) -> tuple[str, ...]:
    return _strings(p, "names")


def _strings(p: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = p.get(key)
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _int(p: Mapping[str, Any], key: str) -> int | None:
    value = p.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = [
    "ENDINGS", "RESTARTS", "TASK_ENDS", "DelegationDispatched", "DelegationReported",
    "DelegationStopped", "Died", "HandedOff", "Quarantined", "Resumed",
    "Resurrected", "Resurrecting", "SignalReceived", "SnapshotTaken", "Started", "Status",
    "Stopped", "TaskAssigned", "TaskCompleted", "TaskDelegated", "TaskFailed", "Transition",
    "WaitCompleted", "WaitStarted", "read", "starts_afresh",
]
