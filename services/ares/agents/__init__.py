"""The agent SDK: what users write agents against (see docs/sdk.md).

The runtime's side of the contract is ``ares.agents.host_api``.
"""

from __future__ import annotations

from ares.agents.agent import Agent, Task
from ares.agents.context import Context, RunStats
from ares.agents.errors import (
    AgentConfigError,
    AgentRegistryError,
    ContextClosedError,
    NonDeterminismError,
    StepFailed,
    StepResultError,
    TaskFailed,
    ToolCallFailed,
    ToolSkipped,
    UnknownAgentKindError,
)
from ares.agents.host_api import (
    AgentServices,
    AgentSink,
    OutcomeStatus,
    TaskOutcome,
    open_tasks,
    run_task,
)
from ares.agents.journal import TaskJournal
from ares.agents.ledger import TokenLedger, token_ledger
from ares.agents.local import LocalRuntime, StoreSink
from ares.agents.records import idempotency_key, resolution_event
from ares.agents.registry import (
    AgentRegistry,
    build_registry,
    builtin_registry,
    entry_point_registry,
    load_registry,
)
from ares.agents.retry import Clock, RetryPolicy, SystemClock
from ares.agents.tools import Effect, InDoubtCall, Reconciled, ReconcileRegistry

__all__ = [
    "Agent",
    "AgentConfigError",
    "AgentRegistry",
    "AgentRegistryError",
    "AgentServices",
    "AgentSink",
    "Clock",
    "Context",
    "ContextClosedError",
    "Effect",
    "InDoubtCall",
    "LocalRuntime",
    "NonDeterminismError",
    "OutcomeStatus",
    "ReconcileRegistry",
    "Reconciled",
    "RetryPolicy",
    "RunStats",
    "StepFailed",
    "StepResultError",
    "StoreSink",
    "SystemClock",
    "Task",
    "TaskFailed",
    "TaskJournal",
    "TaskOutcome",
    "TokenLedger",
    "ToolCallFailed",
    "ToolSkipped",
    "UnknownAgentKindError",
    "build_registry",
    "builtin_registry",
    "entry_point_registry",
    "idempotency_key",
    "load_registry",
    "open_tasks",
    "resolution_event",
    "run_task",
    "token_ledger",
]
