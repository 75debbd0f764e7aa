"""The agent SDK: what users write agents against (see docs/sdk.md).

Here: the agent (``Agent``, ``Task``, ``Context``), tool effects and reconcile hooks, retry
policies, the errors a handler raises or catches, registries, the outcome records and the
token ledger an author reads, and ``LocalRuntime`` to run and test a kind in-process.

The runtime's side of the contract (``AgentSink``, ``TaskJournal``, ``open_tasks``,
``run_task``, ``resolution_event``) is ``ares.agents.host_api``, with its own ``__all__``.
"""

from __future__ import annotations

from ares.agents.agent import Agent, Task
from ares.agents.chat_call import Tool, TurnLimitExceeded, agent_loop
from ares.agents.context import Context, RunStats
from ares.agents.delegation import Child, Delegation
from ares.agents.errors import (
    AgentConfigError,
    AgentRegistryError,
    BudgetExceeded,
    ChildFailed,
    ContextClosedError,
    NonDeterminismError,
    Rejected,
    StepFailed,
    StepResultError,
    TaskFailed,
    ToolCallFailed,
    ToolSkipped,
    UnknownAgentKindError,
    ValidationFailed,
    WaitTimeout,
)
from ares.agents.host_api import AgentServices, OutcomeStatus, TaskOutcome
from ares.agents.ledger import TokenLedger, token_ledger
from ares.agents.local import LocalRuntime
from ares.agents.registry import AgentRegistry, build_registry, load_registry
from ares.agents.retry import Clock, RetryPolicy
from ares.agents.tools import Effect, InDoubtCall, Reconciled, ReconcileRegistry

__all__ = [
    "Agent",
    "AgentConfigError",
    "AgentRegistry",
    "AgentRegistryError",
    "AgentServices",
    "BudgetExceeded",
    "Child",
    "ChildFailed",
    "Clock",
    "Context",
    "ContextClosedError",
    "Delegation",
    "Effect",
    "InDoubtCall",
    "LocalRuntime",
    "NonDeterminismError",
    "OutcomeStatus",
    "ReconcileRegistry",
    "Reconciled",
    "Rejected",
    "RetryPolicy",
    "RunStats",
    "StepFailed",
    "StepResultError",
    "Task",
    "TaskFailed",
    "TaskOutcome",
    "TokenLedger",
    "Tool",
    "ToolCallFailed",
    "ToolSkipped",
    "TurnLimitExceeded",
    "UnknownAgentKindError",
    "ValidationFailed",
    "WaitTimeout",
    "agent_loop",
    "build_registry",
    "load_registry",
    "token_ledger",
]
