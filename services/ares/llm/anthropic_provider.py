"""Anthropic's Messages API through the official ``anthropic`` SDK: tool use and
streaming, translated to and from the neutral conversation of ``ares.llm.chat``.

As for OpenAI: imported lazily (``pip install 'ares-mesh[anthropic]'``), no SDK retries
(``ctx.llm`` retries, honouring Retry-After), errors translated once here (429, 5xx, 529
overloaded, timeouts, lost connections: retriable; other statuses and unreadable answers:
not), and the key never echoed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ares.llm.base import LlmRequestError, LlmUnavailableError
from ares.llm.chat import (
    STOP_END,
    STOP_MAX_TOKENS,
    STOP_OTHER,
    STOP_TOOL_CALLS,
    ChatResponse,
    DeltaSink,
    ToolCallRequest,
    ToolSpec,
)
from ares.llm.openai_provider import (
    SdkProvider,
    describe,
    import_sdk,
    parse_arguments,
    status_error,
    transport_error,
    unreadable,
)

DEFAULT_MAX_TOKENS = 1024  # the API requires max_tokens; ours when the call gives none
_STOP = {"end_turn": STOP_END, "stop_sequence": STOP_END, "tool_use": STOP_TOOL_CALLS,
         "max_tokens": STOP_MAX_TOKENS}
# Error events inside a 200 stream carry a type, not a status.
_RETRIABLE_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error",
                              "timeout_error"})


def to_anthropic(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None,
                                                                  list[dict[str, Any]]]:
    """(system, messages): system messages joined into the ``system`` parameter, tool
    calls as ``tool_use`` blocks, tool results as ``tool_result`` blocks of one user
    message (the API wants user and assistant turns to alternate)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        content = message.get("content") or ""
        if role == "system":
            system.append(content)
            continue
        if role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["name"],
                        "input": dict(c.get("arguments") or {})}
                       for c in message.get("tool_calls") or ()]
            out.append({"role": "assistant", "content": blocks or content})
            continue
        block: dict[str, Any] = (
            {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": content}
            if role == "tool" else {"type": "text", "text": content})
        previous = out[-1] if out else None
        if previous is not None and previous["role"] == "user":
            if isinstance(previous["content"], str):
                previous["content"] = [{"type": "text", "text": previous["content"]}]
            previous["content"].append(block)
        else:
            out.append({"role": "user", "content": content if role == "user" else [block]})
    return ("\n\n".join(system) if system else None), out


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description,
             "input_schema": dict(t.parameters)} for t in tools]


class AnthropicProvider(SdkProvider):
    """One ``AsyncAnthropic`` client per provider, made on first use; ``close()``
    releases it. ``max_tokens`` defaults to 1024; other parameters go into the body."""

    provider = "anthropic"
    sdk_module = "anthropic"
    client_class = "AsyncAnthropic"

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[ToolSpec] = (), model: str | None = None,
                   on_delta: DeltaSink | None = None, **params: Any) -> ChatResponse:
        self._check(messages)
        model = model or self._settings.model
        params = dict(params)
        system, wire = to_anthropic(messages)
        if not wire:
            raise LlmRequestError(f"{self._label}: a conversation needs a user message")
        request: dict[str, Any] = {"model": model, "messages": wire,
                                   "max_tokens": int(params.pop("max_tokens",
                                                                DEFAULT_MAX_TOKENS))}
        if system is not None:
            request["system"] = system
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        if params:
            request["extra_body"] = params
        sdk = import_sdk("anthropic", "anthropic")
        import httpx2

        try:
            if on_delta is None:
                message = await self._open().messages.create(**request)
                return self._parse(message, model)
            stream = await self._open().messages.create(**request, stream=True)
            try:
                return await self._assemble(stream, model, on_delta)
            finally:
                await stream.close()
        except sdk.APIResponseValidationError as e:
            raise unreadable(self._label, self._settings, "a message",
                             f"{e.message}: {e.body}") from None
        except sdk.APIStatusError as e:
            body = e.body if e.body is not None else e.message
            if e.status_code < 400:  # an error event inside a 200 stream
                detail = self._settings.redact(json.dumps(body, default=str))[:300]
                message = f"{self._label} failed mid-stream: {detail}"
                if (e.type or "") in _RETRIABLE_TYPES:
                    raise LlmUnavailableError(message) from None
                raise LlmRequestError(message) from None
            raise status_error(self._label, self._settings, e.status_code, body,
                               e.response.headers) from None
        except sdk.APIConnectionError as e:
            raise transport_error(self._label, self._settings, e.__cause__ or e) from None
        except httpx2.TransportError as e:
            raise transport_error(self._label, self._settings, e) from None
        except json.JSONDecodeError as e:  # a 200 whose body is not JSON
            raise unreadable(self._label, self._settings, "a message",
                             f"{type(e).__name__}: {e}") from None

    def _parse(self, message: Any, model: str) -> ChatResponse:
        content = getattr(message, "content", None)
        if not isinstance(content, list):
            raise unreadable(self._label, self._settings, "a message",
                             f"no content blocks in {describe(message)}")
        text: list[str] = []
        calls: list[ToolCallRequest] = []
        try:
            for block in content:
                kind = getattr(block, "type", None)
                if kind == "text":
                    text.append(block.text)
                elif kind == "tool_use":
                    arguments = block.input
                    if not isinstance(arguments, dict):
                        raise LlmRequestError(f"the model called tool {block.name!r} with "
                                              f"an input that is not a JSON object")
                    calls.append(ToolCallRequest(block.id, block.name, arguments))
            usage = getattr(message, "usage", None)
            prompt_tokens = int(getattr(usage, "input_tokens", 0) or 0)
            completion_tokens = int(getattr(usage, "output_tokens", 0) or 0)
        except (AttributeError, TypeError) as e:
            raise unreadable(self._label, self._settings, "a message",
                             f"{type(e).__name__}: {e}: {describe(message)}") from None
        stop = getattr(message, "stop_reason", None)
        return ChatResponse("".join(text), tuple(calls), prompt_tokens, completion_tokens,
                            str(getattr(message, "model", None) or model),
                            _STOP.get(stop or "", STOP_OTHER), stop)

    async def _assemble(self, stream: Any, model: str, on_delta: DeltaSink) -> ChatResponse:
        """Stream events as one response: text deltas passed on as they come, tool inputs
        put together from their JSON deltas, usage from message_start and message_delta."""
        text: list[str] = []
        blocks: dict[int, dict[str, str]] = {}
        stop: str | None = None
        prompt_tokens = completion_tokens = 0
        answered_model = model
        async for event in stream:
            kind = getattr(event, "type", None)
            if kind == "message_start":
                answered_model = event.message.model or answered_model
                usage = event.message.usage
                prompt_tokens = int(getattr(usage, "input_tokens", 0) or 0)
                completion_tokens = int(getattr(usage, "output_tokens", 0) or 0)
            elif kind == "content_block_start":
                block = event.content_block
                if block.type == "tool_use":
                    blocks[event.index] = {"id": block.id, "name": block.name, "json": ""}
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    text.append(delta.text)
                    await on_delta(delta.text)
                elif delta.type == "input_json_delta" and event.index in blocks:
                    blocks[event.index]["json"] += delta.partial_json
            elif kind == "message_delta":
                stop = event.delta.stop_reason or stop
                usage = event.usage
                completion_tokens = int(getattr(usage, "output_tokens", 0) or completion_tokens)
                prompt_tokens = int(getattr(usage, "input_tokens", None) or prompt_tokens)
        calls = tuple(ToolCallRequest(b["id"], b["name"], parse_arguments(b["name"], b["json"]))
                      for _, b in sorted(blocks.items()))
        return ChatResponse("".join(text), calls, prompt_tokens, completion_tokens,
                            str(answered_model), _STOP.get(stop or "", STOP_OTHER), stop)
