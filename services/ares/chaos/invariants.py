"""The promises of a chaos run, checked from outside the runtime. Pure.

Inputs: every event of the run's streams as read back from the log, what the load was told
(``Acks``), the ledgers the example agents wrote of what really ran, and the integrity
audit's findings. Output: ``violations``, one sentence each, empty when every promise held.

1. no acknowledged event lost: each acked append is in its stream, at the acked version;
2. nothing appended twice: no event id twice in the log;
3. versions contiguous from 1 and hash chains intact (here and in the audit);
4. no completed step executed again and no e-mail sent twice (the ledgers, via the demo's
   ``build_report``), and every completed task's e-mail sent;
5. every acknowledged task completed (or failed with a verdict) exactly once, or surfaced
   in doubt;
6. no agent left dead without a verdict: every ``agent.dead`` is followed by its
   resurrection, a quarantine (alerted) or a stop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ares.chaos.load import Acks
from ares.demo.report import build_report
from ares.events.model import Event
from ares.lifecycle import events as ev

# An agent's status is settled by these; ``agent.dead`` and ``agent.resurrecting`` are not.
VERDICTS = (ev.AGENT_STARTED, ev.AGENT_RESURRECTED, ev.AGENT_QUARANTINED, ev.AGENT_STOPPED)
UNSETTLED = (ev.AGENT_DEAD, ev.AGENT_RESURRECTING)
MAX_LISTED = 50  # violations of one kind listed one by one; the rest are counted


@dataclass(slots=True)
class Findings:
    violations: list[str] = field(default_factory=list)
    tasks_completed: int = 0
    tasks_failed: int = 0
    tasks_in_doubt: int = 0
    quarantined: list[str] = field(default_factory=list)
    # Why each quarantined agent was quarantined (its agent.quarantined ``reason``).
    quarantine_reasons: dict[str, str] = field(default_factory=dict)
    # Acknowledged tasks of quarantined agents, left for an operator (`ares agents resume`).
    tasks_awaiting_operator: int = 0
    deaths: int = 0
    resurrections: int = 0
    emails_sent: int = 0
    steps_reused: int = 0
    events: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"tasks_completed": self.tasks_completed, "tasks_failed": self.tasks_failed,
                "tasks_in_doubt": self.tasks_in_doubt, "quarantined": self.quarantined,
                "quarantine_reasons": self.quarantine_reasons,
                "tasks_awaiting_operator": self.tasks_awaiting_operator,
                "deaths": self.deaths, "resurrections": self.resurrections,
                "emails_sent": self.emails_sent, "steps_reused": self.steps_reused,
                "events_checked": self.events}


class _Violations:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._per_kind: Counter[str] = Counter()

    def add(self, kind: str, text: str) -> None:
        self._per_kind[kind] += 1
        if self._per_kind[kind] <= MAX_LISTED:
            self.lines.append(f"{kind}: {text}")

    def finish(self) -> list[str]:
        more = [f"{kind}: {n - MAX_LISTED} more not listed"
                for kind, n in sorted(self._per_kind.items()) if n > MAX_LISTED]
        return self.lines + more


def check(streams: Mapping[str, Sequence[Event]], acks: Acks,
          llm_lines: Iterable[Mapping[str, Any]], email_lines: Iterable[Mapping[str, Any]],
          audit_failures: Sequence[str] = ()) -> Findings:
    """``streams``: every event of the run's streams (agents and probes) in log order."""
    found = Findings(events=sum(len(e) for e in streams.values()))
    bad = _Violations()
    for line in audit_failures:
        bad.add("audit", line)
    _check_versions(streams, bad)
    _check_appends(streams, acks, bad)
    emails = list(email_lines)
    agents = {a: list(streams.get(a, ())) for a in acks.agents}
    report = build_report(agents, llm_lines, emails, emails_expected=0, fault_times={},
                          faults=[])
    for step in report.steps_executed_twice:
        bad.add("step_executed_twice", step)
    for email in report.emails_sent_twice:
        bad.add("email_sent_twice", email)
    for failure in report.integrity_failures:
        bad.add("chain", failure)
    found.emails_sent = report.emails_sent
    found.steps_reused = report.steps_reused
    sent = {(str(line.get("agent_id")), str(line.get("task_id"))) for line in emails}
    for agent_id in acks.agents:
        _check_agent(agent_id, agents[agent_id], acks.tasks.get(agent_id, []), sent, found,
                     bad)
    found.violations = bad.finish()
    return found


def _check_versions(streams: Mapping[str, Sequence[Event]], bad: _Violations) -> None:
    seen: dict[str, str] = {}
    for stream_id, events in streams.items():
        versions = [e.version for e in events]
        if versions != list(range(1, len(versions) + 1)):
            bad.add("versions", f"{stream_id}: versions are not 1..{len(versions)} "
                                f"(first differences: {_first_gap(versions)})")
        for event in events:
            if event.id in seen:
                bad.add("appended_twice", f"event {event.id} in {seen[event.id]} and again "
                                          f"in {stream_id} at version {event.version}")
            seen[event.id] = f"{stream_id}@{event.version}"


def _first_gap(versions: Sequence[int]) -> str:
    for expected, actual in enumerate(versions, start=1):
        if actual != expected:
            return f"expected {expected}, found {actual}"
    return "none"


def _check_appends(streams: Mapping[str, Sequence[Event]], acks: Acks,
                   bad: _Violations) -> None:
    where = {e.id: (e.stream_id, e.version) for events in streams.values() for e in events}
    for ack in acks.appends:
        got = where.get(ack.event_id)
        if got is None:
            bad.add("acked_event_lost", f"{ack.stream_id} v{ack.version} (event "
                                        f"{ack.event_id}) was acknowledged, is not in the log")
        elif got != (ack.stream_id, ack.version):
            bad.add("acked_event_moved", f"event {ack.event_id} acknowledged at "
                                         f"{ack.stream_id} v{ack.version}, found at "
                                         f"{got[0]} v{got[1]}")


def _check_agent(agent_id: str, events: Sequence[Event], acked_tasks: Sequence[str],
                 sent: set[tuple[str, str]], found: Findings, bad: _Violations) -> None:
    if not events:
        bad.add("agent_lost", f"{agent_id}: started (acknowledged), no event in the log")
        return
    assigned: set[str] = set()
    done: set[str] = set()
    call_tasks: dict[str, str] = {}  # tool call id -> its task (from the intent)
    doubted: set[str] = set()
    status = reason = ""
    for event in events:
        p = event.payload
        if event.type == ev.TASK_ASSIGNED:
            assigned.add(str(p.get("task_id")))
        elif event.type in (ev.TASK_COMPLETED, ev.TASK_FAILED):
            task_id = str(p.get("task_id"))
            if task_id in done:
                bad.add("task_finished_twice", f"{agent_id}/{task_id}: a second {event.type} "
                                               f"at version {event.version}")
            done.add(task_id)
            if event.type == ev.TASK_COMPLETED:
                found.tasks_completed += 1
                if (agent_id, task_id) not in sent:
                    bad.add("email_missing", f"{agent_id}/{task_id} completed, its e-mail "
                                             "is in no ledger")
            else:
                found.tasks_failed += 1
        elif event.type == "tool.call.intent":
            call_tasks[str(p.get("call_id"))] = str(p.get("task_id"))
        elif event.type == "tool.in_doubt" and str(p.get("call_id")) in call_tasks:
            doubted.add(call_tasks[str(p.get("call_id"))])
        if event.type == ev.AGENT_DEAD:
            found.deaths += 1
        elif event.type == ev.AGENT_RESURRECTED:
            found.resurrections += 1
        if event.type in VERDICTS or event.type in UNSETTLED:
            status = event.type
            if status == ev.AGENT_QUARANTINED:
                reason = str(p.get("reason"))
    if status == ev.AGENT_QUARANTINED:
        found.quarantined.append(agent_id)
        found.quarantine_reasons[agent_id] = reason
    if status in UNSETTLED:
        bad.add("dead_without_verdict", f"{agent_id}: its last lifecycle event is {status}")
    for task_id in acked_tasks:
        if task_id not in assigned:
            bad.add("acked_task_lost", f"{agent_id}/{task_id} was acknowledged, no "
                                       "task.assigned in the log")
        elif task_id in done:
            continue
        elif task_id in doubted:
            found.tasks_in_doubt += 1
        elif status == ev.AGENT_QUARANTINED:  # a quarantined agent's tasks wait for an operator
            found.tasks_awaiting_operator += 1
        else:
            bad.add("task_not_finished", f"{agent_id}/{task_id}: neither completed nor "
                                         "surfaced in doubt")
