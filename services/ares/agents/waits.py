"""Durable waits: a task that waits for a signal or a timer ends its run and holds nothing.

``ctx.wait_for(name, timeout=...)``, ``ctx.sleep(duration)``, ``ctx.sleep_until(when)`` and
``ctx.tool(..., approval=True)`` all come here. A wait is a recorded call, like a step:

* ``wait.started`` {task_id, name, occurrence, kind, names, deadline, ...} is appended the
  first time the handler reaches the wait. The deadline (epoch seconds) is fixed there, once:
  a re-run after a crash, on whatever worker, waits for the same deadline, never a new one.
* If a matching signal is pending (the agent's ``Mailbox``: ``signal.received`` events not
  consumed yet, in arrival order) the wait consumes the first one; if the deadline has
  passed it times out (a timer: elapses); either way ``wait.completed`` {outcome: signal |
  timeout | elapsed, signal_id, signal_name, payload_json} is appended and the handler goes on
  (a wait met at once appends ``wait.started`` and ``wait.completed`` together: one append).
* Otherwise the run ends: ``TaskWaiting`` (a ``BaseException``, like ``TaskPaused``) unwinds
  the handler and ``run_task`` returns ``WAITING`` with the ``Wait``. The host keeps only
  that (names, deadline) and runs the task again when a matching signal commits or the
  deadline passes; the re-run replays the journal up to the wait, which now completes.

A re-run finds ``wait.completed`` in the journal and takes the same branch without waiting:
the same payload, or the same ``WaitTimeout``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ares.agents import records as r
from ares.events.model import NewEvent
from ares.events.wire.canonical import parse_json
from ares.lifecycle import events as ev

if TYPE_CHECKING:
    from ares.agents.context import Context
    from ares.lifecycle.state import AgentLifecycle

SIGNAL = "signal"
TIMER = "timer"
APPROVAL = "approval"
APPROVED = "approved"
REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal the agent received and no wait consumed yet."""

    signal_id: str
    name: str
    payload_json: str = "null"

    @property
    def payload(self) -> Any:
        return parse_json(self.payload_json)


class Mailbox(Protocol):
    """The agent's pending signals, as the host folded them from its stream."""

    def pending(self) -> Sequence[Signal]:
        """Signals received and not consumed, in arrival order."""
        ...


class EmptyMailbox:
    def pending(self) -> Sequence[Signal]:
        return ()


class FoldedMailbox:
    """The pending signals of a folded lifecycle (``AgentLifecycle.signals``), read when a
    wait asks: a signal committed while the task runs is seen by its next wait."""

    def __init__(self, lifecycle: Callable[[], AgentLifecycle]) -> None:
        self._lifecycle = lifecycle

    def pending(self) -> Sequence[Signal]:
        return [Signal(g.signal_id, g.name, g.payload_json)
                for g in self._lifecycle().signals]


def signal_event(signal_id: str, name: str, payload_json: str, module: str,
                 issuer: str | None = None) -> NewEvent:
    """The ``signal.received`` the agent's owner appends for an ``agent.signal``."""
    return NewEvent(ev.SIGNAL_RECEIVED, module, {
        "signal_id": signal_id, "name": name, "payload_json": payload_json,
        "issuer": issuer})


@dataclass(frozen=True, slots=True)
class Wait:
    """What a task waits for when its run ends ``WAITING``: a signal of one of ``names``
    (none for a timer), until ``deadline`` (epoch seconds; ``None``: no timeout)."""

    task_id: str
    kind: str  # signal | timer | approval
    names: tuple[str, ...]
    deadline: float | None
    details: Mapping[str, Any] = field(default_factory=dict)  # approval: tool, args_json
    name: str = ""  # the recorded call's name and occurrence: which wait of the task
    occurrence: int = 0

    def wakes_on(self, signal_name: str) -> bool:
        return signal_name in self.names

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "kind": self.kind, "names": list(self.names),
                "deadline": self.deadline, "name": self.name, "occurrence": self.occurrence,
                **self.details}


class TaskWaiting(BaseException):  # control flow, like CancelledError
    """Internal: the task's run ends because it waits; ``run_task`` returns WAITING."""

    def __init__(self, waits: tuple[Wait, ...]) -> None:
        super().__init__(f"waiting for {', '.join(w.kind for w in waits)}")
        self.waits = waits


async def wait(ctx: Context, kind: str, name: str, names: tuple[str, ...],
               deadline_of: Callable[[float], float | None],
               details: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """Wait as ``kind`` for a signal of ``names`` (or a timer), recorded under ``name``; the
    ``wait.completed`` payload once it ends, or ``TaskWaiting`` while it does not."""
    position, occurrence, recorded = ctx._begin(r.WAIT, name)
    if recorded is not None and recorded.completed:
        return recorded.result or {}
    where = {"task_id": ctx.task_id, "name": name, "occurrence": occurrence, "kind": kind}
    metadata = r.position_metadata(position)
    pending: list[NewEvent] = []
    if recorded is None:
        deadline_at = deadline_of(ctx.services.clock.time())
        started = {**where, "names": list(names), "deadline": deadline_at, **(details or {})}
        pending.append(NewEvent(ev.WAIT_STARTED, ctx.module, started, metadata))
    else:
        started = dict(recorded.wait or {})
    deadline = started.get("deadline")
    deadline = float(deadline) if isinstance(deadline, int | float) else None
    outcome = _outcome(ctx, names, deadline)
    completed = None if outcome is None else {**where, **outcome}
    if completed is not None:
        # Met at once (the signal came first): start and end in one append, not two.
        pending.append(NewEvent(ev.WAIT_COMPLETED, ctx.module, completed, metadata))
    if pending:
        await ctx._append(pending, _announcement(ctx, kind, details or {})
                          if recorded is None else ())
    if completed is None:
        _suspend(ctx, Wait(ctx.task_id, kind, names, deadline, dict(details or {}), name,
                           occurrence))
    return completed


def _announcement(ctx: Context, kind: str,
                  details: Mapping[str, Any]) -> tuple[r.AgentAlert, ...]:
    """What a wait's start tells operators: an approval asks them (``approval.requested``,
    in the transaction that records the request: once, never again on a re-run)."""
    if kind != APPROVAL:
        return ()
    tool = str(details.get("tool"))
    return (r.AgentAlert(
        "approval.requested",
        f"task {ctx.task_id} waits for the approval of {tool!r}: `ares agents signal "
        f"{ctx.agent_id} approved` (or rejected)",
        details={"task_id": ctx.task_id, "tool": tool,
                 "args_json": str(details.get("args_json"))}),)


def _outcome(ctx: Context, names: tuple[str, ...],
             deadline: float | None) -> dict[str, Any] | None:
    """How the wait ends now: the first pending signal it may consume, else its deadline
    passed; ``None``: it goes on waiting."""
    for signal in ctx._mailbox.pending():
        if signal.name in names and signal.signal_id not in ctx._taken_signals:
            ctx._taken_signals.add(signal.signal_id)  # not twice before the fold sees it
            return {"outcome": "signal", "signal_id": signal.signal_id,
                    "signal_name": signal.name, "payload_json": signal.payload_json}
    if deadline is not None and ctx.services.clock.time() >= deadline:
        return {"outcome": "timeout" if names else "elapsed", "signal_id": None}
    return None


def _suspend(ctx: Context, waiting: Wait) -> NoReturn:
    ctx._waits = (*ctx._waits, waiting)
    raise TaskWaiting(ctx._waits)


def signal_value(completed: Mapping[str, Any]) -> Any:
    """The value of the signal a completed wait consumed."""
    return parse_json(str(completed.get("payload_json") or "null"))
