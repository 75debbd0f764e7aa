"""An OpenAI-compatible chat-completions client (OpenAI, vLLM, Ollama, LiteLLM, ...).

``POST {base_url}/chat/completions`` with ``Authorization: Bearer <key>``. HTTP failures are
translated here, once: 408/409/429/5xx and transport errors are ``LlmUnavailableError``
(retriable, with the server's Retry-After when given), every other 4xx and any answer we
cannot read are ``LlmRequestError``. The key never appears in a message, a log line or a
repr: error bodies are echoed only after the key is blanked out.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ares.errors import ConfigError
from ares.llm.base import LlmRequestError, LlmResult, LlmUnavailableError

log = logging.getLogger(__name__)

RETRIABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_BODY_ECHO = 300
DEFAULT_MODEL = "gpt-4o-mini"


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """``ARES_LLM_BASE_URL``, ``ARES_LLM_API_KEY``, ``ARES_LLM_MODEL``, ``ARES_LLM_TIMEOUT_S``."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    model: str = DEFAULT_MODEL
    timeout_s: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LlmSettings:
        env = os.environ if env is None else env
        base_url = env.get("ARES_LLM_BASE_URL", "").strip()
        if not base_url:
            raise ConfigError("ARES_LLM_BASE_URL is not set: give the provider's base URL, "
                              "e.g. https://api.openai.com/v1")
        raw_timeout = env.get("ARES_LLM_TIMEOUT_S", "60")
        try:
            timeout = float(raw_timeout)
        except ValueError:
            raise ConfigError(f"ARES_LLM_TIMEOUT_S must be a number of seconds "
                              f"(got {raw_timeout!r})") from None
        settings = cls(base_url=base_url, api_key=env.get("ARES_LLM_API_KEY") or None,
                       model=env.get("ARES_LLM_MODEL") or DEFAULT_MODEL, timeout_s=timeout)
        settings.validate()
        return settings

    def validate(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"ARES_LLM_BASE_URL must start with http:// or https:// "
                              f"(got {self.base_url!r})")
        if self.timeout_s <= 0:
            raise ConfigError("ARES_LLM_TIMEOUT_S must be positive")
        if not self.model:
            raise ConfigError("ARES_LLM_MODEL is empty")


class OpenAICompatibleProvider:
    """One aiohttp session per provider, opened on first use; ``close()`` releases it."""

    def __init__(self, settings: LlmSettings) -> None:
        settings.validate()
        self._settings = settings
        self._url = settings.base_url.rstrip("/") + "/chat/completions"
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAICompatibleProvider:
        return cls(LlmSettings.from_env(env))

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(url={self._url!r}, model={self.default_model!r})"

    @property
    def default_model(self) -> str:
        return self._settings.model

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        model = model or self._settings.model
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], **params}
        headers = {"Content-Type": "application/json"}
        if self._settings.api_key:
            headers["Authorization"] = f"Bearer {self._settings.api_key}"
        session = self._open()
        try:
            async with session.post(self._url, json=body, headers=headers) as response:
                text = await response.text()
                if response.status >= 400:
                    raise self._http_error(response.status, text, response.headers)
        except (aiohttp.ClientError, TimeoutError) as e:
            # The message names the URL and the error class only: no headers, no key.
            raise LlmUnavailableError(f"LLM provider {self._url} unreachable: "
                                      f"{type(e).__name__}: {self._redact(str(e))}") from e
        return self._parse(text, model)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self._settings.timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session

    def _http_error(self, status: int, body: str,
                    headers: Mapping[str, str]) -> LlmUnavailableError | LlmRequestError:
        detail = self._redact(body.strip())[:_BODY_ECHO]
        message = f"LLM provider {self._url} answered HTTP {status}: {detail}"
        if status in RETRIABLE_STATUS:
            return LlmUnavailableError(message, _retry_after(headers))
        return LlmRequestError(message, status)

    def _parse(self, text: str, model: str) -> LlmResult:
        try:
            data = json.loads(text)
            choice = data["choices"][0]
            content = choice["message"]["content"]
            usage = data.get("usage") or {}
            result = LlmResult(
                text=content if isinstance(content, str) else "",
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
                model=str(data.get("model") or model),
            )
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise LlmRequestError(f"LLM provider {self._url} answered something that is not "
                                  f"a chat completion ({type(e).__name__}: {e}): "
                                  f"{self._redact(text)[:_BODY_ECHO]}") from None
        if content is None:
            log.warning("LLM provider %s returned no content (finish_reason=%s)", self._url,
                        choice.get("finish_reason"))
        return result

    def _redact(self, text: str) -> str:
        key = self._settings.api_key
        return text.replace(key, "<redacted>") if key else text


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare for APIs, the retry policy's backoff applies

