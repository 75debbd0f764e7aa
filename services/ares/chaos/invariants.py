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
from ares.lifecycle import state as lc
from ares.lifecycle import transitions as tr

# The statuses that await a verdict (a resurrection, quarantine or stop), with the event
# that leads to each, for the violation's text.
UNSETTLED = {lc.Status.DEAD: ev.AGENT_DEAD, lc.Status.RESURRECTING: ev.AGENT_RESURRECTING}
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
    tasks = _Tasks()
    folder = lc.Folder(lc.AgentLifecycle(agent_id))  # the runtime's own fold decides status
    for event in events:
        transition = folder.step(event)
        if transition is None:
            tasks.observe_tool(event)
        else:
            _count(agent_id, event, transition, tasks, sent, found, bad)
    life = folder.freeze()
    if life.status is lc.Status.QUARANTINED:
        found.quarantined.append(agent_id)
        found.quarantine_reasons[agent_id] = str(life.quarantine_reason)
    if life.status in UNSETTLED:
        bad.add("dead_without_verdict",
                f"{agent_id}: its last lifecycle event is {UNSETTLED[life.status]}")
    for task_id in acked_tasks:
        if task_id not in tasks.assigned:
            bad.add("acked_task_lost", f"{agent_id}/{task_id} was acknowledged, no "
                                       "task.assigned in the log")
        elif task_id in tasks.done:
            continue
        elif task_id in tasks.doubted:
            found.tasks_in_doubt += 1
        elif life.status is lc.Status.QUARANTINED:  # its tasks wait for an operator
            found.tasks_awaiting_operator += 1
        else:
            bad.add("task_not_finished", f"{agent_id}/{task_id}: neither completed nor "
                                         "surfaced in doubt")


@dataclass(slots=True)
class _Tasks:
    """One agent's tasks as the log tells them: every finish is checked, not only the
    first the fold counts, since a second one is what invariant 5 looks for."""

    assigned: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    call_tasks: dict[str, str] = field(default_factory=dict)  # tool call id -> its task
    doubted: set[str] = field(default_factory=set)

    def observe_tool(self, event: Event) -> None:
        p = event.payload
        if event.type == "tool.call.intent":
            self.call_tasks[str(p.get("call_id"))] = str(p.get("task_id"))
        elif event.type == "tool.in_doubt" and str(p.get("call_id")) in self.call_tasks:
            self.doubted.add(self.call_tasks[str(p.get("call_id"))])


def _count(agent_id: str, event: Event, t: tr.Transition, tasks: _Tasks,
           sent: set[tuple[str, str]], found: Findings, bad: _Violations) -> None:
    """What one lifecycle transition adds to the findings."""
    if isinstance(t, tr.TaskAssigned):
        tasks.assigned.add(str(t.task_id))
    elif isinstance(t, tr.TASK_ENDS):
        task_id = str(t.task_id)
        if task_id in tasks.done:
            bad.add("task_finished_twice", f"{agent_id}/{task_id}: a second {event.type} "
                                           f"at version {event.version}")
        tasks.done.add(task_id)
        if isinstance(t, tr.TaskFailed):
            found.tasks_failed += 1
            return
        found.tasks_completed += 1
        if (agent_id, task_id) not in sent:
            bad.add("email_missing", f"{agent_id}/{task_id} completed, its e-mail is in no "
                                     "ledger")
    elif isinstance(t, tr.Died):
        found.deaths += 1
    elif isinstance(t, tr.Resurrected):
        found.resurrections += 1
