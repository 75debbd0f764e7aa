"""What the agent SDK raises, and how each error ends a task.

Three outcomes, decided by the exception that leaves ``Agent.handle``:

* ``TaskFailed`` and its subclasses (``StepFailed``, ``ToolCallFailed``, ``ToolSkipped``,
  ``StepResultError``) end the task as ``task.failed``. They are deterministic: a re-run
  would raise them again from the journal, so resurrecting the agent could not help.
* ``TaskPaused`` (internal) ends the run with the task paused on an in-doubt tool call;
  ``TaskWaiting`` (internal, ``ares.agents.waits``) ends it waiting for a signal or a timer.
  ``WaitTimeout`` and ``Rejected`` (an approval refused) are ``TaskFailed``s: catch them
  to go on.
* Anything else is a crash: it propagates out of ``run_task`` and the runtime declares the
  agent dead and resurrects it; the re-run resumes from the journal. ``NonDeterminismError``
  is deliberately a crash: the fix is a code deployment, not a failed task.
"""

from __future__ import annotations

from typing import Any

from ares.errors import AresError, ConfigError


class AgentConfigError(ConfigError):
    """An agent's configuration is invalid; the message names the kind and the setting."""


class UnknownAgentKindError(AgentConfigError):
    """No factory is registered for the requested kind; the message lists the known ones."""

    def __init__(self, kind: str, known: list[str]) -> None:
        listed = ", ".join(known) if known else "none"
        super().__init__(f"unknown agent kind {kind!r} (known kinds: {listed}); register it "
                         "with --agents package.module:REGISTRY or the 'ares.agents' entry "
                         "point group")
        self.kind = kind
        self.known = known


class AgentRegistryError(ConfigError):
    """A registry spec cannot be loaded, or two sources define the same kind differently."""


class TaskFailed(Exception):  # the name is the outcome, as in the brief
    """Raise from ``handle`` to end the task as ``task.failed`` (not a crash).

    ``retriable`` is recorded in the event: whether assigning the task again may succeed.
    """

    retriable: bool = False

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class StepFailed(TaskFailed):
    """A step (``ctx.step``/``ctx.llm``) failed for good: retries spent or not retriable.

    The failure is recorded (``step.failed``); a re-run raises it again without executing.
    """

    def __init__(self, task_id: str, kind: str, name: str, occurrence: int,
                 error_type: str | None, error: str, attempts: int,
                 retriable: bool = False) -> None:
        super().__init__(
            f"task {task_id!r}: {kind} {name!r} (occurrence {occurrence}) failed after "
            f"{attempts} attempt(s): {error_type or 'error'}: {error}", retriable=retriable)
        self.task_id = task_id
        self.kind = kind
        self.name = name
        self.occurrence = occurrence
        self.error_type = error_type
        self.error = error
        self.attempts = attempts


class BudgetExceeded(StepFailed):
    """An llm call under ``budget_policy="fail"`` found its tenant over the fleet budget.
    Recorded (``step.failed`` with the tenant and the reason), raised again on replay."""

    def __init__(self, task_id: str, kind: str, name: str, occurrence: int, tenant: str,
                 reason: str) -> None:
        super().__init__(task_id, kind, name, occurrence, "ares.BudgetExceeded",
                         f"tenant {tenant!r} is over its LLM budget: {reason}", 1)
        self.tenant = tenant
        self.reason = reason


class ValidationFailed(ValueError):
    """Raise from a ``ctx.llm(..., validate=fn)`` validator to reject a completion: the
    message says why. It is recorded (``llm.validation``) and, when no attempt passes, is
    the error of the ``StepFailed`` (any exception rejects; this one says so on purpose)."""


class StepResultError(TaskFailed):
    """A step's result (or a task's output) cannot be recorded: it is not JSON-able."""

    def __init__(self, task_id: str, what: str, value: Any, reason: str) -> None:
        super().__init__(
            f"task {task_id!r}: {what} returned a {type(value).__name__}, which cannot be "
            f"recorded as JSON ({reason}); return dicts, lists, str, int, float, bool or None")
        self.task_id = task_id
        self.what = what


class ToolCallFailed(TaskFailed):
    """A tool call's recorded outcome is a failure (raised again, never re-run, on replay)."""

    def __init__(self, tool: str, call_id: str, error_type: str | None, error: str,
                 retriable: bool = False) -> None:
        super().__init__(f"tool {tool!r} (call {call_id}) failed: {error_type or 'error'}: "
                         f"{error}", retriable=retriable)
        self.tool = tool
        self.call_id = call_id
        self.error_type = error_type
        self.error = error


class ToolSkipped(ToolCallFailed):
    """An operator resolved an in-doubt call as ``skip``: it was not done and must not be.

    Catch it in the handler to carry on without the call; uncaught, the task fails.
    """

    def __init__(self, tool: str, call_id: str, note: str | None = None) -> None:
        detail = f"skipped by operator resolution{': ' + note if note else ''}"
        super().__init__(tool, call_id, "ToolSkipped", detail)


class NonDeterminismError(AresError):
    """The handler asked for a different step than the journal recorded at that position.

    A crash on purpose (the agent is resurrected, then quarantined by its restart budget):
    the task must not fail nor continue with a mis-replayed journal; deploy a fix.
    """

    def __init__(self, task_id: str, position: int, recorded: str, requested: str,
                 detail: str = "") -> None:
        super().__init__(
            f"non-determinism in task {task_id!r} at position {position}: the journal "
            f"recorded {recorded} but the handler {requested}{detail}. A handler must request "
            "the same steps in the same order on every run: do not branch on time, randomness "
            "or external state outside ctx.step/ctx.llm/ctx.tool")
        self.task_id = task_id
        self.position = position
        self.recorded = recorded
        self.requested = requested


class ContextClosedError(AresError):
    """A step was requested through a Context whose task run has ended."""


class TaskPaused(BaseException):  # control flow, like CancelledError
    """Internal: the task waits for an operator because a tool call is in doubt.

    A ``BaseException`` so that a handler's ``except Exception`` cannot swallow it (the
    Context remembers the pause anyway, and ``run_task`` honours it).
    """

    def __init__(self, calls: tuple[Any, ...]) -> None:
        super().__init__(f"paused on {len(calls)} in-doubt tool call(s)")
        self.calls = calls


class WaitTimeout(TaskFailed):
    """``ctx.wait_for`` reached its timeout without the signal (recorded: a re-run raises it
    again from the journal, without waiting)."""

    def __init__(self, task_id: str, names: tuple[str, ...], timeout_s: float | None) -> None:
        waited = f" after {timeout_s:g}s" if timeout_s is not None else ""
        super().__init__(f"task {task_id!r}: no signal {' or '.join(map(repr, names))} "
                         f"arrived{waited}")
        self.task_id = task_id
        self.names = names
        self.timeout_s = timeout_s


class Rejected(TaskFailed):
    """The approval of a tool call was refused (the ``rejected`` signal): the tool did not
    run. ``payload`` is what the signal carried (a reason, who refused)."""

    def __init__(self, task_id: str, tool: str, payload: Any) -> None:
        super().__init__(f"task {task_id!r}: the call of {tool!r} was rejected: {payload!r}")
        self.task_id = task_id
        self.tool = tool
        self.payload = payload


class ChildFailed(TaskFailed):
    """A delegated sub-task did not complete: the child's task failed, the child was
    stopped or quarantined, or it exceeded its timeout (``cause``: failed | stopped |
    quarantined | timeout). Recorded like any outcome: a re-run raises it again from the
    journal. Catch it to retry with another agent, fall back, or let the task fail."""

    def __init__(self, child_id: str, cause: str, error: str = "",
                 error_type: str | None = None, task_id: str | None = None) -> None:
        detail = f": {error_type + ': ' if error_type else ''}{error}" if error else ""
        super().__init__(f"child {child_id!r} {cause}{detail}")
        self.child_id = child_id
        self.cause = cause
        self.error = error
        self.error_type = error_type
        self.task_id = task_id  # the child's task
