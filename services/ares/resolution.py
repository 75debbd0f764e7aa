"""Resolving an in-doubt tool call: the code path of ``ares agents resolve`` and of the HTTP
API's ``POST /agents/{id}/calls/{call_id}/resolve``.

Read the agent's stream, check that the call is in doubt now (``NotResolvableError`` says
why not, ``NoSuchAgentError`` when there is no agent), and append ``tool.call.resolved``
through the stream's owner at the version checked: a resolution never lands on a stream
that moved after the check. A conflict (the stream moved) is read and checked again, up to
``attempts`` times; then ``ConflictError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ares.agents.records import resolution_event
from ares.client import Client
from ares.errors import ConflictError
from ares.events.model import Event
from ares.views.agents import agent_builder

ATTEMPTS = 3


async def resolve_call(client: Client, read: Callable[[str], Awaitable[list[Event]]],
                       agent_id: str, call_id: str, as_: str, *, result: Any = None,
                       note: str | None = None, module: str, by: str = "operator",
                       reply_timeout_s: float | None = None, attempts: int = ATTEMPTS,
                       deadline_s: float | None = None) -> int:
    """Resolve ``call_id`` of ``agent_id`` as ``as_``; the stream's version after it.
    ``read(agent_id)``: every event of the stream, in version order; ``deadline_s``: as
    ``Client.send``'s (none: kept until an owner takes it; its expected version keeps a late
    one from landing on a stream that moved)."""
    for attempt in range(1, attempts + 1):
        events = await read(agent_id)
        call = agent_builder(events, agent_id).check_resolvable(call_id)
        event = resolution_event(call_id, as_, result=result, note=note,
                                 task_id=call.task_id, tool=call.tool, module=module, by=by)
        expected = events[-1].version if events else 0
        try:
            return await client.append(agent_id, [event], expected, reply_timeout_s,
                                       deadline_s)
        except ConflictError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")
