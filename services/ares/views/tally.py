"""The one read model of an agent's life: its lifecycle plus what is counted over it.

``AgentTally`` is folded incrementally, a batch at a time, so it can be stored and
continued: the replay reader's projection persists it as the ``agents`` row
(``replay_reader.projection.AgentRow`` is this model plus its column mapping) and the
views build ``AgentView`` on it (``views.agents``). Both therefore show the same status,
deaths, resurrections and token counts, whichever computes them.

The lifecycle is the runtime's own fold (``ares.lifecycle.state``); deaths and
resurrections are counted from the transitions that fold reports, token figures from the
SDK's records (``ares.agents.records``). Teams: ``parent_id`` is the lifecycle's (the agent
that delegated the latest delegated task), ``delegated_to`` every agent this one ever
delegated to (``delegation.dispatched``), in dispatch order, each once: the lifecycle keeps
only the delegations still open, the team's tree (``views.team``) needs them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Self

from ares.agents import records as r
from ares.events.model import Event
from ares.lifecycle import state as lc
from ares.lifecycle import transitions as tr


@dataclass(frozen=True, slots=True)
class AgentTally:
    """One agent: its lifecycle, and counters over its whole stream."""

    lifecycle: lc.AgentLifecycle
    deaths: int = 0  # agent.dead events over the stream's life
    resurrections: int = 0  # incarnations the runtime started after a death
    llm_calls: int = 0
    tokens_prompt: int = 0
    tokens_completion: int = 0
    tokens_reused: int = 0  # re-used from the journal by recoveries (task.resumed)
    resumes: int = 0
    delegated_to: tuple[str, ...] = ()  # child ids of delegation.dispatched, first seen order

    @property
    def agent_id(self) -> str:
        return self.lifecycle.agent_id

    @property
    def parent_id(self) -> str | None:
        return self.lifecycle.parent_id

    def fold(self, events: Iterable[Event]) -> Self:
        """This tally after ``events`` of its stream, in log order (one lifecycle fold for
        the batch: the projector folds thousands of events at a time)."""
        folder = lc.Folder(self.lifecycle)
        counts = self._counts()
        children = _Children(self.delegated_to)
        for event in events:
            transition = folder.step(event)
            _count(counts, event, transition)
            children.add(transition)
        return replace(self, lifecycle=folder.freeze(), delegated_to=children.ids(), **counts)

    def step(self, event: Event) -> tuple[Self, tr.Transition | None]:
        """``fold`` of one event, with the transition it was (``None``: not lifecycle)."""
        folder = lc.Folder(self.lifecycle)
        counts = self._counts()
        transition = folder.step(event)
        _count(counts, event, transition)
        children = _Children(self.delegated_to)
        children.add(transition)
        return (replace(self, lifecycle=folder.freeze(), delegated_to=children.ids(), **counts),
                transition)

    def _counts(self) -> dict[str, int]:
        return {"deaths": self.deaths, "resurrections": self.resurrections,
                "llm_calls": self.llm_calls, "tokens_prompt": self.tokens_prompt,
                "tokens_completion": self.tokens_completion,
                "tokens_reused": self.tokens_reused, "resumes": self.resumes}


def _count(counts: dict[str, int], event: Event, transition: tr.Transition | None) -> None:
    if isinstance(transition, tr.Died):
        counts["deaths"] += 1
    elif isinstance(transition, tr.Resurrected):
        counts["resurrections"] += 1
    elif event.type == r.LLM_CALL:
        counts["llm_calls"] += 1
        counts["tokens_prompt"] += r.int_field(event.payload, "prompt_tokens")
        counts["tokens_completion"] += r.int_field(event.payload, "completion_tokens")
    elif event.type == r.TASK_RESUMED:
        counts["resumes"] += 1
        counts["tokens_reused"] += (r.int_field(event.payload, "reused_prompt_tokens")
                                    + r.int_field(event.payload, "reused_completion_tokens"))


class _Children:
    """``delegated_to`` being extended: the child ids in first-dispatch order, each once (a
    child delegated to again, or a dispatch re-read, adds nothing)."""

    def __init__(self, ids: tuple[str, ...]) -> None:
        self._ids = ids
        self._added: dict[str, None] | None = None  # built on the first dispatch only

    def add(self, transition: tr.Transition | None) -> None:
        if not isinstance(transition, tr.DelegationDispatched) or not transition.child_id:
            return
        if self._added is None:
            self._added = dict.fromkeys(self._ids)
        self._added.setdefault(transition.child_id)

    def ids(self) -> tuple[str, ...]:
        return self._ids if self._added is None else tuple(self._added)


__all__ = ["AgentTally"]
