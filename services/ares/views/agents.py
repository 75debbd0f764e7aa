"""The agent read model: what ``ares agents status`` shows of one stream.

``AgentView`` is folded from an agent's events alone, so it is the same whoever computes it
(the CLI over a Kafka scan today, the replay reader's projection later) and it survives every
restart of the runtime:

* lifecycle (status, kind, incarnation, worker, version, tasks, deaths, resurrections)
  through ``ares.views.tally.AgentTally``, the read model the replay reader's projection
  stores too, itself the runtime's own fold (``ares.lifecycle.state``): the view cannot
  disagree with the host nor with the projection;
* tokens through the SDK's ``ares.agents.ledger.token_ledger`` (spent, re-used from the
  journal after recoveries = saved, spent twice);
* tool calls in doubt through the SDK's journals (``ares.agents.journal``): a
  ``tool.in_doubt`` with neither an outcome nor a resolution;
* its team links through the tally too: ``parent_id`` (who delegated its latest delegated
  task) and ``delegated_to`` (``ares.views.team`` builds the tree of a team from them).

``AgentViewBuilder`` consumes events one at a time and keeps only what the view needs (the
lifecycle state, the token and tool records with their bulky fields dropped), so a scan of
the whole log can build every agent's view in one pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ares.agents import records as r
from ares.agents.journal import task_journals
from ares.agents.ledger import TokenLedger, token_ledger
from ares.errors import AresError
from ares.events.model import Event
from ares.lifecycle import state as lc
from ares.lifecycle import transitions as tr
from ares.views.tally import AgentTally

# Task states of the current task (``AgentView.task_state``).
RUNNING = "running"  # the agent runs and works on it
PAUSED_IN_DOUBT = "paused_in_doubt"  # waits for `ares agents resolve`
WAITING = "waiting"  # assigned, but the agent does not run (stopped, dead, quarantined...)
SUSPENDED = "suspended"  # waits durably for a signal or a timer (``AgentView.waiting_for``)

# What the token ledger reads of its records (the rest, e.g. llm outputs, is dropped).
_LEDGER_TYPES = frozenset({r.LLM_CALL, r.TASK_RESUMED})
_LEDGER_FIELDS = ("task_id", "name", "occurrence", "prompt_tokens", "completion_tokens",
                  "reused_llm_calls", "reused_prompt_tokens", "reused_completion_tokens")
# What the journals read of tool records to tell a call's state.
_TOOL_TYPES = frozenset({r.TOOL_INTENT, r.TOOL_COMPLETED, r.TOOL_FAILED, r.TOOL_IN_DOUBT,
                         r.TOOL_RESOLVED})
_TOOL_FIELDS = ("call_id", "tool", "effect", "idempotency_key", "occurrence", "task_id",
                "reason", "as", "result", "note", "by", "error", "error_type", "retriable")


class NoSuchAgentError(AresError):
    """The stream has no ``agent.started``: no agent was ever started under that id."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"no agent {agent_id!r}: its stream has no agent.started (start "
                         f"one with `ares agents start {agent_id} --kind KIND`)")
        self.agent_id = agent_id


class NotResolvableError(AresError):
    """``ares agents resolve`` named a call that is not (or no longer) in doubt."""


@dataclass(frozen=True, slots=True)
class InDoubt:
    """A tool call the agent's task is paused on, until an operator resolves it."""

    call_id: str
    task_id: str
    tool: str
    idempotency_key: str | None
    reason: str
    since: datetime | None  # when the agent reported it (the tool.in_doubt event)

    def to_json(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "task_id": self.task_id, "tool": self.tool,
                "idempotency_key": self.idempotency_key, "reason": self.reason,
                "since": _iso(self.since)}


@dataclass(frozen=True, slots=True)
class Death:
    """The agent's last recorded death (``agent.dead``)."""

    cause: str
    error_type: str | None
    error_message: str | None
    incarnation: int | None
    at: datetime

    def describe(self) -> str:
        error = ": ".join(x for x in (self.error_type, self.error_message) if x)
        return f"{self.cause} ({error})" if error else self.cause

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "error_type": self.error_type,
                "error_message": self.error_message, "incarnation": self.incarnation,
                "at": _iso(self.at)}


@dataclass(frozen=True, slots=True)
class TaskCounts:
    assigned: int = 0
    completed: int = 0
    failed: int = 0
    pending: tuple[str, ...] = ()  # task ids assigned and not finished, in run order

    def to_json(self) -> dict[str, Any]:
        return {"assigned": self.assigned, "completed": self.completed,
                "failed": self.failed, "pending": list(self.pending)}


@dataclass(frozen=True, slots=True)
class AgentView:
    agent_id: str
    kind: str
    status: str  # starting | running | stopped | dead | resurrecting | quarantined
    incarnation: int
    restarts: int  # resurrections: incarnations the runtime started after a death
    deaths: int  # agent.dead events over the stream's life
    recent_deaths: int  # deaths still counted against the restart budget
    worker: str | None
    version: int
    last_event_time: datetime | None
    last_event_type: str | None
    started_at: datetime | None  # when the current incarnation began running
    config: Any
    snapshot_version: int
    last_death: Death | None
    quarantine_reason: str | None
    current_task: str | None
    task_state: str | None  # running | paused_in_doubt | suspended | waiting (None: none)
    tasks: TaskCounts
    tokens: TokenLedger
    in_doubt: tuple[InDoubt, ...]
    waiting_for: lc.WaitingFor | None = None  # what the current task waits for, since when
    parent_id: str | None = None  # the agent that delegated its latest delegated task
    delegated_to: tuple[str, ...] = ()  # the agents it delegated to, in dispatch order

    def to_json(self) -> dict[str, Any]:
        """The document of ``ares agents status --json`` (one JSON object per agent)."""
        return {
            "agent_id": self.agent_id, "kind": self.kind, "status": self.status,
            "incarnation": self.incarnation, "restarts": self.restarts,
            "deaths": self.deaths, "recent_deaths": self.recent_deaths,
            "worker": self.worker, "version": self.version,
            "last_event_time": _iso(self.last_event_time),
            "last_event_type": self.last_event_type, "started_at": _iso(self.started_at),
            "config": self.config, "snapshot_version": self.snapshot_version,
            "last_death": None if self.last_death is None else self.last_death.to_json(),
            "quarantine_reason": self.quarantine_reason,
            "current_task": (None if self.current_task is None else
                             {"task_id": self.current_task, "state": self.task_state}),
            "tasks": self.tasks.to_json(),
            "tokens": {"spent": self.tokens.spent_tokens, "saved": self.tokens.reused_tokens,
                       **self.tokens.to_json()},
            "in_doubt": [c.to_json() for c in self.in_doubt],
            "waiting_for": (None if self.waiting_for is None
                            else self.waiting_for.to_document()),
            "parent_id": self.parent_id,
        }


class AgentViewBuilder:
    """Folds one stream's events, in stream order, into an ``AgentView``."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.is_agent = False  # an agent.started was seen
        self._tally = AgentTally(lc.AgentLifecycle(agent_id))
        self._last: Event | None = None
        self._ledger: list[Event] = []
        self._tools: list[Event] = []
        self._in_doubt_at: dict[str, datetime] = {}
        self._death: Death | None = None

    def add(self, event: Event) -> None:
        self._tally, transition = self._tally.step(event)
        self._last = event
        t = event.type
        if isinstance(transition, tr.Started):
            self.is_agent = True
        elif isinstance(transition, tr.Died):
            self._death = Death(transition.cause or "unknown", transition.error_type,
                                transition.error_message, transition.incarnation,
                                event.timestamp)
        elif t in _LEDGER_TYPES:
            self._ledger.append(_slim(event, _LEDGER_FIELDS))
        elif t in _TOOL_TYPES:
            self._tools.append(_slim(event, _TOOL_FIELDS))
            if t == r.TOOL_IN_DOUBT:
                self._in_doubt_at[str(event.payload.get("call_id"))] = event.timestamp

    def build(self) -> AgentView:
        tally = self._tally
        life = tally.lifecycle
        in_doubt = self.in_doubt()
        current = life.current_task
        state: str | None = None
        if current is not None:
            if any(c.task_id == current.task_id for c in in_doubt):
                state = PAUSED_IN_DOUBT
            elif life.waiting is not None and life.waiting.task_id == current.task_id:
                state = SUSPENDED
            elif life.status is lc.Status.RUNNING:
                state = RUNNING
            else:
                state = WAITING
        return AgentView(
            agent_id=self.agent_id, kind=life.kind, status=life.status.value,
            incarnation=life.incarnation, restarts=tally.resurrections, deaths=tally.deaths,
            recent_deaths=len(life.restarts), worker=life.worker, version=life.version,
            last_event_time=None if self._last is None else self._last.timestamp,
            last_event_type=life.last_event_type,
            started_at=(None if life.started_at is None
                        else datetime.fromtimestamp(life.started_at, UTC)),
            config=_config(life.config_json), snapshot_version=life.snapshot_version,
            last_death=self._death, quarantine_reason=life.quarantine_reason,
            current_task=None if current is None else current.task_id, task_state=state,
            tasks=TaskCounts(life.tasks_assigned, life.tasks_completed, life.tasks_failed,
                             tuple(t.task_id for t in life.pending_tasks)),
            tokens=token_ledger(self._ledger), in_doubt=in_doubt, waiting_for=life.waiting,
            parent_id=life.parent_id, delegated_to=tally.delegated_to)

    def in_doubt(self) -> tuple[InDoubt, ...]:
        found = []
        for journal in task_journals(self._tools).values():
            for call, attempt in journal.in_doubt_calls():
                reported = attempt.in_doubt or {}
                found.append(InDoubt(
                    attempt.call_id, journal.task_id, call.name,
                    attempt.idempotency_key, str(reported.get("reason") or ""),
                    self._in_doubt_at.get(attempt.call_id)))
        return tuple(found)

    def check_resolvable(self, call_id: str) -> InDoubt:
        """The in-doubt call ``call_id``, or ``NotResolvableError`` saying why it is not."""
        in_doubt = self.in_doubt()
        for call in in_doubt:
            if call.call_id == call_id:
                return call
        listed = (f"calls in doubt: {', '.join(c.call_id for c in in_doubt)}" if in_doubt
                  else "it has no tool call in doubt")
        for journal in task_journals(self._tools).values():
            for recorded in journal.calls.values():
                for attempt in recorded.attempts:
                    if attempt.call_id != call_id:
                        continue
                    if attempt.outcome is not None:
                        why = f"it already has an outcome ({attempt.outcome})"
                    elif attempt.resolution is not None:
                        why = (f"it was already resolved as {attempt.resolution.as_} by "
                               f"{attempt.resolution.by}")
                    else:
                        why = ("its intent is recorded without an outcome, but the agent has "
                               "not reported it in doubt (it may still be running: wait for "
                               "its tool.in_doubt)")
                    raise NotResolvableError(
                        f"tool call {call_id!r} of agent {self.agent_id!r} is not in doubt: "
                        f"{why}; {listed}")
        raise NotResolvableError(f"agent {self.agent_id!r} has no tool call {call_id!r}; "
                                 f"{listed}")


def agent_view(events: Iterable[Event], agent_id: str | None = None) -> AgentView:
    """The view of one stream; ``NoSuchAgentError`` when it is not an agent's."""
    builder = agent_builder(events, agent_id)
    return builder.build()


def agent_builder(events: Iterable[Event], agent_id: str | None = None) -> AgentViewBuilder:
    """The builder fed with a whole stream (for ``check_resolvable`` and ``build``)."""
    builder: AgentViewBuilder | None = None if agent_id is None else AgentViewBuilder(agent_id)
    for event in events:
        if builder is None:
            builder = AgentViewBuilder(event.stream_id)
        builder.add(event)
    if builder is None or not builder.is_agent:
        raise NoSuchAgentError(agent_id or (builder.agent_id if builder else "?"))
    return builder


class AgentViews:
    """Views of many streams from one pass over their events, in log order (streams
    interleaved, as a partition scan yields them): ``add`` every event, then ``views``."""

    def __init__(self) -> None:
        self._builders: dict[str, AgentViewBuilder] = {}

    def add(self, event: Event) -> None:
        builder = self._builders.get(event.stream_id)
        if builder is None:
            builder = self._builders[event.stream_id] = AgentViewBuilder(event.stream_id)
        builder.add(event)

    def views(self) -> list[AgentView]:
        """Every stream that has an ``agent.started``, sorted by agent id."""
        return [b.build() for _, b in sorted(self._builders.items()) if b.is_agent]


def all_agent_views(events: Iterable[Event]) -> list[AgentView]:
    """``AgentViews`` over ``events``: the view of every agent among them."""
    views = AgentViews()
    for event in events:
        views.add(event)
    return views.views()


def _slim(event: Event, fields: tuple[str, ...]) -> Event:
    payload = {k: event.payload[k] for k in fields if k in event.payload}
    if event.type == r.TOOL_COMPLETED:
        payload["result_json"] = "null"  # the journal parses it; the view never shows it
    return replace(event, payload=payload)


def _config(config_json: str) -> Any:
    try:
        return json.loads(config_json)
    except ValueError:
        return config_json


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


__all__ = [
    "PAUSED_IN_DOUBT", "RUNNING", "SUSPENDED", "WAITING", "AgentView", "AgentViewBuilder",
    "AgentViews", "Death", "InDoubt", "NoSuchAgentError", "NotResolvableError", "TaskCounts",
    "agent_builder", "agent_view", "all_agent_views",
]
