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
    AgentServices,
    OutcomeStatus,
    Task,
    TaskJournal,
    TaskOutcome,
    run_task,
)
from ares.errors import FencedError
from ares.events.kafka.partition_writer import PartitionWriter
from ares.events.model import ANY_VERSION, GENESIS_HASH, Event, NewEvent
from ares.lifecycle.state import (
    TASK_ASSIGNED,
    TASK_COMPLETED,
    TASK_FAILED,
    AgentLifecycle,
    Folder,
    fold,
)
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


# Called when a task pauses on an in-doubt tool call (the host raises the alert).
PausedCallback = Callable[["HostedAgent", TaskOutcome], Awaitable[None]]


class AgentSinkImpl:
    """The SDK's view of the agent's stream: appends go through the partition's writer."""

    def __init__(self, hosted: HostedAgent, writer: PartitionWriter) -> None:
        self._hosted = hosted
        self._writer = writer

    async def append(self, events: Sequence[NewEvent]) -> int:
        if self._writer.fenced:
            raise FencedError(f"partition {self._hosted.partition} moved to another owner")
        return await self._writer.append(self._hosted.agent_id, events, ANY_VERSION)

    def heartbeat(self, progress: str | None = None) -> None:
        self._hosted.last_progress = time.monotonic()
        if progress is not None and self._hosted.beat is not None:
            self._hosted.beat.progress = progress


async def run_open_tasks(hosted: HostedAgent, sink: AgentSinkImpl, services: AgentServices,
                         on_paused: PausedCallback) -> None:
    """The body of one incarnation: run the open tasks in order, forever.

    Exceptions propagate: the caller (the host's supervisor) treats them as a death.
    """
    assert hosted.agent is not None
    while True:
        current = hosted.lifecycle.current_task
        if current is None or current.task_id == hosted.paused_task:
            hosted.wakeup.clear()
            await hosted.wakeup.wait()
            continue
        task = Task(current.task_id, current.input)
        outcome = await run_task(hosted.agent, task, hosted.journal(task.task_id), sink,
                                 services, hosted.lifecycle.incarnation,
                                 module=f"agent.{hosted.lifecycle.kind}")
        if outcome.status is OutcomeStatus.PAUSED_IN_DOUBT:
            hosted.paused_task = task.task_id
            await on_paused(hosted, outcome)
        elif outcome.from_journal and hosted.lifecycle.current_task == current:
            # Recorded outcome but the task is still open in the fold: cannot happen unless
            # the log is inconsistent; do not spin on it.
            hosted.paused_task = task.task_id
