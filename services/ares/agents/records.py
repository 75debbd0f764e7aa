"""The events the SDK appends, in one place: their types and payload shapes.

Typed payloads (``ares.v1.Event`` records) carry exactly their record's fields; the SDK's
own event types (``step.failed``, ``llm.validation``, ``task.resumed``,
``tool.call.resolved``, ``agent.log``) are JSON payloads whose shapes are documented here and
in docs/sdk.md.

Every recorded call (step, llm, tool intent, step failure) carries its position in the
handler's sequence of calls as metadata ``ares.position`` (a decimal string): replay matches
a call on (task_id, name, occurrence) and checks the position, which is what detects a
handler that asks for its steps in another order. Positions are assigned when a call is
*requested*, so steps run concurrently (asyncio.TaskGroup) keep their positions even when
they complete, and are recorded, out of order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ares.events.model import NewEvent
from ares.events.wire.canonical import canonical_round_trip

# Typed records (schemas/ares.v1.Event.avsc).
STEP_COMPLETED = "step.completed"
LLM_CALL = "llm.call"
TOOL_INTENT = "tool.call.intent"
TOOL_COMPLETED = "tool.call.completed"
TOOL_FAILED = "tool.call.failed"
TOOL_IN_DOUBT = "tool.in_doubt"
# JSON payloads defined by the SDK.
STEP_FAILED = "step.failed"
LLM_VALIDATION = "llm.validation"  # the verdict on one attempt of a validated ctx.llm
LLM_BUDGET = "llm.budget"  # a ctx.llm that waited for the fleet budget: how long
LLM_RESPONSE = "llm.response"  # a ctx.chat turn whole (tool calls, stop reason), beside llm.call
TASK_RESUMED = "task.resumed"
TOOL_RESOLVED = "tool.call.resolved"
AGENT_LOG = "agent.log"

POSITION_KEY = "ares.position"
# On the records of one attempt of a ctx.llm with validate/retries: its number (1-based).
ATTEMPT_KEY = "ares.attempt"

# The kinds of recorded calls; a position holds exactly one.
STEP = "step"
LLM = "llm"
TOOL = "tool"
WAIT = "wait"  # wait.started / wait.completed (ares.agents.waits)
DELEGATE = "delegate"  # delegation.dispatched (ares.agents.delegation)

RESOLUTIONS = ("done", "retry", "skip")


@dataclass(frozen=True, slots=True)
class AgentAlert:
    """An alert that goes out with an append, in the same transaction (``AgentSink``): it
    is raised exactly when its records are, once (e.g. ``approval.requested``)."""

    kind: str
    message: str
    severity: str = "warning"
    details: Mapping[str, str] = field(default_factory=dict)


def position_metadata(position: int) -> dict[str, str]:
    return {POSITION_KEY: str(position)}


def to_json_value(value: Any) -> tuple[Any, str]:
    """(the value as replay will return it, its canonical JSON text); TypeError/ValueError
    for anything JSON cannot hold (sets, objects, NaN)."""
    text, parsed = canonical_round_trip(value)
    return parsed, text


def lenient_json(value: Any) -> Any:
    """A JSON-able rendering of anything (non-JSON leaves become their repr): for records
    that document (arguments, log fields) rather than replay."""
    try:
        return json.loads(json.dumps(value, default=repr, allow_nan=False, sort_keys=True))
    except (TypeError, ValueError):
        return repr(value)


def qualified_name(error: BaseException) -> str:
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


def idempotency_key(agent_id: str, task_id: str, name: str, occurrence: int) -> str:
    """The stable key of a tool call: the same on every re-run of the task."""
    return hashlib.sha256(f"{agent_id}/{task_id}/{name}/{occurrence}".encode()).hexdigest()


def call_id(task_id: str, name: str, occurrence: int, attempt: int) -> str:
    """Unique per stream: one per intent (a retried in-doubt call gets attempt + 1)."""
    return f"{task_id}:{name}:{occurrence}:{attempt}"


def resolution_event(call_id: str, as_: str, *, result: Any = None, note: str | None = None,
                     task_id: str | None = None, tool: str | None = None,
                     module: str = "operator", by: str | None = None) -> NewEvent:
    """``tool.call.resolved``: an operator's (or reconcile's) verdict on an in-doubt call.

    ``as_``: ``done`` (the call happened; ``result`` is what it returned — null if unknown),
    ``retry`` (it did not happen; execute it again under a new intent), ``skip`` (do not
    execute it; the handler's ``ctx.tool`` raises ``ToolSkipped``).
    """
    if as_ not in RESOLUTIONS:
        raise ValueError(f"a resolution is one of {', '.join(RESOLUTIONS)} (got {as_!r})")
    value, _ = to_json_value(result)
    payload: dict[str, Any] = {"call_id": call_id, "as": as_, "result": value, "note": note,
                               "task_id": task_id, "tool": tool, "by": by or module}
    return NewEvent(TOOL_RESOLVED, module, payload)


def int_field(payload: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = payload.get(name, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default
