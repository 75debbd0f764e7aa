"""Test doubles for the agent SDK: a sink over the memory store, a fake clock, kills."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ares.agents import AgentServices, Task
from ares.agents.agent import Agent
from ares.agents.host_api import TaskJournal, TaskOutcome, run_task
from ares.agents.tools import ReconcileRegistry
from ares.events.memory import MemoryEventStore
from ares.events.model import Event, NewEvent
from ares.llm import LlmProvider, OfflineProvider


class Killed(BaseException):
    """SIGKILL, as far as the handler can tell: nothing after it runs (not an Exception,
    so no SDK code path records it)."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class MemorySink:
    """An AgentSink over a MemoryEventStore stream: payloads are validated and sealed by
    the real append path. ``kill_at=n`` raises ``Killed`` instead of the n-th append
    (1-based): the process died before that record became durable."""

    def __init__(self, store: MemoryEventStore | None = None, stream_id: str = "agent-1",
                 kill_at: int | None = None) -> None:
        self.store = store or MemoryEventStore()
        self.stream_id = stream_id
        self.kill_at = kill_at
        self.appends = 0
        self.batches: list[list[str]] = []
        self.killed: list[Sequence[NewEvent]] = []  # the batches a kill kept from the log
        self.heartbeats: list[str | None] = []

    async def append(self, events: Sequence[NewEvent], alerts: Sequence[Any] = ()) -> int:
        self.appends += 1
        if self.kill_at is not None and self.appends >= self.kill_at:
            self.killed.append(events)
            raise Killed(f"killed before append #{self.appends}")
        self.batches.append([e.type for e in events])
        return await self.store.append(self.stream_id, events)

    def heartbeat(self, progress: str | None = None) -> None:
        self.heartbeats.append(progress)

    async def events(self) -> list[Event]:
        return await self.store.read(self.stream_id)

    async def types(self) -> list[str]:
        return [e.type for e in await self.events()]

    async def of_type(self, event_type: str) -> list[Event]:
        return [e for e in await self.events() if e.type == event_type]


class Harness:
    """One agent, one stream: assign a task, run it, run it again as a resurrection would."""

    def __init__(self, agent: Agent, *, llm: LlmProvider | None = None,
                 reconcilers: ReconcileRegistry | None = None) -> None:
        self.agent = agent
        self.clock = FakeClock()
        self.sink = MemorySink(stream_id=agent.agent_id)
        self.services = AgentServices(llm=llm or OfflineProvider(), clock=self.clock,
                                      reconcilers=reconcilers or ReconcileRegistry())
        self.incarnation = 0

    async def assign(self, task_input: Any = None, task_id: str = "t1") -> Task:
        from ares.events.wire.canonical import canonical_json

        await self.sink.store.append(self.sink.stream_id, [NewEvent(
            "task.assigned", "test", {"task_id": task_id,
                                      "input_json": canonical_json(task_input)})])
        return Task(task_id, task_input)

    async def run(self, task: Task, *, kill_at: int | None = None) -> TaskOutcome:
        """One incarnation's run; ``kill_at``: die before the n-th append of this run."""
        self.sink.kill_at = None if kill_at is None else self.sink.appends + kill_at
        journal = TaskJournal.from_events(task.task_id, await self.sink.events())
        try:
            return await run_task(self.agent, task, journal, self.sink, self.services,
                                  self.incarnation, "agent.test")
        finally:
            self.sink.kill_at = None

    async def rerun(self, task: Task, **kwargs: Any) -> TaskOutcome:
        self.incarnation += 1
        return await self.run(task, **kwargs)


class FnAgent(Agent):
    """An agent whose handler is a plain async function (handler(task, ctx))."""

    kind = "test.fn"

    def __init__(self, handler: Callable[..., Any], agent_id: str = "agent-1") -> None:
        super().__init__(agent_id, {})
        self.handler = handler

    async def handle(self, task: Task, ctx: Any) -> Any:
        return await self.handler(task, ctx)


class Counter:
    """A step function that counts its real executions."""

    def __init__(self, result: Any = "ok") -> None:
        self.calls = 0
        self.result = result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.result
