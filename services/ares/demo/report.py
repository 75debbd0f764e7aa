"""The demo's promises, checked from outside the runtime: the log and the example ledgers.

Pure: it takes the agents' events and the ledger lines the example agents wrote (a record
of what REALLY ran, kept outside Kafka) and says which promise held.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ares.agents.ledger import token_ledger
from ares.errors import IntegrityError
from ares.events.chain import verify_chain
from ares.events.model import Event
from ares.lifecycle import events as ev
from ares.lifecycle.recovery import RecoveryRecord


@dataclass(frozen=True, slots=True)
class Resurrection:
    agent_id: str
    cause: str
    detection_s: float | None  # from the fault to the recorded death
    load_ms: int | None
    replay_ms: int | None
    resume_ms: int | None
    total_s: float | None  # from the fault to the agent running again


@dataclass(slots=True)
class DemoReport:
    agents: int = 0
    tasks_assigned: int = 0
    tasks_completed: int = 0
    resurrections: list[Resurrection] = field(default_factory=list)
    llm_calls_recorded: int = 0
    llm_executions: int = 0  # real executions per the ledger
    steps_executed_twice: list[str] = field(default_factory=list)
    steps_reused: int = 0
    tokens_spent: int = 0
    tokens_saved: int = 0
    emails_expected: int = 0
    emails_sent: int = 0
    emails_sent_twice: list[str] = field(default_factory=list)
    in_doubt: list[str] = field(default_factory=list)
    integrity_failures: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)

    @property
    def broken_promises(self) -> list[str]:
        broken = []
        if self.tasks_completed < self.tasks_assigned:
            broken.append(f"{self.tasks_assigned - self.tasks_completed} task(s) not completed")
        if self.steps_executed_twice:
            broken.append(f"{len(self.steps_executed_twice)} step(s) executed twice")
        if self.emails_sent_twice:
            broken.append(f"{len(self.emails_sent_twice)} e-mail(s) sent twice")
        if self.emails_sent + len(self.in_doubt) < self.emails_expected:
            broken.append("e-mails missing (neither sent nor reported in doubt)")
        if self.integrity_failures:
            broken.append(f"{len(self.integrity_failures)} stream(s) failed integrity")
        return broken

    def to_json(self) -> dict[str, Any]:
        return {
            "agents": self.agents, "tasks_assigned": self.tasks_assigned,
            "tasks_completed": self.tasks_completed,
            "resurrections": [_res_json(r) for r in self.resurrections],
            "llm_calls_recorded": self.llm_calls_recorded,
            "llm_executions": self.llm_executions,
            "steps_executed_twice": self.steps_executed_twice,
            "steps_reused": self.steps_reused, "tokens_spent": self.tokens_spent,
            "tokens_saved": self.tokens_saved, "emails_expected": self.emails_expected,
            "emails_sent": self.emails_sent, "emails_sent_twice": self.emails_sent_twice,
            "in_doubt": self.in_doubt, "integrity_failures": self.integrity_failures,
            "faults": self.faults, "broken_promises": self.broken_promises,
            "promises_kept": not self.broken_promises,
        }


def _res_json(r: Resurrection) -> dict[str, Any]:
    return {"agent_id": r.agent_id, "cause": r.cause, "detection_s": r.detection_s,
            "load_ms": r.load_ms, "replay_ms": r.replay_ms, "resume_ms": r.resume_ms,
            "total_s": r.total_s}


def build_report(streams: Mapping[str, Sequence[Event]], llm_lines: Iterable[Mapping[str, Any]],
                 email_lines: Iterable[Mapping[str, Any]], emails_expected: int,
                 fault_times: Mapping[str, Sequence[datetime]],
                 faults: Sequence[str]) -> DemoReport:
    """``fault_times``: agent id → when the faults that hit it were injected."""
    report = DemoReport(agents=len(streams), emails_expected=emails_expected,
                        faults=list(faults))
    # (agent, task, step) -> the incarnation that recorded it: an execution by a LATER
    # incarnation ran a step whose result was already durable (the promise broken). An
    # earlier one may repeat: killed mid-step, before its record was durable.
    recorded: dict[tuple[str, str, str], int] = {}
    for agent_id, events in streams.items():
        _check_chain(report, agent_id, events)
        types = [e.type for e in events]
        report.tasks_assigned += types.count(ev.TASK_ASSIGNED)
        report.tasks_completed += types.count(ev.TASK_COMPLETED)
        report.in_doubt += [f"{agent_id}:{e.payload.get('call_id')}" for e in events
                            if e.type == "tool.in_doubt"]
        incarnation = 0
        for event in events:
            if event.type in (ev.AGENT_STARTED, ev.AGENT_RESURRECTED):
                incarnation = int(event.payload.get("incarnation") or incarnation)
            elif event.type == "llm.call":
                key = (agent_id, str(event.payload.get("task_id")), str(event.payload.get("name")))
                recorded.setdefault(key, incarnation)
        ledger = token_ledger(list(events))
        report.llm_calls_recorded += ledger.calls
        report.steps_reused += ledger.reused_calls
        report.tokens_spent += ledger.spent_prompt + ledger.spent_completion
        report.tokens_saved += ledger.reused_tokens
        report.resurrections += _resurrections(agent_id, events, fault_times.get(agent_id, ()))
    twice = set()
    for line in llm_lines:
        report.llm_executions += 1
        key = (str(line["agent_id"]), str(line["task_id"]), f"step-{line['step']}")
        if key in recorded and int(line["incarnation"]) > recorded[key]:
            twice.add("/".join(key))
    report.steps_executed_twice = sorted(twice)
    sent: Counter[str] = Counter()
    for line in email_lines:
        sent[f"{line['agent_id']}/{line['task_id']}"] += 1
    report.emails_sent = len(sent)
    report.emails_sent_twice = sorted(k for k, n in sent.items() if n > 1)
    return report


def _check_chain(report: DemoReport, agent_id: str, events: Sequence[Event]) -> None:
    try:
        verify_chain(events)
    except IntegrityError as exc:
        report.integrity_failures.append(f"{agent_id}: {exc}")


def _resurrections(agent_id: str, events: Sequence[Event],
                   fault_times: Sequence[datetime]) -> list[Resurrection]:
    found = []
    last_dead: Event | None = None
    for event in events:
        if event.type == ev.AGENT_DEAD:
            last_dead = event
        elif event.type == ev.AGENT_RESURRECTED and last_dead is not None:
            record = RecoveryRecord.from_event(event)
            meta = event.metadata
            # The fault behind this death: the latest one injected before it was recorded.
            earlier = [t for t in fault_times if t <= last_dead.timestamp]
            fault_at = max(earlier) if earlier else None
            start = fault_at or last_dead.timestamp
            found.append(Resurrection(
                agent_id, str(last_dead.payload.get("cause")),
                (last_dead.timestamp - start).total_seconds() if fault_at else None,
                _ms(meta.get("ares.recovery.load_ms")), _ms(meta.get("ares.recovery.replay_ms")),
                _ms(meta.get("ares.recovery.resume_ms")),
                (event.timestamp - start).total_seconds() if record else None))
            last_dead = None
    return found


def _ms(value: str | None) -> int | None:
    try:
        return None if value is None else int(float(value))
    except ValueError:
        return None
