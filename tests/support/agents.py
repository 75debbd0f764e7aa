"""Agent kinds for the runtime's integration tests (`--agents tests.support.agents:REGISTRY`)."""

from __future__ import annotations

import asyncio
from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.registry import AgentRegistry
from ares.events.model import Event


class Crasher(Agent):
    """Dies on every task, at the same step: a death loop."""

    kind = "test.crasher"

    async def handle(self, task: Task, ctx: Context) -> Any:
        await ctx.step("before", lambda: "ok")
        raise RuntimeError("boom at the same place every time")


class Counter(Agent):
    """State folded from events (tasks seen), snapshotted and restored."""

    kind = "test.counter"

    def __init__(self, agent_id: str, config: Any = None) -> None:
        super().__init__(agent_id, config)
        self.seen: list[str] = []

    def apply(self, event: Event) -> None:
        if event.type == "task.assigned":
            self.seen.append(str(event.payload["task_id"]))

    def snapshot(self) -> dict[str, Any]:
        return {"seen": list(self.seen)}

    def restore(self, state: Any) -> None:
        self.seen = list(state.get("seen", []))

    async def handle(self, task: Task, ctx: Context) -> Any:
        total = await ctx.step("count", lambda: len(self.seen))
        return {"seen": total}


class Sleeper(Agent):
    """Works for ``input['seconds']`` inside one step: something to kill or stop."""

    kind = "test.sleeper"

    async def handle(self, task: Task, ctx: Context) -> Any:
        async def nap() -> str:
            await asyncio.sleep(float(task.input.get("seconds", 1)))
            return "rested"

        return await ctx.step("nap", nap)


class Napper(Agent):
    """A durable ``ctx.sleep`` of ``input['seconds']``, between two steps: a timer to kill
    the worker under."""

    kind = "test.napper"

    async def handle(self, task: Task, ctx: Context) -> Any:
        await ctx.step("before", lambda: "ready")
        await ctx.sleep(float(task.input.get("seconds", 1)), name="nap")
        return await ctx.step("after", lambda: "woke")


class Waiter(Agent):
    """Only a durable wait: for the signal ``input['signal']`` (default ``go``), or with
    ``input['seconds']`` a ``ctx.sleep`` of that long. bench/waits.py hosts 10,000 of them."""

    kind = "test.waiter"

    async def handle(self, task: Task, ctx: Context) -> Any:
        if "seconds" in task.input:
            await ctx.sleep(float(task.input["seconds"]))
            return "woke"
        return await ctx.wait_for(str(task.input.get("signal", "go")))


REGISTRY = AgentRegistry([Crasher, Counter, Sleeper, Napper, Waiter],
                         source="tests.support.agents")
