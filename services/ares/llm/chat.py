"""The chat port: a conversation in, one typed assistant turn out.

Messages are plain JSON dicts in one provider-neutral shape (each provider translates them
at its edge), so that a conversation can be recorded, hashed and replayed as it is:

* ``{"role": "system" | "user", "content": str}``
* ``{"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments"}]}``
  (``tool_calls`` optional; ``arguments`` a JSON object, already parsed)
* ``{"role": "tool", "tool_call_id": str, "name": str, "content": str}``: a tool's result

A provider that streams (``on_delta`` given) calls ``on_delta(text)`` with each piece of
assistant text as it arrives and still returns the whole ``ChatResponse``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ares.events.wire.canonical import canonical_json

ROLES = ("system", "user", "assistant", "tool")

# Why the model stopped, normalised over the providers (their own word is kept in
# ``ChatResponse.provider_stop_reason``).
STOP_END = "end"  # a final answer
STOP_TOOL_CALLS = "tool_calls"  # it asks for tools
STOP_MAX_TOKENS = "max_tokens"  # cut off by the token limit
STOP_OTHER = "other"  # content filter, refusal...

DeltaSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: its name, what it does, and its arguments as a JSON
    Schema object."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": dict(self.parameters)}


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One tool call the model asked for. ``id`` is the provider's (echoed back with the
    result)."""

    id: str
    name: str
    arguments: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCallRequest:
        arguments = data.get("arguments")
        return cls(str(data["id"]), str(data["name"]),
                   dict(arguments) if isinstance(arguments, Mapping) else {})


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """One assistant turn: its text, the tool calls it asks for, what it cost."""

    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    prompt_tokens: int
    completion_tokens: int
    model: str
    stop_reason: str = STOP_END
    provider_stop_reason: str | None = None

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_json() for call in self.tool_calls]
        return message

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "tool_calls": [c.to_json() for c in self.tool_calls],
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "model": self.model,
                "stop_reason": self.stop_reason,
                "provider_stop_reason": self.provider_stop_reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChatResponse:
        calls = data.get("tool_calls") or ()
        return cls(str(data.get("text") or ""),
                   tuple(ToolCallRequest.from_json(c) for c in calls),
                   int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0),
                   str(data.get("model") or ""), str(data.get("stop_reason") or STOP_END),
                   data.get("provider_stop_reason"))


@runtime_checkable
class ChatProvider(Protocol):
    """An LLM endpoint that holds conversations. ``name`` goes into usage records
    ("openai", "anthropic", "offline"); ``model=None`` means the provider's default model."""

    @property
    def name(self) -> str: ...

    @property
    def default_model(self) -> str: ...

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[ToolSpec] = (), model: str | None = None,
                   on_delta: DeltaSink | None = None, **params: Any) -> ChatResponse: ...


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def system(content: str) -> dict[str, Any]:
    return {"role": "system", "content": content}


def tool_result(call: ToolCallRequest, content: str) -> dict[str, Any]:
    """The message that gives a tool's result (text: JSON for structured results) back."""
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """``ValueError`` naming the first message that is not of the shape above."""
    if not messages:
        raise ValueError("a chat needs at least one message")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"message {index} is a {type(message).__name__}, not a dict")
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"message {index}: role must be one of {', '.join(ROLES)} "
                             f"(got {role!r})")
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise ValueError(f"message {index}: a tool message needs its tool_call_id")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"message {index}: content must be a str")


def conversation_hash(messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec],
                      params: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical request (messages, tools, parameters): recorded with
    each turn and checked on replay, as ``prompt_hash`` is for ``ctx.llm``."""
    request = {"messages": [dict(m) for m in messages],
               "tools": [t.to_json() for t in tools], "params": dict(params)}
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()
