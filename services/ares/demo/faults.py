"""Each fault the demo injects, and the proof from the log that it hit busy work.

A fault that hit nothing proves nothing: a kill that lands on an idle agent, a kill the
owner refused, a death no later incarnation recovered from. So every fault names its
victims, and the report checks each one in its own stream, by version order (no clock
but the fault's own time, to find the death it caused):

* mid-task: at its ``agent.dead`` the agent was running with a task open (the lifecycle
  fold's ``pending_tasks``), and the steps of that task recorded before the death;
* the death: the first ``agent.dead`` at or after the fault, with the cause the fault
  produces (``worker_lost``, ``killed``, ``stalled``);
* the recovery: a later incarnation, ``agent.resurrected`` after the death, that
  finished the task (its ``task.completed``).

A fault hit when its first victim (the one its line names) shows all three and the owner
did not refuse it. One not injected (no busy agent to hit was found) says so in its
line and claims nothing. Pure: plain values in, plain values out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ares.events.model import Event
from ares.lifecycle import events as ev
from ares.lifecycle import state as lc

WORKER_SIGKILL, AGENT_KILL, HANG = "worker_sigkill", "agent_kill", "hang"


@dataclass(slots=True)
class Fault:
    """One fault as the runner injected it. ``victims[0]`` is the one ``text`` names."""

    kind: str
    text: str
    at: datetime
    cause: str  # the agent.dead cause it must produce
    victims: tuple[str, ...]
    refused: str | None = None  # the owner's refusal (or no answer) of the kill command
    injected: bool = True  # False: no busy agent to hit was found, nothing was done


@dataclass(frozen=True, slots=True)
class VictimEvidence:
    agent_id: str
    task_id: str | None = None  # the task open at the death
    steps_before: int = 0  # llm.call of that task recorded before the death
    steps_total: int = 0  # ... in the whole stream
    dead_version: int | None = None
    dead_cause: str | None = None
    finished_by: int | None = None  # the later incarnation that completed the task
    completed_version: int | None = None

    @property
    def mid_task(self) -> bool:
        return self.task_id is not None

    @property
    def hit(self) -> bool:
        return self.mid_task and self.finished_by is not None

    def missed_because(self, cause: str) -> str | None:
        if self.dead_version is None:
            return f"no agent.dead of {self.agent_id} after the fault"
        if self.dead_cause != cause:
            return (f"{self.agent_id}'s agent.dead v{self.dead_version} has cause "
                    f"{self.dead_cause}, not {cause}")
        if not self.mid_task:
            return f"{self.agent_id} was idle at its agent.dead v{self.dead_version}"
        if self.finished_by is None:
            return f"no later incarnation of {self.agent_id} finished task {self.task_id}"
        return None

    def describe(self) -> str:
        return (f"{self.agent_id} mid-task (step {self.steps_before} of {self.steps_total} "
                f"recorded), agent.dead v{self.dead_version}, incarnation {self.finished_by} "
                f"finished task {self.task_id}")

    def to_json(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id, "mid_task": self.mid_task, "task_id": self.task_id,
                "steps_before": self.steps_before, "steps_total": self.steps_total,
                "dead_version": self.dead_version, "dead_cause": self.dead_cause,
                "finished_by_incarnation": self.finished_by,
                "completed_version": self.completed_version, "hit": self.hit}


@dataclass(slots=True)
class FaultEvidence:
    fault: Fault
    victims: list[VictimEvidence] = field(default_factory=list)

    @property
    def injected(self) -> bool:
        return self.fault.injected

    @property
    def hit(self) -> bool:
        return self.injected and self.missed is None

    @property
    def missed(self) -> str | None:
        """Why the fault did not hit busy work (None: it did, or it was not injected)."""
        if not self.injected:
            return None
        if self.fault.refused is not None:
            return f"the kill was refused: {self.fault.refused}"
        if not self.victims:
            return "no busy agent was hit"
        return self.victims[0].missed_because(self.fault.cause)

    @property
    def line(self) -> str:
        """The report's line: the fault, then the evidence that it hit work (or why not)."""
        if (why := self.missed) is not None:
            return f"{self.fault.text} — MISSED: {why}"
        if not self.injected:
            return self.fault.text
        first, others = self.victims[0], self.victims[1:]
        line = f"{self.fault.text} — {first.describe()}"
        if others:
            line += (f"; {sum(1 for v in others if v.hit)} of {len(others)} more victims "
                     f"killed mid-task and finished by a later incarnation")
        return line

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.fault.kind, "fault": self.fault.text,
                "at": self.fault.at.isoformat(), "cause": self.fault.cause,
                "refused": self.fault.refused, "injected": self.injected,
                "hit": self.hit,
                "missed": self.missed, "victims": [v.to_json() for v in self.victims]}


def fault_evidence(fault: Fault, streams: Mapping[str, Sequence[Event]]) -> FaultEvidence:
    return FaultEvidence(fault, [victim_evidence(agent_id, streams.get(agent_id, ()), fault.at)
                                 for agent_id in fault.victims])


def victim_evidence(agent_id: str, events: Sequence[Event], at: datetime) -> VictimEvidence:
    """What ``agent_id``'s stream says of the first death at or after ``at``."""
    life = lc.AgentLifecycle(agent_id)
    for index, event in enumerate(events):
        if event.type == ev.AGENT_DEAD and event.timestamp >= at:
            return _after_death(agent_id, events, index, life)
        life = lc.fold(life, event)
    return VictimEvidence(agent_id)


def _after_death(agent_id: str, events: Sequence[Event], index: int,
                 before: lc.AgentLifecycle) -> VictimEvidence:
    dead = events[index]
    cause = str(dead.payload.get("cause"))
    busy = before.status is lc.Status.RUNNING and bool(before.pending_tasks)
    if not busy:
        return VictimEvidence(agent_id, dead_version=dead.version, dead_cause=cause)
    task = before.pending_tasks[0].task_id
    steps = [i for i, e in enumerate(events) if e.type == "llm.call"
             and str(e.payload.get("task_id")) == task]
    finished_by = completed = None
    incarnation = before.incarnation
    for event in events[index + 1:]:
        if event.type == ev.AGENT_RESURRECTED:
            incarnation = int(event.payload.get("incarnation") or incarnation + 1)
        elif (event.type == ev.TASK_COMPLETED and str(event.payload.get("task_id")) == task
              and incarnation > before.incarnation):
            finished_by, completed = incarnation, event.version
            break
    return VictimEvidence(agent_id, task, sum(1 for i in steps if i < index), len(steps),
                          dead.version, cause, finished_by, completed)
