"""ares-mesh: crash-proof long-running agents on Kafka.

The public surface is re-exported here lazily (``ares.Agent``, ``ares.Context``...): the
``ares`` CLI and the services import only the submodules they need, so importing a
submodule never pays for the whole SDK.
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
        Context,
        Effect,
        LocalRuntime,
        NonDeterminismError,
        Reconciled,
        ReconcileRegistry,
        RetryPolicy,
        StepFailed,
        StepResultError,
        Task,
        TaskFailed,
        TokenLedger,
        ToolCallFailed,
        ToolSkipped,
        UnknownAgentKindError,
        build_registry,
        load_registry,
        token_ledger,
    )
    from ares.client import Client, CommandRejectedError
    from ares.llm import LlmProvider, LlmResult, OfflineProvider, OpenAICompatibleProvider

# public name -> the module that defines it (the imports above and __all__ below say the
# same for type checkers and linters; tests/unit/test_public_surface.py holds the three
# together)
_EXPORTS = {
    **dict.fromkeys((
        "Agent", "AgentConfigError", "AgentRegistry", "AgentServices", "Context", "Effect",
        "LocalRuntime", "NonDeterminismError", "Reconciled", "ReconcileRegistry",
        "RetryPolicy", "StepFailed", "StepResultError", "Task", "TaskFailed", "TokenLedger",
        "ToolCallFailed", "ToolSkipped", "UnknownAgentKindError", "build_registry",
        "load_registry", "token_ledger"), "ares.agents"),
    **dict.fromkeys(("Client", "CommandRejectedError"), "ares.client"),
    **dict.fromkeys(("LlmProvider", "LlmResult", "OfflineProvider",
                     "OpenAICompatibleProvider"), "ares.llm"),
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ares' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "Agent",
    "AgentConfigError",
    "AgentRegistry",
    "AgentServices",
    "Client",
    "CommandRejectedError",
    "Context",
    "Effect",
    "LlmProvider",
    "LlmResult",
    "LocalRuntime",
    "NonDeterminismError",
    "OfflineProvider",
    "OpenAICompatibleProvider",
    "ReconcileRegistry",
    "Reconciled",
    "RetryPolicy",
    "StepFailed",
    "StepResultError",
    "Task",
    "TaskFailed",
    "TokenLedger",
    "ToolCallFailed",
    "ToolSkipped",
    "UnknownAgentKindError",
    "build_registry",
    "load_registry",
    "token_ledger",
]
