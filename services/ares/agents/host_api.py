"""The seam between the agent SDK and the runtime that hosts agents.

The runtime manager calls exactly this module; everything else in ``ares.agents`` is
reached through it. Division of labour:

The runtime
  * appends ``task.assigned`` (and every lifecycle event: started, dead, resurrected...);
  * creates agents with ``AgentRegistry.create(kind, agent_id, config)``;
  * rebuilds an agent's state: ``agent.restore(snapshot)`` when it has one, then
    ``agent.apply(event)`` for every event after it, in stream order;
  * calls ``agent.apply(event)`` for EVERY event appended to the agent's stream while it
    runs — including the ones ``run_task`` appends through the sink. ``run_task`` never
    calls ``apply`` itself (one path for state, whoever appended the event);
  * finds the tasks to (re-)run after a recovery with ``open_tasks(events)`` and calls
    ``run_task`` for each, in order, with the task's ``TaskJournal``;
  * on ``TaskOutcome.status is PAUSED_IN_DOUBT`` publishes an alert (kind
    ``tool_in_doubt``, details from ``TaskOutcome.in_doubt``) and waits for a
    ``tool.call.resolved`` event on the stream (``resolution_event``, appended on behalf of
    ``ares agents resolve``) before running the task again with a fresh journal. Running a
    paused task again without a resolution is harmless: reconcile hooks are asked again, and
    no second ``tool.in_doubt`` is appended;
  * on ``WAITING`` keeps only ``TaskOutcome.waiting`` (signal names, deadline) and runs the
    task again, with a fresh journal, once a ``signal.received`` of one of those names is
    committed or the deadline passes; it gives ``run_task`` the agent's pending signals
    (``mailbox``: ``signal.received`` not consumed by a ``wait.completed``); publishes the
    ``alerts`` an append carries (an approval's ``approval.requested``) in the append's
    transaction;
  * treats any exception out of ``run_task`` as the agent's death (crash), appends
    ``agent.dead`` and resurrects it; the re-run resumes from the journal;
  * runs one task at a time per agent, in assignment order (agent state folded by
    ``apply`` assumes it), passing the incarnation it recorded in ``agent.started`` /
    ``agent.resurrected`` (0 for the first start) and ``module=f"agent.{kind}"``.

``run_task``
  * builds the ``Context``, runs ``agent.handle(task, ctx)``, and appends the task's outcome
    (``task.completed`` with ``output_json``, or ``task.failed``) through the sink;
  * returns a ``TaskOutcome``: COMPLETED, FAILED, PAUSED_IN_DOUBT or WAITING, with per-run
    counters;
  * on a task whose journal already holds its outcome, returns that outcome without
    running anything.

Events appended (``module`` = the ``module`` argument, e.g. ``agent.example.pipeline``):
typed ``step.completed``, ``llm.call``, ``tool.call.intent``, ``tool.call.completed``,
``tool.call.failed``, ``tool.in_doubt``, ``task.completed``, ``task.failed``; JSON
``step.failed``, ``task.resumed``, ``tool.call.resolved`` (by reconcile), ``agent.log``,
``wait.started``, ``wait.completed``.
See ``ares.agents.records`` and docs/sdk.md for the payloads.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from ares.agents import records as r
from ares.agents.agent import Agent, Task
from ares.agents.context import Context, RunStats
from ares.agents.delegation import outcome_payload
from ares.agents.errors import StepResultError, TaskFailed, TaskPaused
from ares.agents.journal import TaskJournal, open_tasks, task_journals
from ares.agents.records import AgentAlert, resolution_event
from ares.agents.retry import Clock, SystemClock
from ares.agents.tools import InDoubtCall, ReconcileRegistry
from ares.agents.waits import (
    APPROVAL,
    FoldedMailbox,
    Mailbox,
    Signal,
    TaskWaiting,
    Wait,
    signal_event,
)
from ares.events.model import NewEvent
from ares.events.wire.canonical import parse_json
from ares.lifecycle import events as ev
from ares.llm import LlmProvider, OfflineProvider, provider_from_env
from ares.llm.prices import PriceTable
from ares.llm.telemetry import BudgetGate, LlmTelemetry, NullTelemetry, OpenBudget

log = logging.getLogger(__name__)


class AgentSink(Protocol):
    """Where an agent's records go: the runtime's writer for THIS agent's stream."""

    async def append(self, events: Sequence[NewEvent],
                     alerts: Sequence[AgentAlert] = ()) -> int:
        """Append atomically and durably (returns once committed); the stream's new version.
        ``alerts`` go out in the same transaction (the runtime's alerts topic): both or
        neither. May raise ``FencedError``, ``TransientError``...: ``run_task`` lets it
        propagate (a crash: the agent is resurrected and the re-run resumes from the
        journal). The events are retry-safe (fixed ids): a sink may retry an append it is
        unsure of."""
        ...

    def heartbeat(self, progress: str | None = None) -> None:
        """Cheap, non-durable liveness; called at every executed step and by
        ``ctx.heartbeat``. Must not block."""
        ...


@dataclass(frozen=True, slots=True)
class AgentServices:
    """What the runtime lends every agent: the LLM provider, the clock retries sleep on,
    the reconcile hooks of tools that do not carry one, and where LLM calls report usage
    and token deltas and ask the fleet budget (``ares.llm.telemetry``)."""

    llm: LlmProvider = field(default_factory=OfflineProvider)
    clock: Clock = field(default_factory=SystemClock)
    reconcilers: ReconcileRegistry = field(default_factory=ReconcileRegistry)
    telemetry: LlmTelemetry = field(default_factory=NullTelemetry)
    budget: BudgetGate = field(default_factory=OpenBudget)
    prices: PriceTable = field(default_factory=PriceTable)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentServices:
        """Provider from ``ARES_LLM_*`` (see ``ares.llm.provider_from_env``), prices from
        ``ARES_LLM_PRICES_FILE``."""
        env = os.environ if env is None else env
        return cls(llm=provider_from_env(env), prices=PriceTable.from_env(env))

    async def close(self) -> None:
        closer = getattr(self.llm, "close", None)
        if closer is not None:
            await closer()


class OutcomeStatus(Enum):
    COMPLETED = "completed"
    FAILED = "failed"
    PAUSED_IN_DOUBT = "paused_in_doubt"
    WAITING = "waiting"  # for a signal or a timer (``TaskOutcome.waiting``)


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    status: OutcomeStatus
    task_id: str
    output: Any = None  # COMPLETED: the handler's return value, as recorded
    error_type: str | None = None  # FAILED
    error: str | None = None  # FAILED
    retriable: bool = False  # FAILED: whether assigning the task again may succeed
    in_doubt: tuple[InDoubtCall, ...] = ()  # PAUSED_IN_DOUBT: what the alert must name
    waiting: tuple[Wait, ...] = ()  # WAITING: what wakes the task (a signal, a deadline)
    stats: RunStats = field(default_factory=RunStats)
    from_journal: bool = False  # the outcome was already recorded: nothing ran

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "task_id": self.task_id, "output": self.output,
                "error_type": self.error_type, "error": self.error,
                "retriable": self.retriable,
                "in_doubt": [c.to_json() for c in self.in_doubt],
                "waiting": [w.to_json() for w in self.waiting],
                "stats": self.stats.to_json(), "from_journal": self.from_journal}


async def run_task(agent: Agent, task: Task, journal: TaskJournal, sink: AgentSink,
                   services: AgentServices, incarnation: int,
                   module: str = "agent", mailbox: Mailbox | None = None) -> TaskOutcome:
    """Run (or resume) one task of ``agent``; see the module docstring for the contract.
    ``mailbox``: the agent's pending signals, for its waits."""
    if journal.outcome is not None:
        return recorded_outcome(task.task_id, journal)
    ctx = Context(agent_id=agent.agent_id, task=task, journal=journal, sink=sink,
                  services=services, incarnation=incarnation, module=module, mailbox=mailbox,
                  config=agent.config)
    try:
        output = await agent.handle(task, ctx)
    except TaskPaused as paused:
        ctx._close()
        return TaskOutcome(OutcomeStatus.PAUSED_IN_DOUBT, task.task_id,
                           in_doubt=paused.calls, stats=ctx.stats)
    except TaskWaiting:
        if (derailed := _derailed(ctx)) is not None:
            return derailed
        raise  # unreachable: a TaskWaiting always leaves its wait in the context
    except TaskFailed as failure:
        if (derailed := _derailed(ctx)) is not None:
            return derailed
        return await _fail(ctx, failure)
    except BaseExceptionGroup as group:  # concurrent steps (asyncio.TaskGroup) failed
        if (settled := await _settle_group(ctx, group)) is not None:
            return settled
        raise
    except Exception:
        ctx._close()
        with contextlib.suppress(Exception):  # keep what the handler logged before dying
            await ctx._flush_logs()
        raise
    if (derailed := _derailed(ctx)) is not None:
        return derailed
    journal.check_all_replayed(ctx._consumed)
    try:
        value, text = r.to_json_value(output)
    except (TypeError, ValueError) as e:
        return await _fail(ctx, StepResultError(task.task_id, "the handler", output, str(e)))
    await ctx._append([NewEvent(ev.TASK_COMPLETED, module,
                                {"task_id": task.task_id, "output_json": text})])
    ctx._close()
    return TaskOutcome(OutcomeStatus.COMPLETED, task.task_id, output=value, stats=ctx.stats)


def _derailed(ctx: Context) -> TaskOutcome | None:
    """A pause or a non-determinism the handler swallowed still decides the run."""
    ctx._close()
    if ctx._derailed is not None:
        raise ctx._derailed
    if ctx._paused:
        return TaskOutcome(OutcomeStatus.PAUSED_IN_DOUBT, ctx.task_id, in_doubt=ctx._paused,
                           stats=ctx.stats)
    if ctx._waits:
        return TaskOutcome(OutcomeStatus.WAITING, ctx.task_id, waiting=ctx._waits,
                           stats=ctx.stats)
    return None


async def _settle_group(ctx: Context, group: BaseExceptionGroup[Any]) -> TaskOutcome | None:
    """A group out of a TaskGroup: paused or task-failed when that is all it holds (or the
    context says so); ``None`` for a crash."""
    if (derailed := _derailed(ctx)) is not None:
        return derailed
    failed, rest = group.split(TaskFailed)
    if failed is not None and rest is None:
        return await _fail(ctx, _first_leaf(failed))
    with contextlib.suppress(Exception):
        await ctx._flush_logs()
    return None


def _first_leaf(group: BaseExceptionGroup[Any]) -> Any:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def _fail(ctx: Context, failure: TaskFailed) -> TaskOutcome:
    error_type = r.qualified_name(failure)
    await ctx._append([NewEvent(ev.TASK_FAILED, ctx.module, {
        "task_id": ctx.task_id, "error_type": error_type, "error_message": str(failure),
        "retriable": bool(failure.retriable)})])
    ctx._close()
    return TaskOutcome(OutcomeStatus.FAILED, ctx.task_id, error_type=error_type,
                       error=str(failure), retriable=bool(failure.retriable), stats=ctx.stats)


def recorded_outcome(task_id: str, journal: TaskJournal) -> TaskOutcome:
    """The outcome a journal already holds (``task.completed``/``task.failed``)."""
    event = journal.outcome
    if event is None:
        raise ValueError(f"task {task_id!r} has no recorded outcome")
    p = event.payload
    if event.type == ev.TASK_COMPLETED:
        return TaskOutcome(OutcomeStatus.COMPLETED, task_id,
                           output=parse_json(str(p.get("output_json", "null"))),
                           from_journal=True)
    return TaskOutcome(OutcomeStatus.FAILED, task_id, error_type=p.get("error_type"),
                       error=str(p.get("error_message", "")),
                       retriable=bool(p.get("retriable")), from_journal=True)


__all__ = [
    "APPROVAL",
    "AgentAlert",
    "AgentServices",
    "AgentSink",
    "FoldedMailbox",
    "Mailbox",
    "OutcomeStatus",
    "Signal",
    "Task",
    "TaskJournal",
    "TaskOutcome",
    "Wait",
    "open_tasks",
    "outcome_payload",
    "recorded_outcome",
    "resolution_event",
    "run_task",
    "signal_event",
    "task_journals",
]
