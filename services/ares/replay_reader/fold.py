"""The folded state of a stream after each event: the runtime's lifecycle, and the agent's
own state when its kind is registered here.

It is exactly what recovery rebuilds (``ares.runtime_manager.replay.AgentReplay``): the
lifecycle through ``ares.lifecycle.state.fold``, and an agent instance created from
the lifecycle's kind and config, ``apply``-ed every event of the stream in order (the
events before ``agent.started`` are held until the kind is known, as recovery applies every
replayed event). The agent's state is what its ``snapshot()`` says: the same JSON the
runtime writes into ``ares.snapshots``, so a replayed state can be compared with a
snapshot field by field.

When the kind is not registered in this process (a team's own kind the replay reader does
not import) or its config is rejected, the state is the lifecycle alone and ``agent_note``
says why: a replay never fails because of an agent it cannot build.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ares.agents.agent import Agent
from ares.agents.errors import AgentConfigError, AgentRegistryError, UnknownAgentKindError
from ares.agents.registry import AgentRegistry
from ares.events.model import Event
from ares.lifecycle.state import AgentLifecycle, fold, fold_all

log = logging.getLogger(__name__)

# Events met before the kind is known (normally none: agent.started comes first).
MAX_EARLY_EVENTS = 10_000


@dataclass(frozen=True, slots=True)
class FoldedState:
    """The state of a stream after ``version``."""

    version: int
    lifecycle: AgentLifecycle
    agent: Mapping[str, Any] | None  # agent.snapshot(); None: no agent instance
    agent_note: str | None = None  # why there is no agent state, when there is none

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "lifecycle": self.lifecycle.to_json(),
                "agent": None if self.agent is None else dict(self.agent),
                "agent_note": self.agent_note}


class StateFolder:
    """Folds one stream's events, one at a time; ``state()`` is computed on demand (an
    agent's ``snapshot()`` may copy its whole history)."""

    def __init__(self, stream_id: str, registry: AgentRegistry | None = None) -> None:
        self.stream_id = stream_id
        self._registry = registry
        self.lifecycle = AgentLifecycle(stream_id)
        self.agent: Agent | None = None
        self._early: list[Event] = []
        self._note: str | None = None if registry is not None else "no agent registry"
        self._failed = False

    @property
    def version(self) -> int:
        return self.lifecycle.version

    def apply(self, event: Event) -> None:
        self.lifecycle = fold(self.lifecycle, event)
        if self.agent is not None:
            self._apply_to_agent(event)
            return
        if self._failed or self._registry is None:
            return
        if not self.lifecycle.kind:
            if len(self._early) < MAX_EARLY_EVENTS:
                self._early.append(event)
            return
        self._create(event)

    def apply_many(self, events: Sequence[Event]) -> None:
        """``apply`` for consecutive events: one lifecycle fold for the run (``fold_all``),
        the same states as one by one."""
        i = 0
        while i < len(events) and self.agent is None and not self._failed \
                and self._registry is not None:
            self.apply(events[i])  # until the agent exists: its creation point matters
            i += 1
        rest = events[i:]
        if not rest:
            return
        self.lifecycle = fold_all(self.lifecycle, rest)
        for event in rest:
            if self.agent is None:
                return
            self._apply_to_agent(event)

    def state(self) -> FoldedState:
        agent_state: Mapping[str, Any] | None = None
        note = self._note
        if self.agent is not None:
            try:
                agent_state = self.agent.snapshot()
            except Exception as exc:  # a user's agent: never let it break the replay
                note = f"{self.lifecycle.kind}.snapshot() failed: {type(exc).__name__}: {exc}"
        elif note is None and not self.lifecycle.kind:
            note = "no agent.started yet: the kind is unknown"
        return FoldedState(self.version, self.lifecycle, agent_state, note)

    def _create(self, event: Event) -> None:
        assert self._registry is not None
        kind = self.lifecycle.kind
        try:
            config = self.lifecycle.config
            self.agent = self._registry.create(kind, self.stream_id,
                                               config if isinstance(config, Mapping) else {})
        except UnknownAgentKindError:
            self._give_up(f"kind {kind!r} is not registered in this process: the state is "
                          "the lifecycle alone")
            return
        except (AgentConfigError, AgentRegistryError, ValueError) as exc:
            self._give_up(f"kind {kind!r}: the agent could not be built: {exc}")
            return
        early, self._early = self._early, []
        for earlier in (*early, event):
            self._apply_to_agent(earlier)
            if self.agent is None:
                return

    def _apply_to_agent(self, event: Event) -> None:
        assert self.agent is not None
        try:
            self.agent.apply(event)
        except Exception as exc:  # apply must be a pure fold; say so instead of crashing
            log.warning("%s.apply failed on %s v%d: %s", self.lifecycle.kind, event.type,
                        event.version, exc)
            self.agent = None
            self._give_up(f"{self.lifecycle.kind}.apply() failed at version {event.version}: "
                          f"{type(exc).__name__}: {exc}")

    def _give_up(self, note: str) -> None:
        self._failed = True
        self._early = []
        self._note = note
