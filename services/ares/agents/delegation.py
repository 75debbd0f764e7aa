"""Teams: a task delegates sub-tasks to other agents and waits for their outcomes, durably.

``ctx.delegate`` is a recorded call, like a step: ``delegation.dispatched`` {task_id, name,
occurrence, child_id, child_kind, child_task_id, input_json, config_json, on_parent_stop,
deadline, signal} is appended once, and the runtime sends the child's ``agent.start`` and
``task.assign`` in the transaction that appends it (both or neither; a stop recorded first
refuses the append, so no child starts after its parent's stop). A re-run finds the record
and returns the same ``Child`` without sending anything: a child is dispatched once.

The child's owner sends its outcome back to the parent's owner as an ``agent.signal`` (named
``Child.signal``, payload {child_id, task_id, status, output, error_type, error}), so the
outcome is a ``signal.received`` on the parent's stream whichever workers host the two and
whoever died meanwhile. Waiting for it is a durable wait (``ares.agents.waits``, kind
``child``): a waiting parent holds no handler; its re-run replays to the wait, which
consumes the outcome. ``gather`` and ``delegate_many`` wait for *any* of several children
per recorded wait, so the order in which outcomes arrive is recorded and replayed as is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ares.agents import records as r
from ares.agents.errors import ChildFailed
from ares.agents.waits import wait
from ares.events.model import NewEvent
from ares.events.wire.canonical import canonical_json, parse_json
from ares.lifecycle import events as ev

if TYPE_CHECKING:
    from ares.agents.context import Context

CHILD = "child"  # the kind of a wait for children's outcomes
STOP = "stop"  # on_parent_stop: the parent's stop (or quarantine) stops the child
DETACH = "detach"  # on_parent_stop: the child goes on alone
POLICIES = (STOP, DETACH)
MAX_ID = 200  # child ids, task ids and signal names past this get a digest suffix


@dataclass(frozen=True, slots=True)
class Delegation:
    """One sub-task for ``ctx.delegate_many``: what ``ctx.delegate`` takes, as a value."""

    name: str
    kind: str
    input: Any = None
    agent_id: str | None = None
    config: Mapping[str, Any] | None = None
    on_parent_stop: str = STOP
    timeout: timedelta | float | None = None


@dataclass(slots=True)
class Child:
    """A dispatched sub-task: the child agent, its task, and (once known) its outcome."""

    name: str
    child_id: str
    kind: str
    task_id: str  # the child's task
    signal: str  # the signal that carries its outcome to the parent
    deadline: float | None  # epoch seconds; None: no timeout
    _ctx: Context = field(repr=False)
    _outcome: Mapping[str, Any] | None = field(default=None, repr=False)

    @property
    def settled(self) -> bool:
        return self._outcome is not None

    async def result(self) -> Any:
        """The child's output; ``ChildFailed`` if it failed, was stopped or quarantined, or
        exceeded its timeout. Waits durably (the parent's run ends while it waits)."""
        if self._outcome is None:
            await _await_any(self._ctx, f"result {self.name}", [self])
        return _value(self)

    def _settle(self, outcome: Mapping[str, Any]) -> None:
        if self._outcome is None:
            self._outcome = outcome


async def delegate(ctx: Context, name: str, kind: str, input: Any = None, *,
                   agent_id: str | None = None, config: Mapping[str, Any] | None = None,
                   on_parent_stop: str = STOP,
                   timeout: timedelta | float | None = None) -> Child:  # noqa: ASYNC109
    """See ``Context.delegate``."""
    if on_parent_stop not in POLICIES:
        raise ValueError(f"ctx.delegate({name!r}): on_parent_stop must be one of {POLICIES}, "
                         f"got {on_parent_stop!r}")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"ctx.delegate({name!r}): kind must be a non-empty agent kind")
    seconds = _seconds(timeout)
    position, occurrence, recorded = ctx._begin(r.DELEGATE, name)
    if recorded is not None:
        return _child(ctx, recorded.result or {})
    if agent_id is not None and (not agent_id or "/" in agent_id):
        raise ValueError(f"ctx.delegate({name!r}): agent_id must be non-empty, without '/'")
    _, input_json = ctx._json(f"delegate {name!r} input", input)
    _, config_json = ctx._json(f"delegate {name!r} config", dict(config or {}))
    where = f"{ctx.task_id}/{position}"
    dispatched = {
        "task_id": ctx.task_id, "name": name, "occurrence": occurrence,
        "child_id": agent_id or _capped(f"{ctx.agent_id}.{name}-{position}"),
        "child_kind": kind, "child_task_id": _capped(f"{ctx.agent_id}/{where}"),
        "input_json": input_json, "config_json": config_json,
        "on_parent_stop": on_parent_stop,
        "deadline": None if seconds is None else ctx.services.clock.time() + seconds,
        "signal": _capped(f"{CHILD}:{where}")}
    await ctx._append([NewEvent(ev.DELEGATION_DISPATCHED, ctx.module, dispatched,
                                r.position_metadata(position))])
    return _child(ctx, dispatched)


async def gather(ctx: Context, children: Sequence[Child], *,
                 return_exceptions: bool = False) -> list[Any]:
    """See ``Context.gather``."""
    while unsettled := [c for c in children if not c.settled]:
        await _await_any(ctx, "gather", unsettled)
    return _values(children, return_exceptions)


async def delegate_many(ctx: Context, delegations: Iterable[Delegation], *,
                        max_parallel: int = 4, return_exceptions: bool = False) -> list[Any]:
    """See ``Context.delegate_many``."""
    if max_parallel < 1:
        raise ValueError(f"ctx.delegate_many: max_parallel must be >= 1, got {max_parallel}")
    queue = list(delegations)
    children: list[Child] = []
    running: list[Child] = []
    while queue or running:
        while queue and len(running) < max_parallel:
            d = queue.pop(0)
            child = await delegate(ctx, d.name, d.kind, d.input, agent_id=d.agent_id,
                                   config=d.config, on_parent_stop=d.on_parent_stop,
                                   timeout=d.timeout)
            children.append(child)
            running.append(child)
        await _await_any(ctx, "dispatch", running)
        running = [c for c in running if not c.settled]
    return _values(children, return_exceptions)


async def _await_any(ctx: Context, name: str, children: Sequence[Child]) -> None:
    """One recorded wait for the outcome of any of ``children``: settles the one that came
    (or, on a timeout, every child whose deadline passed)."""
    deadlines = [c.deadline for c in children if c.deadline is not None]
    completed = await wait(ctx, CHILD, name, tuple(c.signal for c in children),
                           lambda now: min(deadlines) if deadlines else None,
                           {"children": [c.child_id for c in children]})
    if completed.get("outcome") == "signal":
        outcome = parse_json(str(completed.get("payload_json") or "null"))
        for child in children:
            if child.signal == completed.get("signal_name"):
                child._settle(outcome if isinstance(outcome, dict) else {})
        return
    passed = min(deadlines) if deadlines else 0.0
    for child in children:
        if child.deadline is not None and child.deadline <= passed:
            child._settle({"status": "timeout", "child_id": child.child_id,
                           "task_id": child.task_id,
                           "error": f"no outcome by its deadline ({child.deadline:.3f})"})


def _child(ctx: Context, p: Mapping[str, Any]) -> Child:
    deadline = p.get("deadline")
    return Child(str(p.get("name")), str(p.get("child_id")), str(p.get("child_kind")),
                 str(p.get("child_task_id")), str(p.get("signal")),
                 float(deadline) if isinstance(deadline, int | float) else None, ctx)


def _value(child: Child) -> Any:
    outcome = child._outcome or {}
    if outcome.get("status") == "completed":
        return outcome.get("output")
    raise ChildFailed(child.child_id, str(outcome.get("status") or "failed"),
                      str(outcome.get("error") or ""), outcome.get("error_type"),
                      child.task_id)


def _values(children: Sequence[Child], return_exceptions: bool) -> list[Any]:
    values: list[Any] = []
    for child in children:
        try:
            values.append(_value(child))
        except ChildFailed as failure:
            if not return_exceptions:
                raise
            values.append(failure)
    return values


def _capped(text: str) -> str:
    """``text``, or its head and a digest when it is longer than ids and names may be."""
    if len(text) <= MAX_ID:
        return text
    return f"{text[:MAX_ID - 17]}~{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _seconds(timeout: timedelta | float | None) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if seconds <= 0:
        raise ValueError(f"a delegation's timeout must be positive (got {seconds:g}s)")
    return seconds


def outcome_payload(child_id: str, task_id: str, status: str, output_json: str = "null",
                    error_type: str | None = None, error: str | None = None) -> str:
    """The payload of the signal that carries a child's outcome to its parent."""
    return canonical_json({"child_id": child_id, "task_id": task_id, "status": status,
                           "output": parse_json(output_json), "error_type": error_type,
                           "error": error})
