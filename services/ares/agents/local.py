"""Run an agent kind in-process, without Kafka: for unit tests, the docs and trying a kind.

``LocalRuntime`` follows the host contract of ``ares.agents.host_api`` for one agent over
an ``EventStore`` (memory by default): it appends ``task.assigned``, applies every appended
event to the agent, runs tasks with ``run_task``, and can ``resurrect`` the agent the way
the runtime manager does (a new instance, restored from a snapshot and/or the events).
It does not supervise: a crash propagates to the caller, who decides to resurrect.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ares.agents import records as r
from ares.agents.agent import Agent, Task
from ares.agents.host_api import AgentServices, TaskOutcome, run_task
from ares.agents.journal import TaskJournal, open_tasks
from ares.agents.records import AgentAlert
from ares.agents.registry import AgentFactory
from ares.agents.waits import FoldedMailbox, signal_event
from ares.events.memory import MemoryEventStore
from ares.events.model import Event, NewEvent
from ares.events.ports import EventStore
from ares.events.wire.canonical import canonical_json
from ares.lifecycle import events as ev
from ares.lifecycle.state import AgentLifecycle, fold

MODULE = "local-runtime"


class StoreSink:
    """An ``AgentSink`` over one stream of an ``EventStore``; ``on_events`` receives the
    sealed events of every append (the host applies them to the agent there)."""

    def __init__(self, store: EventStore, stream_id: str,
                 on_events: Callable[[list[Event]], None] | None = None) -> None:
        self.store = store
        self.stream_id = stream_id
        self.on_events = on_events
        self.heartbeats: list[str | None] = []
        self.alerts: list[AgentAlert] = []  # what went out with the appends
        self.appends = 0

    async def append(self, events: Sequence[NewEvent],
                     alerts: Sequence[AgentAlert] = ()) -> int:
        version = await self.store.append(self.stream_id, events)
        self.alerts.extend(alerts)
        self.appends += 1
        if self.on_events is not None:
            sealed = await self.store.read(self.stream_id, version - len(events) + 1,
                                           len(events))
            self.on_events(sealed)
        return version

    def heartbeat(self, progress: str | None = None) -> None:
        self.heartbeats.append(progress)


class LocalRuntime:
    def __init__(self, factory: AgentFactory | type[Agent], agent_id: str = "agent-1",
                 config: Mapping[str, Any] | None = None, *, store: EventStore | None = None,
                 services: AgentServices | None = None, module: str | None = None) -> None:
        self.factory = factory
        self.agent_id = agent_id
        self.config = dict(config or {})
        self.store: EventStore = store if store is not None else MemoryEventStore()
        self.services = services or AgentServices()
        self.incarnation = 1  # as in the runtime: agent.started carries incarnation 1
        self.agent = factory(agent_id, self.config)
        self.kind = self.agent.kind or type(self.agent).__name__
        self.module = module or f"agent.{self.kind}"
        self.sink = StoreSink(self.store, agent_id, self._apply)
        self.lifecycle = AgentLifecycle(agent_id)  # folded from every event, as the host does
        self._snapshot: tuple[int, dict[str, Any]] | None = None
        self._started = False

    def _apply(self, events: list[Event]) -> None:
        for event in events:
            self.lifecycle = fold(self.lifecycle, event)
            self.agent.apply(event)

    async def events(self) -> list[Event]:
        return await self.store.read(self.agent_id)

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.sink.append([NewEvent(ev.AGENT_STARTED, MODULE, {
            "kind": self.kind, "config_json": canonical_json(self.config),
            "incarnation": self.incarnation})])

    async def submit(self, task_input: Any = None, task_id: str | None = None) -> TaskOutcome:
        """Assign a task and run it; a crash of the handler propagates."""
        await self.start()
        task = Task(task_id or uuid.uuid4().hex[:12], task_input)
        await self.sink.append([NewEvent(ev.TASK_ASSIGNED, MODULE, {
            "task_id": task.task_id, "input_json": canonical_json(task_input)})])
        return await self.run(task)

    async def run(self, task: Task) -> TaskOutcome:
        journal = TaskJournal.from_events(task.task_id, await self.events())
        return await run_task(self.agent, task, journal, self.sink, self.services,
                              self.incarnation, self.module,
                              mailbox=FoldedMailbox(lambda: self.lifecycle))

    async def run_open_tasks(self) -> list[TaskOutcome]:
        """Run (resume) every assigned task without an outcome, in assignment order."""
        return [await self.run(task) for task, _ in open_tasks(await self.events())]

    async def take_snapshot(self) -> None:
        """Keep ``agent.snapshot()`` with the stream version it covers (in memory)."""
        version = await self.store.stream_version(self.agent_id)
        self._snapshot = (version, self.agent.snapshot())

    async def resurrect(self, *, from_snapshot: bool = True) -> Agent:
        """A new incarnation: a fresh agent, ``restore``d from the last snapshot (if any and
        asked) and ``apply``-ed every later event — what the runtime does after a death."""
        parent = self.incarnation
        self.incarnation += 1
        agent = self.factory(self.agent_id, self.config)
        after = 0
        if from_snapshot and self._snapshot is not None:
            after, state = self._snapshot
            agent.restore(state)
        replayed = await self.store.read(self.agent_id, after + 1)
        for event in replayed:
            agent.apply(event)
        self.agent = agent
        await self.sink.append([NewEvent(ev.AGENT_RESURRECTED, MODULE, {
            "incarnation": self.incarnation, "parent_incarnation": parent,
            "snapshot_version": after if from_snapshot and self._snapshot else None,
            "replayed_events": len(replayed)})])
        return agent

    async def signal(self, name: str, payload: Any = None,
                     signal_id: str | None = None) -> bool:
        """Deliver a signal as the owner does for ``agent.signal`` (``signal.received``, once
        per ``signal_id``); whether it was new. Run the waiting task again afterwards
        (``run_open_tasks``): this runtime does not supervise."""
        signal_id = signal_id or uuid.uuid4().hex
        if self.lifecycle.knows_signal(signal_id):
            return False
        await self.sink.append([signal_event(signal_id, name, canonical_json(payload),
                                             MODULE)])
        return True

    async def resolve(self, call_id: str, as_: str, result: Any = None,
                      note: str | None = None) -> None:
        """Append an operator's ``tool.call.resolved`` (what ``ares agents resolve`` does)."""
        await self.sink.append([r.resolution_event(call_id, as_, result=result, note=note)])
