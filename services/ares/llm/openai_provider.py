"""OpenAI (and OpenAI-compatible servers: vLLM, Ollama, LiteLLM...) through the official
``openai`` SDK: chat completions with tool calling and streaming.

The SDK is imported lazily (``pip install 'ares-mesh[openai]'``) and never retries
(``max_retries=0``): ``ctx.llm``'s RetryPolicy does, and honours the server's Retry-After
carried by ``LlmUnavailableError``. SDK and transport failures are translated here, once:
rate limits, overload, 408/409/425/429/5xx, timeouts and lost connections are retriable;
every other status and any answer that is not a chat completion are not. The API key
never appears in a message, a log line or a repr: echoed bodies are redacted.

The settings (``LlmSettings``) and the error helpers are shared with the Anthropic
provider.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from ares.errors import ConfigError
from ares.llm.base import LlmError, LlmRequestError, LlmResult, LlmUnavailableError
from ares.llm.chat import (
    STOP_END,
    STOP_MAX_TOKENS,
    STOP_OTHER,
    STOP_TOOL_CALLS,
    ChatResponse,
    DeltaSink,
    ToolCallRequest,
    ToolSpec,
    check_messages,
    user,
)

log = logging.getLogger(__name__)

RETRIABLE_STATUS = frozenset({408, 409, 425, 429})  # and every 5xx
_BODY_ECHO = 300
DEFAULT_MODEL = "gpt-4o-mini"
# Per provider: (default base URL, default model, the SDK's own key variable).
DEFAULTS: dict[str, tuple[str, str, str]] = {
    "openai": ("https://api.openai.com/v1", DEFAULT_MODEL, "OPENAI_API_KEY"),
    "anthropic": ("https://api.anthropic.com", "claude-3-5-haiku-latest",
                  "ANTHROPIC_API_KEY"),
}
# Sent when no key is configured for a self-hosted server (the SDKs insist on one).
NO_KEY = "no-key"

_FINISH = {"stop": STOP_END, "tool_calls": STOP_TOOL_CALLS, "function_call": STOP_TOOL_CALLS,
           "length": STOP_MAX_TOKENS}


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """``ARES_LLM_BASE_URL``, ``ARES_LLM_API_KEY`` (or ``ARES_LLM_API_KEY_FILE``, or the
    SDK's own variable), ``ARES_LLM_MODEL``, ``ARES_LLM_TIMEOUT_S``."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    model: str = DEFAULT_MODEL
    timeout_s: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *,
                 provider: str = "openai") -> LlmSettings:
        """``provider`` picks the defaults (base URL, model, fallback key variable)."""
        env = os.environ if env is None else env
        default_url, default_model, key_variable = DEFAULTS[provider]
        base_url = env.get("ARES_LLM_BASE_URL", "").strip() or default_url
        raw_timeout = env.get("ARES_LLM_TIMEOUT_S", "60")
        try:
            timeout = float(raw_timeout)
        except ValueError:
            raise ConfigError(f"ARES_LLM_TIMEOUT_S must be a number of seconds "
                              f"(got {raw_timeout!r})") from None
        settings = cls(base_url=base_url, api_key=api_key_from_env(env, key_variable),
                       model=env.get("ARES_LLM_MODEL") or default_model, timeout_s=timeout)
        settings.validate()
        if settings.api_key is None and base_url == default_url:
            raise ConfigError(f"no API key for {base_url}: set ARES_LLM_API_KEY, "
                              f"ARES_LLM_API_KEY_FILE or {key_variable}")
        return settings

    def validate(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"ARES_LLM_BASE_URL must start with http:// or https:// "
                              f"(got {self.base_url!r})")
        if self.timeout_s <= 0:
            raise ConfigError("ARES_LLM_TIMEOUT_S must be positive")
        if not self.model:
            raise ConfigError("ARES_LLM_MODEL is empty")

    def redact(self, text: str) -> str:
        """``text`` with the key blanked out (for echoed bodies and SDK messages)."""
        return text.replace(self.api_key, "<redacted>") if self.api_key else text


def api_key_from_env(env: Mapping[str, str], fallback_variable: str) -> str | None:
    """``ARES_LLM_API_KEY``, or the stripped contents of ``ARES_LLM_API_KEY_FILE`` (a
    mounted secret), or ``fallback_variable``; both ARES_ variables set is ambiguous."""
    key = env.get("ARES_LLM_API_KEY") or None
    path = env.get("ARES_LLM_API_KEY_FILE") or None
    if key and path:
        raise ConfigError("set ARES_LLM_API_KEY or ARES_LLM_API_KEY_FILE, not both")
    if path:
        try:
            key = Path(path).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"ARES_LLM_API_KEY_FILE {path!r} cannot be read: "
                              f"{e.strerror or type(e).__name__}") from None
        if not key:
            raise ConfigError(f"ARES_LLM_API_KEY_FILE {path!r} is empty")
        return key
    return key or env.get(fallback_variable) or None


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for: ``retry-after-ms`` or ``Retry-After`` (seconds);
    ``None`` for an HTTP date or garbage (the retry policy's backoff applies)."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            continue
    return None


def status_error(label: str, settings: LlmSettings, status: int, body: object,
                 headers: Mapping[str, str] | None) -> LlmError:
    """An HTTP error answer as our error: retriable or not by its status."""
    text = body if isinstance(body, str) else json.dumps(body, default=str)
    detail = settings.redact(text.strip())[:_BODY_ECHO]
    message = f"{label} answered HTTP {status}: {detail}"
    if status in RETRIABLE_STATUS or status >= 500:
        return LlmUnavailableError(message, retry_after_s(headers))
    return LlmRequestError(message, status)


def unreadable(label: str, settings: LlmSettings, what: str, detail: object) -> LlmRequestError:
    return LlmRequestError(f"{label} answered something that is not {what} "
                           f"({settings.redact(str(detail))[:_BODY_ECHO]})")


def transport_error(label: str, settings: LlmSettings, error: BaseException) -> LlmError:
    """Timeouts and connection failures (also mid-stream): retriable. The message names
    the error class and its text only (no headers, so no key)."""
    return LlmUnavailableError(f"{label} unreachable: {type(error).__name__}: "
                               f"{settings.redact(str(error))}")


def import_sdk(module: str, extra: str) -> Any:
    """The SDK module, or a ConfigError telling how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"the {module!r} package is not installed: "
                          f"pip install 'ares-mesh[{extra}]'") from None


def parse_arguments(name: str, raw: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments; anything but a JSON object is the model's error."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError as e:
        raise LlmRequestError(f"the model called tool {name!r} with arguments that are not "
                              f"JSON ({e}): {raw[:_BODY_ECHO] if raw else raw!r}") from None
    if not isinstance(value, dict):
        raise LlmRequestError(f"the model called tool {name!r} with arguments that are not "
                              f"a JSON object: {raw!r:.{_BODY_ECHO}}")
    return value


def to_openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The neutral conversation in chat-completions form."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            out.append({"role": "tool", "tool_call_id": message["tool_call_id"],
                        "content": message.get("content") or ""})
        elif role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
            calls = message.get("tool_calls") or ()
            if calls:
                item["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"],
                                  "arguments": json.dumps(dict(c.get("arguments") or {}))}}
                    for c in calls]
                if not item["content"]:
                    item["content"] = None
            out.append(item)
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": dict(t.parameters)}}
            for t in tools]


class SdkProvider:
    """What the official-SDK providers share: settings checked up front, one SDK client
    made on first use and released by ``close()``, ``complete()`` as a one-message chat.
    Subclasses name the provider, its SDK module and how to build its client."""

    provider = ""
    sdk_module = ""
    client_class = ""  # the SDK's async client, e.g. AsyncOpenAI

    def __init__(self, settings: LlmSettings) -> None:
        settings.validate()
        import_sdk(self.sdk_module, self.sdk_module)
        self._settings = settings
        self._label = f"LLM provider {settings.base_url}"
        self._client: Any = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        return cls(LlmSettings.from_env(env, provider=cls.provider))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(base_url={self._settings.base_url!r}, "
                f"model={self.default_model!r})")

    @property
    def name(self) -> str:
        return self.provider

    @property
    def default_model(self) -> str:
        return self._settings.model

    @property
    def settings(self) -> LlmSettings:
        return self._settings

    def with_model(self, model: str) -> Self:
        return type(self)(replace(self._settings, model=model))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _open(self) -> Any:
        """The SDK's async client: its own retries off (the caller's RetryPolicy retries,
        honouring Retry-After)."""
        if self._client is None:
            sdk = import_sdk(self.sdk_module, self.sdk_module)
            self._client = getattr(sdk, self.client_class)(
                base_url=self._settings.base_url, api_key=self._settings.api_key or NO_KEY,
                max_retries=0, timeout=self._settings.timeout_s)
        return self._client

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        response = await self.chat([user(prompt)], model=model, **params)
        return LlmResult(response.text, response.prompt_tokens, response.completion_tokens,
                         response.model)

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[ToolSpec] = (), model: str | None = None,
                   on_delta: DeltaSink | None = None, **params: Any) -> ChatResponse:
        raise NotImplementedError

    def _check(self, messages: Sequence[Mapping[str, Any]]) -> None:
        try:
            check_messages(messages)
        except ValueError as e:
            raise LlmRequestError(f"{self._label}: {e}") from None


class OpenAIProvider(SdkProvider):
    """One ``AsyncOpenAI`` client per provider, made on first use; ``close()`` releases
    it. Call parameters (``temperature``, ``max_tokens``...) go into the request body as
    given."""

    provider = "openai"
    sdk_module = "openai"
    client_class = "AsyncOpenAI"

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[ToolSpec] = (), model: str | None = None,
                   on_delta: DeltaSink | None = None, **params: Any) -> ChatResponse:
        self._check(messages)
        model = model or self._settings.model
        request: dict[str, Any] = {"model": model, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = to_openai_tools(tools)
        if params:
            # Into the body as given: the SDK's signature lags behind compatible servers.
            request["extra_body"] = dict(params)
        sdk = import_sdk("openai", "openai")
        import httpx2

        try:
            if on_delta is None:
                completion = await self._open().chat.completions.create(**request)
                return self._parse(completion, model)
            stream = await self._open().chat.completions.create(
                **request, stream=True, stream_options={"include_usage": True})
            try:
                return await self._assemble(stream, model, on_delta)
            finally:
                await stream.close()
        except sdk.APIResponseValidationError as e:
            raise unreadable(self._label, self._settings, "a chat completion",
                             f"{e.message}: {e.body}") from None
        except sdk.APIStatusError as e:
            raise status_error(self._label, self._settings, e.status_code,
                               e.body if e.body is not None else e.message,
                               e.response.headers) from None
        except sdk.APIConnectionError as e:
            cause = e.__cause__ or e
            raise transport_error(self._label, self._settings, cause) from None
        except sdk.APIError as e:  # an error chunk inside a 200 stream: the server's fault
            detail = json.dumps(e.body if e.body is not None else e.message, default=str)
            raise LlmUnavailableError(f"{self._label} failed mid-stream: "
                                      f"{self._settings.redact(detail)[:_BODY_ECHO]}") from None
        except httpx2.TransportError as e:
            raise transport_error(self._label, self._settings, e) from None
        except json.JSONDecodeError as e:  # a 200 whose body is not JSON
            raise unreadable(self._label, self._settings, "a chat completion",
                             f"{type(e).__name__}: {e}") from None

    def _parse(self, completion: Any, model: str) -> ChatResponse:
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise unreadable(self._label, self._settings, "a chat completion",
                             f"no choices in {describe(completion)}")
        try:
            choice = choices[0]
            message = choice.message
            content = message.content
            calls = tuple(
                ToolCallRequest(call.id, call.function.name,
                                parse_arguments(call.function.name, call.function.arguments))
                for call in (message.tool_calls or ()))
            finish = getattr(choice, "finish_reason", None)
            usage = getattr(completion, "usage", None)
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        except (AttributeError, TypeError, ValueError) as e:
            raise unreadable(self._label, self._settings, "a chat completion",
                             f"{type(e).__name__}: {e}: {describe(completion)}") from None
        if content is None and not calls:
            log.warning("%s returned no content (finish_reason=%s)", self._label, finish)
        return ChatResponse(content if isinstance(content, str) else "", calls,
                            prompt_tokens, completion_tokens,
                            str(getattr(completion, "model", None) or model),
                            _stop(finish), finish)

    async def _assemble(self, stream: Any, model: str, on_delta: DeltaSink) -> ChatResponse:
        """The streamed chunks as one response: text deltas passed on as they come, tool
        calls put together by index, usage from the final chunk."""
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        prompt_tokens = completion_tokens = 0
        answered_model = model
        async for chunk in stream:
            answered_model = getattr(chunk, "model", None) or answered_model
            usage = getattr(chunk, "usage", None)
            if usage is not None:
                prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
                completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
            for choice in getattr(chunk, "choices", None) or ():
                delta = choice.delta
                if choice.finish_reason:
                    finish = choice.finish_reason
                if delta is None:
                    continue
                if delta.content:
                    text.append(delta.content)
                    await on_delta(delta.content)
                for part in delta.tool_calls or ():
                    call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = part.id or call["id"]
                    if part.function is not None:
                        call["name"] += part.function.name or ""
                        call["arguments"] += part.function.arguments or ""
        tool_calls = tuple(
            ToolCallRequest(c["id"], c["name"], parse_arguments(c["name"], c["arguments"]))
            for _, c in sorted(calls.items()))
        return ChatResponse("".join(text), tool_calls, prompt_tokens, completion_tokens,
                            str(answered_model), _stop(finish), finish)


def _stop(finish: str | None) -> str:
    return _FINISH.get(finish or "", STOP_OTHER)


def describe(value: Any) -> str:
    """An SDK model as JSON for an error message (whatever it holds)."""
    try:
        return json.dumps(value.modeldescribe(warnings=False), default=str)
    except Exception:
        return repr(value)


# The name of the hand-written client this replaces.
OpenAICompatibleProvider = OpenAIProvider
