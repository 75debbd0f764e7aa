"""What the demo watches: every agent's status, incarnation, steps and tokens, live."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ares.events.model import Event
from ares.lifecycle import events as ev
from ares.lifecycle import state as lc
from ares.lifecycle import transitions as tr


@dataclass(slots=True)
class AgentProgress:
    agent_id: str
    kind: str = ""
    status: str = "starting"
    incarnation: int = 0
    worker: str = ""
    steps: int = 0
    tokens: int = 0
    tasks_done: int = 0
    life: lc.AgentLifecycle | None = None  # its lifecycle folded so far (None: no event)
    tasks_assigned: int = 0
    dispatched: list[str] = field(default_factory=list)  # a leader's children, in order


@dataclass(slots=True)
class FleetState:
    agents: dict[str, AgentProgress] = field(default_factory=dict)
    total_steps: int = 0
    total_tasks: int = 0
    faults: list[str] = field(default_factory=list)
    leaders: list[str] = field(default_factory=list)  # team leaders: their members join

    def observe(self, event: Event) -> None:
        agent = self.agents.get(event.stream_id) or self._member(event.stream_id)
        if agent is None:
            return
        if event.type == ev.DELEGATION_DISPATCHED:
            child = str(event.payload.get("child_id"))
            agent.dispatched.append(child)
            self._member(child)
        elif event.type == ev.TASK_ASSIGNED:
            agent.tasks_assigned += 1
        before = agent.life or lc.AgentLifecycle(agent.agent_id)
        agent.life, transition = lc.step(before, event)
        if transition is None:
            if event.type == "llm.call":
                p = event.payload
                agent.steps += 1
                agent.tokens += int(p.get("prompt_tokens") or 0) + int(
                    p.get("completion_tokens") or 0)
            return
        if transition.status is not None:  # the status the runtime's own fold gives it
            life = agent.life
            agent.status = life.status.value
            agent.kind, agent.incarnation, agent.worker = (life.kind, life.incarnation,
                                                           life.worker or "")
        elif isinstance(transition, tr.TaskCompleted):
            agent.tasks_done += 1
            if agent.tasks_done >= self.tasks_of(agent):
                agent.status = "done"  # the demo's own: every task it was given is done

    def _member(self, agent_id: str) -> AgentProgress | None:
        """A team member (a leader's child, ``<leader>.<name>-<n>``) joins the fleet when
        its leader dispatches it or its first event is seen, whichever comes first."""
        if agent_id in self.agents:
            return self.agents[agent_id]
        if not any(agent_id.startswith(f"{leader}.") for leader in self.leaders):
            return None
        self.agents[agent_id] = member = AgentProgress(agent_id)
        self.total_tasks += 1  # a researcher's sub-task (two LLM steps) or a distillation
        self.total_steps += 1 if ".distill-" in agent_id else 2
        return member

    def busy(self, agent_id: str) -> bool:
        """Working now: a task assigned and not finished, and alive."""
        agent = self.agents.get(agent_id)
        return (agent is not None and agent.status == "running"
                and agent.tasks_assigned > agent.tasks_done)

    def tasks_of(self, agent: AgentProgress) -> int:
        return 3 if agent.kind == "example.chat" else 1

    @property
    def steps_done(self) -> int:
        return sum(a.steps for a in self.agents.values())

    @property
    def tasks_done(self) -> int:
        return sum(a.tasks_done for a in self.agents.values())

    @property
    def tokens(self) -> int:
        return sum(a.tokens for a in self.agents.values())

    def by_status(self) -> Counter[str]:
        return Counter(a.status for a in self.agents.values())

    def workers(self) -> Counter[str]:
        return Counter(a.worker for a in self.agents.values()
                       if a.worker and a.kind == "example.pipeline" and a.status != "done")

    @property
    def resurrected(self) -> int:
        return sum(1 for a in self.agents.values() if a.incarnation > 1)
