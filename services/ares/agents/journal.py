"""What the stream recorded of a task, and the replay rule that checks a re-run against it.

Pure: built from events, no I/O. A re-run asks ``TaskJournal.expect`` for every call it
makes, in order; the journal answers with the recorded call (replay it) or ``None``
(execute it), and raises ``NonDeterminismError`` when the handler's request does not match
what was recorded at that position.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ares.agents import records as r
from ares.agents.agent import Task
from ares.agents.errors import NonDeterminismError
from ares.events.model import Event
from ares.events.wire.canonical import parse_json
from ares.lifecycle import events as ev

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Resolution:
    """A ``tool.call.resolved`` verdict: ``as_`` is done | retry | skip."""

    as_: str
    result: Any = None
    note: str | None = None
    by: str = "operator"


@dataclass(slots=True)
class ToolAttempt:
    """One intent of a tool call and what became of it."""

    call_id: str
    effect: str
    idempotency_key: str | None
    outcome: str | None = None  # "completed" | "failed"
    result: Any = None
    failure: Mapping[str, Any] | None = None
    in_doubt: Mapping[str, Any] | None = None
    resolution: Resolution | None = None

    @property
    def settled(self) -> bool:
        return self.outcome is not None or self.resolution is not None


@dataclass(slots=True)
class RecordedCall:
    """A step, an llm call or a tool call the stream holds for one position."""

    kind: str
    name: str
    occurrence: int
    position: int
    completed: bool = False
    result: Any = None  # step: decoded result; llm: output text; delegate: the dispatch
    llm: Mapping[str, Any] | None = None  # the llm.call payload
    failure: Mapping[str, Any] | None = None  # the step.failed payload
    validation: Mapping[str, Any] | None = None  # llm: the llm.validation payload (a verdict)
    response: Mapping[str, Any] | None = None  # chat: the llm.response payload (the turn)
    attempts: list[ToolAttempt] = field(default_factory=list)
    wait: Mapping[str, Any] | None = None  # the wait.started payload (result: wait.completed)

    def describe(self) -> str:
        return describe(self.kind, self.name, self.occurrence)

    @property
    def last_attempt(self) -> ToolAttempt:
        return self.attempts[-1]


def describe(kind: str, name: str, occurrence: int) -> str:
    return f"{kind} {name!r} (occurrence {occurrence})"


@dataclass(slots=True)
class TaskJournal:
    """Everything recorded of ONE task so far."""

    task_id: str
    task: Task | None = None
    calls: dict[int, RecordedCall] = field(default_factory=dict)
    by_key: dict[tuple[str, int], RecordedCall] = field(default_factory=dict)
    outcome: Event | None = None  # task.completed or task.failed
    resumed: list[Mapping[str, Any]] = field(default_factory=list)

    @classmethod
    def from_events(cls, task_id: str, events: Iterable[Event]) -> TaskJournal:
        """The journal of ``task_id`` from the events of the agent's stream (any order of
        tasks; events in stream order)."""
        return task_journals(events, only=task_id).get(task_id) or cls(task_id)

    @property
    def is_empty(self) -> bool:
        return not self.calls

    @property
    def last_position(self) -> int:
        return max(self.calls, default=-1)

    def expect(self, position: int, kind: str, name: str,
               occurrence: int) -> RecordedCall | None:
        """The recorded call the handler's request at ``position`` replays, or ``None``."""
        requested = describe(kind, name, occurrence)
        recorded = self.calls.get(position)
        if recorded is not None:
            if (recorded.kind, recorded.name, recorded.occurrence) != (kind, name, occurrence):
                raise NonDeterminismError(self.task_id, position, recorded.describe(),
                                          f"requested {requested}")
            return recorded
        elsewhere = self.by_key.get((name, occurrence))
        if elsewhere is not None:
            raise NonDeterminismError(
                self.task_id, position, f"{elsewhere.describe()} at position "
                f"{elsewhere.position}", f"requested it at position {position}")
        return None

    def check_all_replayed(self, consumed: set[int]) -> None:
        """After the handler returned: every recorded call must have been requested."""
        missing = sorted(set(self.calls) - consumed)
        if missing:
            first = self.calls[missing[0]]
            raise NonDeterminismError(self.task_id, first.position, first.describe(),
                                      "returned without requesting it",
                                      f" ({len(missing)} recorded call(s) not replayed)")

    def in_doubt_calls(self) -> list[tuple[RecordedCall, ToolAttempt]]:
        """Tool calls paused in doubt (a ``tool.in_doubt`` and no outcome nor resolution)."""
        return [(c, c.last_attempt) for c in self.calls.values()
                if c.attempts and c.last_attempt.in_doubt is not None
                and not c.last_attempt.settled]


def task_journals(events: Iterable[Event], only: str | None = None) -> dict[str, TaskJournal]:
    """One pass over a stream: the journal of every task (or only of ``only``), by task id
    in the order the tasks were assigned or first recorded."""
    builder = _Builder(only)
    for event in events:
        builder.add(event)
    return builder.journals


def open_tasks(events: Iterable[Event]) -> list[tuple[Task, TaskJournal]]:
    """Tasks assigned and not finished (no task.completed/task.failed), with their journal,
    in assignment order: what the runtime (re-)runs after a recovery."""
    return [(j.task, j) for j in task_journals(events).values()
            if j.task is not None and j.outcome is None]


class _Builder:
    def __init__(self, only: str | None) -> None:
        self.only = only
        self.journals: dict[str, TaskJournal] = {}
        self.attempts: dict[str, ToolAttempt] = {}

    def journal(self, task_id: Any) -> TaskJournal | None:
        if not isinstance(task_id, str) or (self.only is not None and task_id != self.only):
            return None
        journal = self.journals.get(task_id)
        if journal is None:
            journal = self.journals[task_id] = TaskJournal(task_id)
        return journal

    def add(self, event: Event) -> None:
        p = event.payload
        t = event.type
        if t in (r.TOOL_COMPLETED, r.TOOL_FAILED, r.TOOL_IN_DOUBT, r.TOOL_RESOLVED):
            self.settle(event)
            return
        if t not in (ev.TASK_ASSIGNED, ev.TASK_COMPLETED, ev.TASK_FAILED, r.STEP_COMPLETED,
                     r.LLM_CALL, r.LLM_VALIDATION, r.LLM_RESPONSE, r.STEP_FAILED,
                     r.TOOL_INTENT, r.TASK_RESUMED,
                     ev.WAIT_STARTED, ev.WAIT_COMPLETED, ev.DELEGATION_DISPATCHED):
            return
        journal = self.journal(p.get("task_id"))
        if journal is None:
            return
        if t == ev.TASK_ASSIGNED:
            journal.task = Task.from_event(event)
        elif t in (ev.TASK_COMPLETED, ev.TASK_FAILED):
            journal.outcome = event
        elif t == r.TASK_RESUMED:
            journal.resumed.append(p)
        elif t == r.STEP_COMPLETED:
            call = self.call(journal, event, r.STEP, str(p["step_name"]))
            call.completed, call.result = True, parse_json(str(p["result_json"]))
        elif t == r.LLM_CALL:
            call = self.call(journal, event, r.LLM, str(p["name"]))
            call.completed, call.result, call.llm = True, p["output"], p
        elif t == r.LLM_VALIDATION:  # with its attempt's llm.call (none: the provider gave up)
            self.call(journal, event, r.LLM, str(p["name"])).validation = p
        elif t == r.LLM_RESPONSE:  # with its turn's llm.call
            self.call(journal, event, r.LLM, str(p["name"])).response = p
        elif t == r.STEP_FAILED:
            call = self.call(journal, event, str(p.get("kind", r.STEP)), str(p["step_name"]))
            call.failure = p
        elif t == ev.WAIT_STARTED:
            self.call(journal, event, r.WAIT, str(p.get("name"))).wait = p
        elif t == ev.WAIT_COMPLETED:
            call = self.call(journal, event, r.WAIT, str(p.get("name")))
            call.completed, call.result = True, p
        elif t == ev.DELEGATION_DISPATCHED:
            call = self.call(journal, event, r.DELEGATE, str(p.get("name")))
            call.completed, call.result = True, p
        else:  # tool.call.intent
            call = self.call(journal, event, r.TOOL, str(p["tool"]))
            attempt = ToolAttempt(str(p["call_id"]), str(p["effect"]),
                                  p.get("idempotency_key"))
            call.attempts.append(attempt)
            self.attempts[attempt.call_id] = attempt

    def call(self, journal: TaskJournal, event: Event, kind: str, name: str) -> RecordedCall:
        occurrence = r.int_field(event.payload, "occurrence")
        existing = journal.by_key.get((name, occurrence))
        if existing is not None and existing.kind == kind:
            return existing  # a later record of the same call (another tool attempt)
        raw = event.metadata.get(r.POSITION_KEY)
        position = int(raw) if raw is not None and raw.isdigit() else len(journal.calls)
        call = RecordedCall(kind, name, occurrence, position)
        if position in journal.calls or existing is not None:
            log.warning("task %r: %s recorded twice (position %d); keeping the first",
                        journal.task_id, call.describe(), position)
            return call  # detached: never replayed
        journal.calls[position] = call
        journal.by_key[(name, occurrence)] = call
        return call

    def settle(self, event: Event) -> None:
        p = event.payload
        attempt = self.attempts.get(str(p.get("call_id")))
        if attempt is None:
            return  # another task's call (or a resolution of an unknown call: ignored)
        if event.type == r.TOOL_COMPLETED:
            attempt.outcome, attempt.result = "completed", parse_json(str(p["result_json"]))
        elif event.type == r.TOOL_FAILED:
            attempt.outcome, attempt.failure = "failed", p
        elif event.type == r.TOOL_IN_DOUBT:
            attempt.in_doubt = p
        elif attempt.resolution is None and not attempt.outcome:
            as_ = p.get("as")
            if as_ not in r.RESOLUTIONS:
                log.warning("ignoring tool.call.resolved for %s: 'as' is %r, not one of %s",
                            attempt.call_id, as_, r.RESOLUTIONS)
                return
            attempt.resolution = Resolution(str(as_), p.get("result"), p.get("note"),
                                            str(p.get("by") or "operator"))
