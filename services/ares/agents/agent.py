"""``Agent``: what users subclass. ``Task``: what a handler is given."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ares.events.model import Event
from ares.events.wire.canonical import parse_json
from ares.lifecycle import events as ev

if TYPE_CHECKING:
    from ares.agents.context import Context


@dataclass(frozen=True, slots=True)
class Task:
    """One task: its id (unique per stream) and its decoded JSON input."""

    task_id: str
    input: Any = None

    @classmethod
    def from_event(cls, event: Event) -> Task:
        """The task of a ``task.assigned`` event."""
        if event.type != ev.TASK_ASSIGNED:
            raise ValueError(f"a Task comes from a task.assigned event, not {event.type!r}")
        return cls(str(event.payload["task_id"]),
                   parse_json(str(event.payload.get("input_json", "null"))))


class Agent:
    """Base class of agent kinds.

    Subclasses set ``kind`` and implement ``handle``. Everything a handler does that has an
    effect or costs money goes through ``ctx`` (``ctx.step``, ``ctx.llm``, ``ctx.tool``), so
    that a re-run after a crash returns recorded results instead of doing it again.

    State: the runtime rebuilds an agent after a crash by ``restore(snapshot)`` (when a
    snapshot exists) and then ``apply(event)`` for every event after it, in order; it also
    calls ``apply`` for every event appended while the agent runs (including the ones the
    SDK appends for the agent). ``apply`` must be a pure fold: no I/O, no effects.

    Config: ``__init__`` receives the agent's config; override ``configure`` to validate it
    and raise ``AgentConfigError`` naming the bad setting.
    """

    kind: ClassVar[str] = ""

    def __init__(self, agent_id: str, config: Mapping[str, Any] | None = None) -> None:
        self.agent_id = agent_id
        self.config: dict[str, Any] = dict(config or {})
        self.configure(self.config)

    def configure(self, config: Mapping[str, Any]) -> None:
        """Validate ``config`` and keep what you need; raise ``AgentConfigError`` if bad."""

    async def handle(self, task: Task, ctx: Context) -> Any:
        """Do the task; the return value (JSON-able) is recorded as its output."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle()")

    def apply(self, event: Event) -> None:
        """Fold one event of this agent's stream into its state (default: nothing)."""

    def snapshot(self) -> dict[str, Any]:
        """The agent-owned state as JSON-able data, consistent with ``apply`` so far."""
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back what ``snapshot`` returned (before the events after it are applied)."""

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(agent_id={self.agent_id!r}, kind={self.kind!r})"
