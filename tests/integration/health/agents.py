"""Agent kinds for the health checker's tests (`--agents tests.integration.health.agents:REGISTRY`).

``test.hang`` blocks inside a step without crashing and without a heartbeat, in its first
``hang_incarnations`` incarnations (config, default 1), and finishes in the next one: a
hung agent the checker must declare ``stalled`` and the runtime then resurrects. It
declares its own step timeout (``step_timeout_s`` in its config, read by the checker).
When it starts hanging is recorded in ``HANG_STARTED`` (same process) for latency.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.registry import AgentRegistry

HANG_STARTED: dict[str, list[float]] = {}


class Hang(Agent):
    kind = "test.hang"

    async def handle(self, task: Task, ctx: Context) -> Any:
        hang_for = int(self.config.get("hang_incarnations", 1))

        async def work() -> str:
            if ctx.incarnation <= hang_for:
                HANG_STARTED.setdefault(self.agent_id, []).append(time.time())
                await asyncio.Event().wait()  # blocks its progress, never crashes
            return "done"

        return await ctx.step("work", work)


REGISTRY = AgentRegistry([Hang], source="tests.integration.health.agents")
