"""LLM providers for ``ctx.llm``: the port, a deterministic offline provider, and an
OpenAI-compatible HTTP provider (imported lazily: it pulls in aiohttp)."""

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
from ares.llm.offline import OfflineProvider

if TYPE_CHECKING:
    from ares.llm.openai_compat import LlmSettings, OpenAICompatibleProvider

PROVIDERS = ("offline", "openai")


def provider_from_env(env: Mapping[str, str] | None = None) -> LlmProvider:
    """``ARES_LLM_PROVIDER`` = offline | openai; unset: openai when ``ARES_LLM_BASE_URL`` is
    set, offline otherwise. ``ARES_LLM_MODEL`` names the offline model too."""
    env = os.environ if env is None else env
    name = env.get("ARES_LLM_PROVIDER", "").strip().lower()
    if not name:
        name = "openai" if env.get("ARES_LLM_BASE_URL") else "offline"
    if name == "offline":
        return OfflineProvider(model=env.get("ARES_LLM_MODEL") or "offline-1")
    if name == "openai":
        from ares.llm.openai_compat import OpenAICompatibleProvider

        return OpenAICompatibleProvider.from_env(env)
    raise ConfigError(f"ARES_LLM_PROVIDER must be one of {', '.join(PROVIDERS)} (got {name!r})")


def __getattr__(name: str) -> Any:
    if name in ("OpenAICompatibleProvider", "LlmSettings"):
        from ares.llm import openai_compat

        return getattr(openai_compat, name)
    raise AttributeError(f"module 'ares.llm' has no attribute {name!r}")


__all__ = [
    "LlmError",
    "LlmProvider",
    "LlmRequestError",
    "LlmResult",
    "LlmSettings",
    "LlmUnavailableError",
    "OfflineProvider",
    "OpenAICompatibleProvider",
    "count_tokens",
    "prompt_hash",
    "provider_from_env",
]
