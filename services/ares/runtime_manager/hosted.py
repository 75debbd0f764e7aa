"""One hosted agent: its folded lifecycle, its live instance, and the work of an incarnation.

An agent's state changes only through committed events of its stream (``on_event``): the
host routes every committed event here, whoever appended it. The incarnation itself is an
asyncio task that runs the agent's open tasks, one at a time, through the SDK's
``run_task``; an exception escaping it is the agent's death, which the host handles.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from ares.agents.agent import Agent
from ares.agents.host_api import (
    AgentAlert,
    AgentServices,
    FoldedMailbox,
    OutcomeStatus,
    Task,
    TaskJournal,
    TaskOutcome,
    Wait,
    run_task,
)
from ares.errors import AresError, FencedError
from ares.events.kafka.partition_writer import PartitionWriter, TransactionScope
from ares.events.kafka.routing import partition_for
from ares.events.model import ANY_VERSION, GENESIS_HASH, Event, NewEvent
from ares.lifecycle import events as ev
from ares.lifecycle.state import (
    TASK_ASSIGNED,
    TASK_COMPLETED,
    TASK_FAILED,
    AgentLifecycle,
    Folder,
    PendingTask,
    fold,
)
from ares.runtime_manager import delegations
from ares.runtime_manager.alerts import alert_record
from ares.runtime_manager.heartbeats import AgentBeat

# Event types that (re)open or end the wait of a paused task.
TOOL_RESOLVED = "tool.call.resolved"


@dataclass(slots=True)
class HostedAgent:
    agent_id: str
    partition: int
    lifecycle: AgentLifecycle
    agent: Agent | None = None
    # Events of the open tasks, from the first open task's assignment on: their journals.
    open_events: list[Event] = field(default_factory=list)
    journal_from_offset: int | None = None
    last_offset: int | None = None
    last_hash: str = GENESIS_HASH
    events_since_snapshot: int = 0
    last_progress: float = field(default_factory=time.monotonic)
    paused_task: str | None = None
    # The waits the current task's last run ended on (a signal's name, a deadline): the
    # task runs again when one is met. In-process only: a new incarnation re-runs the task,
    # which finds its recorded waits again (and their deadlines) in the journal.
    waiting: tuple[Wait, ...] = ()
    wait_timer: asyncio.TimerHandle | None = None
    # Why the running incarnation is being cancelled (killed, heartbeat_timeout, stalled):
    # set before the cancel, like the stop flag, so the exit is read as a death.
    kill_cause: str | None = None
    incarnation_task: asyncio.Task[None] | None = None
    supervisor: asyncio.Task[None] | None = None
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    beat: AgentBeat | None = None
    # While a resurrection rebuilds the agent from the log, the events committed meanwhile
    # are kept here too, so the rebuilt agent misses none of them.
    buffer: list[tuple[Event, int | None]] | None = None
    # A transaction sending what the agent owes its parents or children is in flight
    # (``delegations.settle``): one at a time.
    settling: bool = False

    def __post_init__(self) -> None:
        if self.beat is None:
            self.beat = AgentBeat(self.agent_id, self.partition)

    @property
    def running(self) -> bool:
        return self.supervisor is not None and not self.supervisor.done()

    def on_event(self, event: Event, offset: int | None, *, apply: bool = True) -> None:
        """Fold a committed event into the lifecycle, the agent and the open journals."""
        self.lifecycle = fold(self.lifecycle, event)
        if apply and self.agent is not None:
            self.agent.apply(event)
        self.track_journal(event, offset)
        self.last_offset = offset if offset is not None else self.last_offset
        self.last_hash = event.hash
        self.events_since_snapshot += 1
        assert self.beat is not None
        self.beat.version = event.version
        self.beat.incarnation = self.lifecycle.incarnation
        self.beat.status = self.lifecycle.status.value
        if event.type in (TASK_ASSIGNED, TOOL_RESOLVED):
            if event.type == TOOL_RESOLVED:
                self.paused_task = None
            self.wakeup.set()
        elif event.type == ev.SIGNAL_RECEIVED and self.waiting:
            name = event.payload.get("name")
            if any(w.wakes_on(str(name)) for w in self.waiting):
                self.stop_waiting()

    def replay(self, events: Sequence[Event], offsets: Sequence[int]) -> None:
        """``on_event(event, offset, apply=False)`` for each of consecutive verified events
        of a recovery, with the same result: one lifecycle ``Folder`` for the run instead of
        a frozen lifecycle per event (a ``dataclasses.replace`` each, most of the per-event
        cost of a replay), and the journal tracked from the folder's open tasks."""
        if not events:
            return
        folder = Folder(self.lifecycle)
        woken = resolved = False
        for event, offset in zip(events, offsets, strict=True):
            self._track_journal(event, offset, tasks_open=folder.apply(event))
            if event.type == TASK_ASSIGNED:
                woken = True
            elif event.type == TOOL_RESOLVED:
                woken = resolved = True
        self.lifecycle = lifecycle = folder.freeze()
        last = events[-1]
        self.last_offset = offsets[-1]
        self.last_hash = last.hash
        self.events_since_snapshot += len(events)
        assert self.beat is not None
        self.beat.version = last.version
        self.beat.incarnation = lifecycle.incarnation
        self.beat.status = lifecycle.status.value
        if resolved:
            self.paused_task = None
        if woken:
            self.wakeup.set()

    def track_journal(self, event: Event, offset: int | None) -> None:
        """Keep the events a re-run of the open tasks needs, and nothing older."""
        self._track_journal(event, offset, tasks_open=bool(self.lifecycle.pending_tasks))

    def _track_journal(self, event: Event, offset: int | None, *, tasks_open: bool) -> None:
        """``track_journal`` given whether tasks are open once ``event`` is folded."""
        if event.type == TASK_ASSIGNED and not self.open_events:
            self.journal_from_offset = offset
        if tasks_open or event.type == TASK_ASSIGNED:
            self.open_events.append(event)
        if event.type in (TASK_COMPLETED, TASK_FAILED) and not tasks_open:
            self.open_events.clear()
            self.journal_from_offset = None

    def journal(self, task_id: str) -> TaskJournal:
        return TaskJournal.from_events(task_id, self.open_events)

    def waits_for(self, task_id: str) -> bool:
        return bool(self.waiting) and self.waiting[0].task_id == task_id

    def wait_on(self, waits: tuple[Wait, ...]) -> None:
        """The task's run ended on ``waits``: wake it when a matching signal commits (or
        has committed meanwhile: then at once) or at the earliest deadline. The event
        loop's timer heap keeps the deadlines, a handle per waiting agent."""
        self.stop_waiting(wake=False)
        if any(w.wakes_on(g.name) for g in self.lifecycle.signals for w in waits):
            self.wakeup.set()  # it came while the run was ending: run again now
            return
        self.waiting = waits
        deadlines = [w.deadline for w in waits if w.deadline is not None]
        if deadlines:
            delay = max(0.0, min(deadlines) - time.time())
            self.wait_timer = asyncio.get_running_loop().call_later(delay, self.stop_waiting)

    def stop_waiting(self, *, wake: bool = True) -> None:
        """The wait is over (a signal, a deadline) or abandoned: forget it, run again."""
        if self.wait_timer is not None:
            self.wait_timer.cancel()
            self.wait_timer = None
        self.waiting = ()
        if wake:
            self.wakeup.set()


# Called when a task pauses on an in-doubt tool call (the host raises the alert).
PausedCallback = Callable[["HostedAgent", TaskOutcome], Awaitable[None]]


class AgentSinkImpl:
    """The SDK's view of the agent's stream: appends go through the partition's writer.

    An append that records a dispatch (``delegation.dispatched``) carries the child's start
    and assignment in its transaction, and is refused once the agent's stop is requested or
    recorded: the check runs inside the transaction, in the writer's order, so a stop handled
    first wins and no child starts after it (``delegations``)."""

    def __init__(self, hosted: HostedAgent, writer: PartitionWriter, alerts_topic: str,
                 commands_topic: str, partitions: int) -> None:
        self._hosted = hosted
        self._writer = writer
        self._alerts_topic = alerts_topic
        self._commands_topic = commands_topic
        self._partitions = partitions

    async def append(self, events: Sequence[NewEvent],
                     alerts: Sequence[AgentAlert] = ()) -> int:
        if self._writer.fenced:
            raise FencedError(f"partition {self._hosted.partition} moved to another owner")
        hosted = self._hosted
        agent_id = hosted.agent_id
        dispatch = delegations.has_dispatch(events)
        if not alerts and not dispatch:
            return await self._writer.append(agent_id, events, ANY_VERSION)
        records = [alert_record(a.kind, agent_id, a.message, severity=a.severity,
                                details=a.details) for a in alerts]
        commands = delegations.dispatch_commands(agent_id, events) if dispatch else []

        async def work(tx: TransactionScope) -> int:
            life = hosted.lifecycle
            # Requested (the stop is being handled) or recorded (agent.stopped committed and
            # cleared the flag, while the cancelled handler has not unwound yet).
            if dispatch and (life.stop_requested or not life.is_live):
                raise AgentStopping(f"agent {agent_id} is stopping: no new child")
            version = await tx.append(agent_id, events, ANY_VERSION)
            for record in records:
                await tx.send(self._alerts_topic, record, key=agent_id.encode())
            for command in commands:
                await tx.send(self._commands_topic, command.encode(),
                              key=command.stream_id.encode(),
                              partition=partition_for(command.stream_id, self._partitions))
            return version

        return int(await self._writer.submit(work))

    def heartbeat(self, progress: str | None = None) -> None:
        self._hosted.last_progress = time.monotonic()
        if progress is not None and self._hosted.beat is not None:
            self._hosted.beat.progress = progress


class AgentStopping(AresError):
    """An append refused because the agent's stop was requested (its run is ending)."""


async def run_open_tasks(hosted: HostedAgent, sink: AgentSinkImpl, services: AgentServices,
                         on_paused: PausedCallback) -> None:
    """The body of one incarnation: run the open tasks in order, forever.

    A task that waits (a signal, a timer) ends its run: only ``hosted.waiting`` remains,
    and this loop sleeps on ``wakeup`` as for an idle agent until the wait is met.
    Exceptions propagate: the caller (the host's supervisor) treats them as a death.
    """
    assert hosted.agent is not None
    mailbox = FoldedMailbox(lambda: hosted.lifecycle)
    hosted.stop_waiting(wake=False)  # a new incarnation re-runs the task to find its waits
    while True:
        current = hosted.lifecycle.current_task
        if (current is None or current.task_id == hosted.paused_task
                or hosted.waits_for(current.task_id)):
            hosted.wakeup.clear()
            await hosted.wakeup.wait()
            continue
        await _run_current(hosted, current, sink, services, mailbox, on_paused)


async def _run_current(hosted: HostedAgent, current: PendingTask, sink: AgentSinkImpl,
                       services: AgentServices, mailbox: FoldedMailbox,
                       on_paused: PausedCallback) -> None:
    """One run of the current task. A function of its own so that nothing of a finished
    run (its outcome, task, input) stays referenced while the agent waits for the next."""
    assert hosted.agent is not None
    task = Task(current.task_id, current.input)
    outcome = await run_task(hosted.agent, task, hosted.journal(task.task_id), sink,
                             services, hosted.lifecycle.incarnation,
                             module=f"agent.{hosted.lifecycle.kind}", mailbox=mailbox)
    if outcome.status is OutcomeStatus.PAUSED_IN_DOUBT:
        hosted.paused_task = task.task_id
        await on_paused(hosted, outcome)
    elif outcome.status is OutcomeStatus.WAITING:
        hosted.wakeup.clear()
        hosted.wait_on(outcome.waiting)
    elif outcome.from_journal and hosted.lifecycle.current_task == current:
        # Recorded outcome but the task is still open in the fold: cannot happen unless
        # the log is inconsistent; do not spin on it.
        hosted.paused_task = task.task_id
