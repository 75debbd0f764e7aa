"""The agent kind of the fleet budget test
(`--agents tests.integration.budgets.agents:REGISTRY`)."""

from __future__ import annotations

from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.registry import AgentRegistry
from ares.llm.offline import OfflineProvider


class Spender(Agent):
    """Calls the LLM ``input['calls']`` times in a row, one call in flight at a time, each
    taking ``input['latency_ms']`` (the offline provider's simulated latency) and at most
    ``input['max_tokens']`` completion tokens. Its tenant is the config's ``tenant``."""

    kind = "test.spender"

    async def handle(self, task: Task, ctx: Context) -> Any:
        provider = OfflineProvider(latency_ms=float(task.input.get("latency_ms", 500)))
        max_tokens = int(task.input.get("max_tokens", 40))
        for i in range(int(task.input.get("calls", 10))):
            await ctx.llm("call", prompt=f"{self.agent_id}: call {i}, say something",
                          provider=provider, max_tokens=max_tokens)
        return "spent"


REGISTRY = AgentRegistry([Spender], source="tests.integration.budgets.agents")
