"""An agent's runtime state, folded from its stream's events.

``AgentLifecycle`` is what the host keeps per agent and what recovery rebuilds by replaying
the stream: status, incarnation, restart history, and the task queue. ``fold`` is a pure,
deterministic and total function of (state, event): unknown event types only advance
``version``, malformed payload fields are ignored field by field, and nothing in it reads a
clock. Replaying the same events therefore always yields the same state (and state hash).

Two fields are *not* derived from events and never leave the process: ``stop_requested``
and ``resurrecting``. They are the host's in-flight flags, set by the pure transitions
``mark_stop_requested`` / ``mark_resurrecting`` *before* the host acts (see ``guard.py``
for why the order matters); ``to_json`` leaves them out and a rebuilt state has them False.

Snapshots: recovery from a snapshot replays only the events after it, so the lifecycle
state must travel inside the snapshot (``to_json``/``from_json``) next to the agent's own
``snapshot()``; otherwise kind, incarnation and pending tasks would be lost.

What each event means is decided once, by ``transitions.read`` (one typed ``Transition``
per event type; ``Folder.step`` reports it to the readers that react to it); the payload
fields it reads (``schemas/ares.v1.Event.avsc``):

* ``agent.started``      kind, config_json, incarnation, worker
* ``agent.stopped``      reason (not read: any stop ends the incarnation voluntarily)
* ``agent.dead``         cause
* ``agent.resurrecting`` attempt (the guard's count: older deaths are forgotten)
* ``agent.resurrected``  incarnation, worker
* ``agent.quarantined``  reason, deaths
* ``agent.resumed``      reason (JSON payload; an operator cleared a quarantine or stop)
* ``task.assigned``      task_id, input_json
* ``task.completed``     task_id
* ``task.failed``        task_id, retriable
* ``agent.handed_off``   (none: the status does not change)
* ``snapshot.taken``     snapshot_version
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ares.events.model import Event
from ares.lifecycle import transitions as tr
from ares.lifecycle.events import (
    AGENT_DEAD,
    AGENT_QUARANTINED,
    AGENT_RESUMED,
    AGENT_RESURRECTED,
    AGENT_RESURRECTING,
    AGENT_STARTED,
    AGENT_STOPPED,
    LIFECYCLE_TYPES,
    SNAPSHOT_TAKEN,
    TASK_ASSIGNED,
    TASK_COMPLETED,
    TASK_FAILED,
)
from ares.lifecycle.transitions import Status


@dataclass(frozen=True, slots=True)
class PendingTask:
    task_id: str
    input_json: str = "null"
    parent: ParentLink | None = None  # a delegated task: where its outcome goes

    @property
    def input(self) -> Any:
        return json.loads(self.input_json)


@dataclass(frozen=True, slots=True)
class ParentLink:
    """Where a delegated task's outcome goes (``task.delegated``): the signal ``signal`` of
    ``agent_id``'s task ``task_id``; ``on_stop`` is the parent's stop policy for it."""

    agent_id: str
    task_id: str
    signal: str
    on_stop: str = "stop"

    def to_json(self) -> list[str]:
        return [self.agent_id, self.task_id, self.signal, self.on_stop]

    @classmethod
    def from_json(cls, data: Any) -> ParentLink:
        agent_id, task_id, signal, on_stop = (str(v) for v in data)
        return cls(agent_id, task_id, signal, on_stop)


@dataclass(frozen=True, slots=True)
class ChildLink:
    """A child a task of this agent delegated to (``delegation.dispatched``) whose outcome
    has not come back yet."""

    child_id: str
    task_id: str  # the parent's task
    child_task_id: str
    signal: str
    on_parent_stop: str = "stop"

    def to_json(self) -> list[str]:
        return [self.child_id, self.task_id, self.child_task_id, self.signal,
                self.on_parent_stop]

    @classmethod
    def from_json(cls, data: Any) -> ChildLink:
        child_id, task_id, child_task_id, signal, policy = (str(v) for v in data)
        return cls(child_id, task_id, child_task_id, signal, policy)


@dataclass(frozen=True, slots=True)
class Report:
    """A delegated task's outcome owed to its parent (until ``delegation.reported``):
    ``status`` is completed | failed | stopped | quarantined."""

    task_id: str
    parent: ParentLink
    status: str
    output_json: str = "null"
    error_type: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "parent": self.parent.to_json(),
                "status": self.status, "output_json": self.output_json,
                "error_type": self.error_type, "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        return cls(_req(data, "task_id", str), ParentLink.from_json(data["parent"]),
                   _req(data, "status", str), _req(data, "output_json", str),
                   _opt(data, "error_type", str), _opt(data, "error", str))


@dataclass(frozen=True, slots=True)
class PendingSignal:
    """A signal received and not yet consumed by a wait (``signal.received``)."""

    signal_id: str
    name: str
    payload_json: str = "null"
    received_at: float = 0.0  # epoch seconds of its event

    @property
    def payload(self) -> Any:
        return json.loads(self.payload_json)


@dataclass(frozen=True, slots=True)
class WaitingFor:
    """What the agent's current task waits for (``wait.started`` until ``wait.completed``
    or the task's end): one of ``names`` (signals) or, for a timer, ``deadline``."""

    task_id: str
    kind: str  # signal | timer | approval
    names: tuple[str, ...] = ()
    deadline: float | None = None  # epoch seconds; None: no timeout
    since: float = 0.0  # epoch seconds of the wait.started event

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "kind": self.kind, "names": list(self.names),
                "deadline": self.deadline, "since": self.since}

    def to_document(self) -> dict[str, Any]:
        """As the CLI's --json and the HTTP API show it: times in ISO 8601, UTC."""
        return {"task_id": self.task_id, "kind": self.kind, "names": list(self.names),
                "deadline": None if self.deadline is None else _iso(self.deadline),
                "since": _iso(self.since)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WaitingFor:
        return cls(_req(data, "task_id", str), _req(data, "kind", str),
                   tuple(str(n) for n in _req(data, "names", list)),
                   _opt_float(data, "deadline"), float(_opt_float(data, "since") or 0.0))


@dataclass(frozen=True, slots=True)
class AgentLifecycle:
    agent_id: str
    kind: str = ""
    config_json: str = "{}"
    status: Status = Status.STARTING
    incarnation: int = 0
    worker: str | None = None
    # Epoch seconds of the deaths that still count against the restart budget, oldest
    # first; trimmed to the guard's count by agent.resurrecting / agent.quarantined.
    restarts: tuple[float, ...] = ()
    last_death_cause: str | None = None
    quarantine_reason: str | None = None
    started_at: float | None = None  # when the current incarnation began running
    last_event_time: float | None = None
    last_event_type: str | None = None
    version: int = 0
    snapshot_version: int = 0  # last version covered by a snapshot.taken
    pending_tasks: tuple[PendingTask, ...] = ()
    tasks_assigned: int = 0
    tasks_completed: int = 0
    tasks_failed: int = 0
    # Ids that a new task.assigned must not reuse (completed, or failed for good). Grows
    # with the stream's task count; see the report on bounding it with compaction.
    finished_tasks: frozenset[str] = frozenset()
    # Signals not yet consumed, in arrival order; the ids of those consumed (a redelivery
    # of one is applied once). Like finished_tasks, the ids grow with the stream.
    signals: tuple[PendingSignal, ...] = ()
    consumed_signals: frozenset[str] = frozenset()
    waiting: WaitingFor | None = None
    # Teams: the agent that delegated the latest delegated task; the children whose
    # outcome has not come back; the outcomes owed to parents (the host sends them).
    parent_id: str | None = None
    children: tuple[ChildLink, ...] = ()
    reports: tuple[Report, ...] = ()
    # -- in-process flags, not derived from events (see the module docstring) ----------
    stop_requested: bool = False
    resurrecting: bool = False

    @property
    def config(self) -> Any:
        return json.loads(self.config_json)

    @property
    def current_task(self) -> PendingTask | None:
        """The task the agent works on: tasks run one at a time in assignment order."""
        return self.pending_tasks[0] if self.pending_tasks else None

    @property
    def is_live(self) -> bool:
        """Whether recovery resumes it: it has events and was not stopped or quarantined."""
        return self.version > 0 and self.status not in (Status.STOPPED, Status.QUARANTINED)

    def to_json(self) -> dict[str, Any]:
        """The event-derived state as JSON (the in-process flags are left out)."""
        return {
            "agent_id": self.agent_id, "kind": self.kind, "config_json": self.config_json,
            "status": self.status.value, "incarnation": self.incarnation,
            "worker": self.worker, "restarts": list(self.restarts),
            "last_death_cause": self.last_death_cause,
            "quarantine_reason": self.quarantine_reason, "started_at": self.started_at,
            "last_event_time": self.last_event_time, "last_event_type": self.last_event_type,
            "version": self.version, "snapshot_version": self.snapshot_version,
            "pending_tasks": [[t.task_id, t.input_json] if t.parent is None
                              else [t.task_id, t.input_json, t.parent.to_json()]
                              for t in self.pending_tasks],
            "tasks_assigned": self.tasks_assigned, "tasks_completed": self.tasks_completed,
            "tasks_failed": self.tasks_failed, "finished_tasks": sorted(self.finished_tasks),
            "signals": [[g.signal_id, g.name, g.payload_json, g.received_at]
                        for g in self.signals],
            "consumed_signals": sorted(self.consumed_signals),
            "waiting": None if self.waiting is None else self.waiting.to_json(),
            "parent_id": self.parent_id,
            "children": [c.to_json() for c in self.children],
            "reports": [r.to_json() for r in self.reports],
        }

    @property
    def stops_owed(self) -> tuple[ChildLink, ...]:
        """The children a stopped or quarantined agent must still stop (its delegations
        with the ``stop`` policy whose outcome has not come back)."""
        if self.status not in (Status.STOPPED, Status.QUARANTINED):
            return ()
        return tuple(c for c in self.children if c.on_parent_stop == STOP_CHILDREN)

    def knows_signal(self, signal_id: str) -> bool:
        """Whether a signal with this id was received already (pending or consumed)."""
        return signal_id in self.consumed_signals or any(g.signal_id == signal_id
                                                         for g in self.signals)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentLifecycle:
        """Inverse of ``to_json``; ``ValueError`` on anything malformed (the caller then
        discards the snapshot it came from and replays the stream in full)."""
        try:
            state = cls(
                agent_id=_req(data, "agent_id", str), kind=_req(data, "kind", str),
                config_json=_req(data, "config_json", str),
                status=Status(_req(data, "status", str)),
                incarnation=_req(data, "incarnation", int), worker=_opt(data, "worker", str),
                restarts=tuple(float(t) for t in _req(data, "restarts", list)),
                last_death_cause=_opt(data, "last_death_cause", str),
                quarantine_reason=_opt(data, "quarantine_reason", str),
                started_at=_opt_float(data, "started_at"),
                last_event_time=_opt_float(data, "last_event_time"),
                last_event_type=_opt(data, "last_event_type", str),
                version=_req(data, "version", int),
                snapshot_version=_req(data, "snapshot_version", int),
                pending_tasks=tuple(_pending_task(t) for t in _req(data, "pending_tasks", list)),
                tasks_assigned=_req(data, "tasks_assigned", int),
                tasks_completed=_req(data, "tasks_completed", int),
                tasks_failed=_req(data, "tasks_failed", int),
                finished_tasks=frozenset(str(t) for t in _req(data, "finished_tasks", list)),
                # Absent from the snapshots of releases before durable waits: none then.
                signals=tuple(PendingSignal(str(i), str(n), str(j), float(at))
                              for i, n, j, at in data.get("signals", [])),
                consumed_signals=frozenset(str(i) for i in data.get("consumed_signals", [])),
                waiting=(None if data.get("waiting") is None
                         else WaitingFor.from_json(data["waiting"])),
                # Absent from the snapshots of releases before teams: none then.
                parent_id=_opt(data, "parent_id", str),
                children=tuple(ChildLink.from_json(c) for c in data.get("children", [])),
                reports=tuple(Report.from_json(r) for r in data.get("reports", [])),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a lifecycle state: {exc}") from exc
        return state


def _pending_task(data: Any) -> PendingTask:
    task_id, input_json, *parent = data
    return PendingTask(str(task_id), str(input_json),
                       ParentLink.from_json(parent[0]) if parent else None)


# -- in-process transitions --------------------------------------------------------------


def mark_stop_requested(state: AgentLifecycle) -> AgentLifecycle:
    """Record a voluntary stop; the host stores this state BEFORE cancelling the task."""
    return replace(state, stop_requested=True)


def mark_resurrecting(state: AgentLifecycle) -> AgentLifecycle:
    """Record that this process has a resurrection of the agent in flight."""
    return replace(state, resurrecting=True)


def clear_resurrecting(state: AgentLifecycle) -> AgentLifecycle:
    """The in-flight resurrection ended (succeeded, failed or was abandoned)."""
    return replace(state, resurrecting=False)


# -- the fold ----------------------------------------------------------------------------


def fold(state: AgentLifecycle, event: Event) -> AgentLifecycle:
    """The state after ``event``. Pure and total; see the module docstring."""
    folder = Folder(state)
    folder.apply(event)
    return folder.freeze()


def step(state: AgentLifecycle, event: Event) -> tuple[AgentLifecycle, tr.Transition | None]:
    """``fold``, with the transition ``event`` was (``None``: not a lifecycle event)."""
    folder = Folder(state)
    transition = folder.step(event)
    return folder.freeze(), transition


def fold_all(state: AgentLifecycle, events: Iterable[Event]) -> AgentLifecycle:
    """``fold`` over ``events``, without an intermediate state per event (replay path)."""
    folder = Folder(state)
    for event in events:
        folder.apply(event)
    return folder.freeze()


def from_events(events: Iterable[Event], agent_id: str | None = None) -> AgentLifecycle:
    """The state of a stream from its first event (or of an empty ``agent_id`` stream)."""
    folder: Folder | None = None if agent_id is None else Folder(AgentLifecycle(agent_id))
    for event in events:
        if folder is None:
            folder = Folder(AgentLifecycle(event.stream_id))
        folder.apply(event)
    if folder is None:
        raise ValueError("from_events needs an agent_id when there are no events")
    return folder.freeze()


class Folder:
    """A mutable copy of one state; ``fold``, ``fold_all`` and recovery's replay
    (``HostedAgent.replay``) share this one code path.

    The task containers are copied on first write only, so a replay of n task events costs
    O(n), not O(n^2) as rebuilding a frozenset per event would.
    """

    def __init__(self, state: AgentLifecycle) -> None:
        self.s = state
        self.changes: dict[str, Any] = {}
        self._pending: list[PendingTask] | None = None
        self._finished: set[str] | None = None
        # The last event applied when no handler needed its time: ``last_event_time`` is
        # computed from it when read (most events of a replay have no handler, and
        # datetime.timestamp() is a good part of a fold's cost).
        self._untimed: Event | None = None

    def get(self, name: str) -> Any:
        if name == "last_event_time":
            self._time_last()
        return self.changes[name] if name in self.changes else getattr(self.s, name)

    def _time_last(self) -> None:
        if self._untimed is not None:
            self.changes["last_event_time"] = _epoch(self._untimed)
            self._untimed = None

    def put(self, **changes: Any) -> None:
        self.changes.update(changes)

    @property
    def pending(self) -> list[PendingTask]:
        if self._pending is None:
            self._pending = list(self.s.pending_tasks)
        return self._pending

    @property
    def has_pending(self) -> bool:
        """Whether the state so far has open tasks (``bool(freeze().pending_tasks)``)."""
        return bool(self._pending if self._pending is not None else self.s.pending_tasks)

    @property
    def finished(self) -> set[str]:
        if self._finished is None:
            self._finished = set(self.s.finished_tasks)
        return self._finished

    def freeze(self) -> AgentLifecycle:
        self._time_last()
        changes = dict(self.changes)
        if self._pending is not None:
            changes["pending_tasks"] = tuple(self._pending)
        if self._finished is not None:
            changes["finished_tasks"] = frozenset(self._finished)
        return replace(self.s, **changes) if changes else self.s

    def apply(self, event: Event) -> bool:
        """Fold ``event`` in; whether tasks are open after it (``has_pending``, without a
        second call: a replay tracks the open tasks' journal after every event)."""
        self.step(event)
        pending = self._pending
        return bool(pending if pending is not None else self.s.pending_tasks)

    def step(self, event: Event) -> tr.Transition | None:
        """Fold ``event`` in; the transition it was (``None``: not a lifecycle event), for
        the readers that react to what happened as well as to the state it led to."""
        transition = tr.read(event)
        # Item assignments, not put(**...): this runs once per replayed event.
        changes = self.changes
        if transition is None:
            self._untimed = event
        else:
            ts = _epoch(event)
            _HANDLERS[type(transition)](self, transition, ts)
            changes["last_event_time"] = ts
            self._untimed = None
        changes["version"] = event.version
        changes["last_event_type"] = event.type
        return transition


def _on_started(f: Folder, t: tr.Started, ts: float) -> None:
    fresh = tr.starts_afresh(f.get("status"))
    f.put(status=Status.RUNNING, started_at=ts, stop_requested=False, resurrecting=False,
          quarantine_reason=None)
    if fresh:  # a first start, or a restart after a stop or quarantine: a new budget
        f.put(restarts=())
    if t.kind is not None:
        f.put(kind=t.kind)
    if t.config_json is not None:
        f.put(config_json=t.config_json)
    if t.incarnation is not None:
        f.put(incarnation=t.incarnation)
    f.put(worker=t.worker)


def _on_stopped(f: Folder, t: tr.Stopped, ts: float) -> None:
    f.put(status=Status.STOPPED, stop_requested=False, resurrecting=False)
    _owe_open_delegations(f, "stopped", t.reason)


def _on_dead(f: Folder, t: tr.Died, ts: float) -> None:
    f.put(status=Status.DEAD, resurrecting=False, last_death_cause=t.cause,
          restarts=(*f.get("restarts"), ts))


def _on_resurrecting(f: Folder, t: tr.Resurrecting, ts: float) -> None:
    # The dead incarnation is over and the next has not run: no start to be healthy from.
    f.put(status=Status.RESURRECTING, started_at=None)
    _keep_last_deaths(f, t.attempt)


def _on_resurrected(f: Folder, t: tr.Resurrected, ts: float) -> None:
    f.put(status=Status.RUNNING, started_at=ts, resurrecting=False, worker=t.worker)
    if t.incarnation is not None:
        f.put(incarnation=t.incarnation)


def _on_quarantined(f: Folder, t: tr.Quarantined, ts: float) -> None:
    f.put(status=Status.QUARANTINED, resurrecting=False,
          quarantine_reason=t.reason or "unspecified")
    _keep_last_deaths(f, t.deaths)
    _owe_open_delegations(f, "quarantined", t.reason)


def _on_resumed(f: Folder, t: tr.Resumed, ts: float) -> None:
    f.put(status=Status.STARTING, restarts=(), quarantine_reason=None, started_at=None,
          stop_requested=False, resurrecting=False)


def _on_handed_off(f: Folder, t: tr.HandedOff, ts: float) -> None:
    """Nothing changes: the next owner resumes the agent as it is (no death, no restart)."""


def _keep_last_deaths(f: Folder, count: int | None) -> None:
    """Forget deaths the guard no longer counted (outside its window, or before a healthy
    incarnation): the event records its count, so replay forgets exactly the same ones."""
    if count is not None and count >= 1:
        f.put(restarts=tuple(f.get("restarts")[-count:]))


def _on_task_assigned(f: Folder, t: tr.TaskAssigned, ts: float) -> None:
    task_id = t.task_id
    if task_id is None or task_id in f.finished or any(p.task_id == task_id
                                                        for p in f.pending):
        return  # a duplicate assignment is ignored
    f.pending.append(PendingTask(task_id, t.input_json or "null"))
    f.put(tasks_assigned=f.get("tasks_assigned") + 1)


def _on_task_completed(f: Folder, t: tr.TaskCompleted, ts: float) -> None:
    task_id = t.task_id
    if task_id is None or task_id in f.finished:
        return
    _owe_report(f, task_id, "completed", output_json=t.output_json or "null")
    _drop_pending(f, task_id)
    f.finished.add(task_id)
    f.put(tasks_completed=f.get("tasks_completed") + 1)


def _on_task_failed(f: Folder, t: tr.TaskFailed, ts: float) -> None:
    task_id = t.task_id
    if task_id is None or task_id in f.finished:
        return
    _owe_report(f, task_id, "failed", error_type=t.error_type, error=t.error_message)
    _drop_pending(f, task_id)
    if not t.retriable:  # a retriable failure may be assigned again
        f.finished.add(task_id)
    f.put(tasks_failed=f.get("tasks_failed") + 1)


def _drop_pending(f: Folder, task_id: str) -> None:
    _stop_waiting(f, task_id)
    for i, task in enumerate(f.pending):
        if task.task_id == task_id:
            del f.pending[i]
            return


def _on_signal_received(f: Folder, t: tr.SignalReceived, ts: float) -> None:
    if t.signal_id is None or t.name is None:
        return
    children: tuple[ChildLink, ...] = f.get("children")
    child = next((c for c in children if c.signal == t.name), None)
    if child is not None:  # a child's outcome came back
        f.put(children=tuple(c for c in children if c.signal != t.name))
        if not any(p.task_id == child.task_id for p in f.pending):
            # Its task ended without waiting for it (a background child): no wait will
            # ever consume it, so it is not kept (the agent's ``apply`` still sees it).
            f.put(consumed_signals=f.get("consumed_signals") | {t.signal_id})
            return
    signals: tuple[PendingSignal, ...] = f.get("signals")
    if t.signal_id in f.get("consumed_signals") or any(g.signal_id == t.signal_id
                                                       for g in signals):
        return  # a redelivery: applied once
    f.put(signals=(*signals, PendingSignal(t.signal_id, t.name, t.payload_json or "null", ts)))


def _on_wait_started(f: Folder, t: tr.WaitStarted, ts: float) -> None:
    if t.task_id is not None:
        f.put(waiting=WaitingFor(t.task_id, t.kind or "signal", t.names, t.deadline, ts))


def _on_wait_completed(f: Folder, t: tr.WaitCompleted, ts: float) -> None:
    waiting: WaitingFor | None = f.get("waiting")
    if waiting is not None and waiting.task_id == t.task_id:
        f.put(waiting=None)
    if t.signal_id is not None:
        signals: tuple[PendingSignal, ...] = f.get("signals")
        f.put(signals=tuple(g for g in signals if g.signal_id != t.signal_id),
              consumed_signals=f.get("consumed_signals") | {t.signal_id})


def _stop_waiting(f: Folder, task_id: str) -> None:
    """A task that ended waits no more."""
    waiting: WaitingFor | None = f.get("waiting")
    if waiting is not None and waiting.task_id == task_id:
        f.put(waiting=None)


# -- teams -------------------------------------------------------------------------------

STOP_CHILDREN = "stop"  # on_parent_stop: the parent's stop stops the child
DETACH_CHILDREN = "detach"  # on_parent_stop: the child goes on alone


def _on_delegation_dispatched(f: Folder, t: tr.DelegationDispatched, ts: float) -> None:
    if t.task_id is None or t.child_id is None or t.child_task_id is None or t.signal is None:
        return
    children: tuple[ChildLink, ...] = f.get("children")
    if any(c.signal == t.signal for c in children):
        return
    f.put(children=(*children, ChildLink(t.child_id, t.task_id, t.child_task_id, t.signal,
                                         t.on_parent_stop or STOP_CHILDREN)))


def _on_delegation_stopped(f: Folder, t: tr.DelegationStopped, ts: float) -> None:
    stopped = set(t.children)
    children: tuple[ChildLink, ...] = f.get("children")
    f.put(children=tuple(c for c in children if c.child_id not in stopped))


def _on_task_delegated(f: Folder, t: tr.TaskDelegated, ts: float) -> None:
    if t.task_id is None or t.parent_id is None or t.parent_task_id is None or t.signal is None:
        return
    link = ParentLink(t.parent_id, t.parent_task_id, t.signal,
                      t.on_parent_stop or STOP_CHILDREN)
    for i, task in enumerate(f.pending):
        if task.task_id == t.task_id:
            f.pending[i] = replace(task, parent=link)
            f.put(parent_id=t.parent_id)
            return


def _on_delegation_reported(f: Folder, t: tr.DelegationReported, ts: float) -> None:
    reports: tuple[Report, ...] = f.get("reports")
    f.put(reports=tuple(r for r in reports if r.task_id != t.task_id))


def _owe_report(f: Folder, task_id: str, status: str, *, output_json: str = "null",
                error_type: str | None = None, error: str | None = None) -> None:
    """A delegated task ended (or its agent did): its parent must hear of it."""
    for task in f.pending:
        if task.task_id == task_id and task.parent is not None:
            reports: tuple[Report, ...] = f.get("reports")
            f.put(reports=(*(r for r in reports if r.task_id != task_id),
                           Report(task_id, task.parent, status, output_json, error_type,
                                  error)))
            return


def _owe_open_delegations(f: Folder, status: str, reason: str | None) -> None:
    """The agent stopped or was quarantined: its open delegated tasks will not finish."""
    reports: tuple[Report, ...] = f.get("reports")
    owed = {r.task_id for r in reports}
    for task in f.pending:
        if task.parent is not None and task.task_id not in owed:
            _owe_report(f, task.task_id, status, error_type=status,
                        error=f"the child agent was {status}"
                              + (f": {reason}" if reason else ""))


def _on_snapshot_taken(f: Folder, t: tr.SnapshotTaken, ts: float) -> None:
    if t.snapshot_version is not None:
        f.put(snapshot_version=t.snapshot_version)


# How each transition (``transitions.read`` decides which an event is) changes the state.
_HANDLERS: dict[type[Any], Callable[[Folder, Any, float], None]] = {
    tr.Started: _on_started,
    tr.Stopped: _on_stopped,
    tr.Died: _on_dead,
    tr.Resurrecting: _on_resurrecting,
    tr.Resurrected: _on_resurrected,
    tr.Quarantined: _on_quarantined,
    tr.Resumed: _on_resumed,
    tr.HandedOff: _on_handed_off,
    tr.TaskAssigned: _on_task_assigned,
    tr.TaskCompleted: _on_task_completed,
    tr.TaskFailed: _on_task_failed,
    tr.SnapshotTaken: _on_snapshot_taken,
    tr.SignalReceived: _on_signal_received,
    tr.WaitStarted: _on_wait_started,
    tr.WaitCompleted: _on_wait_completed,
    tr.DelegationDispatched: _on_delegation_dispatched,
    tr.DelegationStopped: _on_delegation_stopped,
    tr.TaskDelegated: _on_task_delegated,
    tr.DelegationReported: _on_delegation_reported,
}


# -- payloads the host writes ------------------------------------------------------------


def dead_payload(state: AgentLifecycle, cause: str, *, error_type: str | None = None,
                 error_message: str | None = None,
                 traceback_digest: str | None = None) -> dict[str, Any]:
    """The ``agent.dead`` payload for the death of ``state``'s current incarnation."""
    return {"cause": cause, "error_type": error_type, "error_message": error_message,
            "traceback_digest": traceback_digest, "last_event_type": state.last_event_type,
            "last_version": state.version, "incarnation": state.incarnation}


# -- helpers -----------------------------------------------------------------------------


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def _epoch(event: Event) -> float:
    ts = event.timestamp
    return (ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)).timestamp()


def _req(data: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{key} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _opt(data: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
    return None if data.get(key) is None else _req(data, key, kind)


def _opt_float(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{key} must be a number, got {type(value).__name__}")
    return float(value)


__all__ = [
    "AGENT_DEAD",
    "AGENT_QUARANTINED",
    "AGENT_RESUMED",
    "AGENT_RESURRECTED",
    "AGENT_RESURRECTING",
    "AGENT_STARTED",
    "AGENT_STOPPED",
    "DETACH_CHILDREN",
    "LIFECYCLE_TYPES",
    "SNAPSHOT_TAKEN",
    "STOP_CHILDREN",
    "TASK_ASSIGNED",
    "TASK_COMPLETED",
    "TASK_FAILED",
    "AgentLifecycle",
    "ChildLink",
    "Folder",
    "ParentLink",
    "PendingSignal",
    "PendingTask",
    "Report",
    "Status",
    "WaitingFor",
    "clear_resurrecting",
    "dead_payload",
    "fold",
    "fold_all",
    "from_events",
    "mark_resurrecting",
    "mark_stop_requested",
    "step",
]
