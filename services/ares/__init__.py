"""ares-mesh: crash-proof long-running agents on Kafka.

The public surface is re-exported here lazily (``ares.Agent``, ``ares.Client``...): the
``ares`` CLI and the services import only the submodules they need, so importing a
submodule never pays for the whole SDK (nor loads the Kafka client, ``ares.client``).

Each export is written twice: in the type-checking imports below (where it comes from) and
in ``__all__``. At run time ``__getattr__`` takes a name of ``__all__`` from the first of
``_SOURCES`` (the modules of those imports) that has it.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

if os.environ.get("ARES_PURE_PYTHON"):  # the compiled append path's modules from their source
    from ares import native

    native.run_from_source()

if TYPE_CHECKING:
    from ares.agents import (
        Agent,
        AgentConfigError,
        AgentRegistry,
        AgentServices,
        BudgetExceeded,
        Child,
        ChildFailed,
        Context,
        Delegation,
        Effect,
        LocalRuntime,
        NonDeterminismError,
        Reconciled,
        ReconcileRegistry,
        Rejected,
        RetryPolicy,
        StepFailed,
        StepResultError,
        Task,
        TaskFailed,
        TokenLedger,
        Tool,
        ToolCallFailed,
        ToolSkipped,
        TurnLimitExceeded,
        UnknownAgentKindError,
        ValidationFailed,
        WaitTimeout,
        agent_loop,
        build_registry,
        load_registry,
        token_ledger,
    )
    from ares.client import Client, CommandRejectedError, NotAnsweredError
    from ares.llm import LlmProvider, LlmResult, OfflineProvider, OpenAICompatibleProvider

# The modules of the imports above, in the order __getattr__ tries them: the cheapest first
# (ares.agents imports ares.llm anyway), ares.client (the Kafka client) last, so an agent
# author's ``ares.Agent`` never loads it. tests/unit/test_public_surface.py checks that each
# export resolves to the object its import above names.
_SOURCES = ("ares.llm", "ares.agents", "ares.client")
_MISSING = object()


def __getattr__(name: str) -> Any:
    if name in __all__:
        for source in _SOURCES:
            value = getattr(importlib.import_module(source), name, _MISSING)
            if value is not _MISSING:
                globals()[name] = value
                return value
    raise AttributeError(f"module 'ares' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Agent",
    "AgentConfigError",
    "AgentRegistry",
    "AgentServices",
    "BudgetExceeded",
    "Child",
    "ChildFailed",
    "Client",
    "CommandRejectedError",
    "Context",
    "Delegation",
    "Effect",
    "LlmProvider",
    "LlmResult",
    "LocalRuntime",
    "NonDeterminismError",
    "NotAnsweredError",
    "OfflineProvider",
    "OpenAICompatibleProvider",
    "ReconcileRegistry",
    "Reconciled",
    "Rejected",
    "RetryPolicy",
    "StepFailed",
    "StepResultError",
    "Task",
    "TaskFailed",
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
