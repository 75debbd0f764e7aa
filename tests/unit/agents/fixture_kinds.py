"""Agent kinds for the registry tests (loaded by spec and by entry point)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ares.agents import Agent, AgentConfigError, AgentRegistry, Context, Task


class EchoAgent(Agent):
    kind = "test.echo"

    def configure(self, config: Mapping[str, Any]) -> None:
        self.prefix = config.get("prefix", "")
        if not isinstance(self.prefix, str):
            raise AgentConfigError(f"'prefix' must be a string, got {self.prefix!r}")

    async def handle(self, task: Task, ctx: Context) -> Any:
        return await ctx.step("echo", lambda: f"{self.prefix}{task.input}")


class OtherEcho(EchoAgent):
    """Same kind, another class: a conflict when both are registered."""


REGISTRY = AgentRegistry([EchoAgent])
AS_MAPPING = {"test.mapped": EchoAgent}
AS_LIST = [EchoAgent]
CONFLICTING = AgentRegistry([OtherEcho])
NOT_A_REGISTRY = 42
