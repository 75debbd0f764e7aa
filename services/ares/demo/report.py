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
from ares.demo.faults import WORKER_SIGKILL, Fault, FaultEvidence, fault_evidence
from ares.errors import IntegrityError
from ares.events.chain import verify_chain
from ares.events.model import Event
from ares.events.wire.canonical import parse_json
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
class TeamReport:
    """The team's promises: ``leader`` ran through the faults, ``reference`` (the same
    question) without any."""

    leader: str
    reference: str
    subtasks_expected: int
    dispatched: dict[str, int] = field(default_factory=dict)  # leader -> research sub-tasks
    dispatched_twice: list[str] = field(default_factory=list)  # child ids seen twice
    assigned_not_once: list[str] = field(default_factory=list)  # children: task.assigned != 1
    members: int = 0
    llm_steps_recorded: int = 0  # llm.call events of every member of both teams
    llm_executions: int = 0  # their real executions, per the ledger
    llm_steps_repaid: list[str] = field(default_factory=list)
    answer: str | None = None
    reference_answer: str | None = None
    emails: dict[str, int] = field(default_factory=dict)  # leader -> e-mails really sent

    @property
    def answers_identical(self) -> bool:
        return self.answer is not None and self.answer == self.reference_answer

    @property
    def broken_promises(self) -> list[str]:
        broken = []
        if (self.dispatched_twice or self.assigned_not_once or any(
                n != self.subtasks_expected for n in self.dispatched.values())):
            broken.append("team sub-tasks not dispatched exactly once each")
        if self.llm_steps_repaid:
            broken.append(f"{len(self.llm_steps_repaid)} team LLM step(s) re-paid")
        if not self.answers_identical:
            broken.append("the team's answer differs from the run without faults")
        if any(n != 1 for n in self.emails.values()):
            broken.append("a team did not send exactly one e-mail")
        return broken

    def to_json(self) -> dict[str, Any]:
        return {
            "leader": self.leader, "reference": self.reference,
            "subtasks_expected": self.subtasks_expected, "dispatched": self.dispatched,
            "dispatched_twice": self.dispatched_twice,
            "assigned_not_once": self.assigned_not_once, "members": self.members,
            "llm_steps_recorded": self.llm_steps_recorded,
            "llm_executions": self.llm_executions, "llm_steps_repaid": self.llm_steps_repaid,
            "answer": self.answer, "reference_answer": self.reference_answer,
            "answers_identical": self.answers_identical, "emails": self.emails,
        }

    def rows(self) -> list[tuple[str, bool, str]]:
        """The report's text lines: (label, kept, detail)."""
        dispatched = ", ".join(f"{leader} {n}/{self.subtasks_expected}"
                               for leader, n in self.dispatched.items())
        once = not (self.dispatched_twice or self.assigned_not_once)
        return [
            ("team sub-tasks dispatched once each", once and all(
                n == self.subtasks_expected for n in self.dispatched.values()),
             f"{dispatched}; {len(self.dispatched_twice)} dispatched twice, "
             f"{len(self.assigned_not_once)} not assigned exactly once"),
            ("team LLM steps not re-paid", not self.llm_steps_repaid,
             f"{self.llm_steps_recorded} recorded by {self.members} members, "
             f"{self.llm_executions} really executed, {len(self.llm_steps_repaid)} re-paid"),
            ("team answer = the answer without faults", self.answers_identical,
             f"{self.leader} {(self.answer or '-')[:16]} / {self.reference} "
             f"{(self.reference_answer or '-')[:16]}"),
            ("team e-mails", all(n == 1 for n in self.emails.values()),
             ", ".join(f"{leader}: {n}" for leader, n in self.emails.items())),
        ]


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
    faults: list[str] = field(default_factory=list)  # each fault's line, with its evidence
    fault_evidence: list[FaultEvidence] = field(default_factory=list)
    team: TeamReport | None = None

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
        broken += [f"a fault missed busy work ({f.fault.text}): {f.missed}"
                   for f in self.fault_evidence if f.missed is not None]
        if self.team is not None:
            broken += self.team.broken_promises
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
            "faults": self.faults,
            "fault_evidence": [f.to_json() for f in self.fault_evidence],
            "team": None if self.team is None else self.team.to_json(),
            "broken_promises": self.broken_promises,
            "promises_kept": not self.broken_promises,
        }


def _res_json(r: Resurrection) -> dict[str, Any]:
    return {"agent_id": r.agent_id, "cause": r.cause, "detection_s": r.detection_s,
            "load_ms": r.load_ms, "replay_ms": r.replay_ms, "resume_ms": r.resume_ms,
            "total_s": r.total_s}


def build_report(streams: Mapping[str, Sequence[Event]], llm_lines: Iterable[Mapping[str, Any]],
                 email_lines: Iterable[Mapping[str, Any]], emails_expected: int,
                 fault_times: Mapping[str, Sequence[datetime]],
                 faults: Sequence[Fault],
                 team: tuple[str, str, int] | None = None) -> DemoReport:
    """``fault_times``: agent id → when the faults that hit it were injected; ``faults``:
    each fault with its victims, checked against their streams. ``team``: (the leader the
    faults hit, the leader of the same question without faults, the sub-tasks each
    dispatches)."""
    llm_lines, email_lines = list(llm_lines), list(email_lines)
    evidence = [fault_evidence(fault, streams) for fault in faults]
    # A worker's agents the demo did not see on it when it killed it (a sub-agent just
    # dispatched) died of that kill too: their deaths are timed from it.
    cause_times = {"worker_lost": [f.at for f in faults if f.kind == WORKER_SIGKILL]}
    report = DemoReport(agents=len(streams), emails_expected=emails_expected,
                        faults=[f.line for f in evidence], fault_evidence=evidence)
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
        report.resurrections += _resurrections(agent_id, events, fault_times.get(agent_id, ()),
                                               cause_times)
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
    if team is not None:
        report.team = team_report(streams, llm_lines, email_lines, *team)
    return report


def team_report(streams: Mapping[str, Sequence[Event]], llm_lines: Sequence[Mapping[str, Any]],
                email_lines: Sequence[Mapping[str, Any]], leader: str, reference: str,
                subtasks: int) -> TeamReport:
    """Each sub-task dispatched once (child ids unique, one ``task.assigned`` each); no
    recorded LLM step of any member executed by an incarnation later than the one that
    recorded it; the answer of ``leader`` (faults) = that of ``reference`` (none); one
    e-mail per team."""
    report = TeamReport(leader, reference, subtasks)
    members: list[str] = []
    for head in (leader, reference):
        children = [str(e.payload.get("child_id")) for e in streams.get(head, ())
                    if e.type == ev.DELEGATION_DISPATCHED]
        research = [c for c in children if ".research-" in c]
        report.dispatched[head] = len(set(research))
        report.dispatched_twice += sorted(c for c, n in Counter(children).items() if n > 1)
        report.assigned_not_once += [c for c in dict.fromkeys(children) if sum(
            1 for e in streams.get(c, ()) if e.type == ev.TASK_ASSIGNED) != 1]
        members += [head, *dict.fromkeys(children)]
        report.emails[head] = sum(1 for line in email_lines if line.get("agent_id") == head)
    report.members = len(members)
    ran: dict[tuple[str, str, str], list[int]] = {}
    team = set(members)
    for line in llm_lines:
        if line.get("agent_id") in team:
            report.llm_executions += 1
            ran.setdefault((str(line["agent_id"]), str(line["task_id"]), str(line["step"])),
                           []).append(int(line["incarnation"]))
    for member in members:
        recorded: dict[tuple[str, str], list[int]] = {}
        for incarnation, event in _incarnations(streams.get(member, ())):
            if event.type == "llm.call":
                recorded.setdefault((str(event.payload.get("task_id")),
                                     str(event.payload.get("name"))), []).append(incarnation)
        report.llm_steps_recorded += sum(len(i) for i in recorded.values())
        for (task, step), incarnations in recorded.items():
            if len(incarnations) != 1:
                report.llm_steps_repaid.append(f"{member}/{task}/{step}: "
                                               f"{len(incarnations)} llm.call")
                continue
            later = [i for i in ran.get((member, task, step), []) if i > incarnations[0]]
            if later:
                report.llm_steps_repaid.append(
                    f"{member}/{task}/{step}: recorded by incarnation {incarnations[0]}, "
                    f"executed again by {later}")
    report.answer, report.reference_answer = (_answer(streams.get(leader, ())),
                                              _answer(streams.get(reference, ())))
    return report


def _incarnations(events: Iterable[Event]) -> list[tuple[int, Event]]:
    """Each event with the incarnation that was running when it was appended."""
    current, out = 0, []
    for event in events:
        if event.type in (ev.AGENT_STARTED, ev.AGENT_RESURRECTED):
            current = int(event.payload.get("incarnation") or current + 1)
        out.append((current, event))
    return out


def _answer(events: Iterable[Event]) -> str | None:
    for event in events:
        if event.type == ev.TASK_COMPLETED:
            output = parse_json(str(event.payload.get("output_json") or "null"))
            if isinstance(output, dict) and isinstance(output.get("answer"), str):
                return str(output["answer"])
    return None


def _check_chain(report: DemoReport, agent_id: str, events: Sequence[Event]) -> None:
    try:
        verify_chain(events)
    except IntegrityError as exc:
        report.integrity_failures.append(f"{agent_id}: {exc}")


def _resurrections(agent_id: str, events: Sequence[Event], fault_times: Sequence[datetime],
                   cause_times: Mapping[str, Sequence[datetime]]) -> list[Resurrection]:
    found = []
    last_dead: Event | None = None
    for event in events:
        if event.type == ev.AGENT_DEAD:
            last_dead = event
        elif event.type == ev.AGENT_RESURRECTED and last_dead is not None:
            record = RecoveryRecord.from_event(event)
            meta = event.metadata
            # The fault behind this death: the latest one injected before it was recorded.
            cause = str(last_dead.payload.get("cause"))
            earlier = [t for t in fault_times if t <= last_dead.timestamp] or [
                t for t in cause_times.get(cause, ()) if t <= last_dead.timestamp]
            fault_at = max(earlier) if earlier else None
            start = fault_at or last_dead.timestamp
            found.append(Resurrection(
                agent_id, cause,
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
