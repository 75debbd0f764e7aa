"""Example agents shipped with the package, registered as built-in kinds; used by the
tests, the demo and the benchmarks."""

from __future__ import annotations

from ares.agents.registry import AgentRegistry
from ares.examples.assistant import AssistantAgent
from ares.examples.chat import ChatAgent
from ares.examples.pipeline import PipelineAgent
from ares.examples.refund import RefundAgent
from ares.examples.team import Distiller, Researcher, TeamLeader

REGISTRY = AgentRegistry([PipelineAgent, ChatAgent, RefundAgent, TeamLeader, Researcher,
                          Distiller, AssistantAgent], source="built-in examples")

__all__ = ["REGISTRY", "AssistantAgent", "ChatAgent", "Distiller", "PipelineAgent",
           "RefundAgent", "Researcher", "TeamLeader"]
