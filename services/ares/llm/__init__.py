"""LLM providers for ``ctx.llm``: the ports (completion and chat), a deterministic
offline provider, and OpenAI / Anthropic through their official SDKs (imported lazily:
``import ares.llm`` never loads an SDK, and the SDKs are optional extras)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ares.errors import ConfigError
from ares.llm.base import (
    LlmError,
    LlmProvider,
    LlmRequestError,
    LlmResult,
    LlmUnavailableError,
    count_tokens,
    prompt_hash,
)
from ares.llm.chat import (
    STOP_END,
    STOP_MAX_TOKENS,
    STOP_OTHER,
    STOP_TOOL_CALLS,
    ChatProvider,
    ChatResponse,
    DeltaSink,
    ToolCallRequest,
    ToolSpec,
    conversation_hash,
)
from ares.llm.offline import OfflineProvider, offline_turn

if TYPE_CHECKING:
    from ares.llm.anthropic_provider import AnthropicProvider
    from ares.llm.openai_provider import LlmSettings, OpenAICompatibleProvider, OpenAIProvider

PROVIDERS = ("offline", "openai", "anthropic")
# Lazily imported names -> their module (these modules import an SDK when used).
_LAZY = {"OpenAIProvider": "ares.llm.openai_provider",
         "OpenAICompatibleProvider": "ares.llm.openai_provider",
         "LlmSettings": "ares.llm.openai_provider",
         "AnthropicProvider": "ares.llm.anthropic_provider"}


def provider_from_env(env: Mapping[str, str] | None = None) -> LlmProvider:
    """``ARES_LLM_PROVIDER`` = offline | openai | anthropic; unset: openai when
    ``ARES_LLM_BASE_URL`` is set, offline otherwise. ``ARES_LLM_MODEL`` names the offline
    model too. Every provider returned is also a ``ChatProvider``."""
    env = os.environ if env is None else env
    name = env.get("ARES_LLM_PROVIDER", "").strip().lower()
    if not name:
        name = "openai" if env.get("ARES_LLM_BASE_URL") else "offline"
    if name == "offline":
        return OfflineProvider(model=env.get("ARES_LLM_MODEL") or "offline-1")
    if name == "openai":
        from ares.llm.openai_provider import OpenAIProvider

        return OpenAIProvider.from_env(env)
    if name == "anthropic":
        from ares.llm.anthropic_provider import AnthropicProvider

        return AnthropicProvider.from_env(env)
    raise ConfigError(f"ARES_LLM_PROVIDER must be one of {', '.join(PROVIDERS)} (got {name!r})")


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'ares.llm' has no attribute {name!r}")


__all__ = [
    "STOP_END",
    "STOP_MAX_TOKENS",
    "STOP_OTHER",
    "STOP_TOOL_CALLS",
    "AnthropicProvider",
    "ChatProvider",
    "ChatResponse",
    "DeltaSink",
    "LlmError",
    "LlmProvider",
    "LlmRequestError",
    "LlmResult",
    "LlmSettings",
    "LlmUnavailableError",
    "OfflineProvider",
    "OpenAICompatibleProvider",
    "OpenAIProvider",
    "ToolCallRequest",
    "ToolSpec",
    "conversation_hash",
    "count_tokens",
    "offline_turn",
    "prompt_hash",
    "provider_from_env",
]
