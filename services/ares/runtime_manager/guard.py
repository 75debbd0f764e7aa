"""The resurrection guard: what to do when an agent's incarnation ends abnormally.

``ResurrectionGuard.decide(state, runtime_stopping, now)`` answers a death *notification*
(the agent's task raised, a kill, a health-checker verdict) with one of

* ``Skip(reason)``: no resurrection, because the runtime is stopping, the agent was
  stopped voluntarily, a resurrection is already in flight, or it is quarantined;
* ``Quarantine(budget_exhausted, deaths_in_window)``: the restart budget is spent;
* ``Resurrect(delay_s, attempt)``: bring it back after ``delay_s``.

The restart budget is Erlang's restart intensity: at most ``max_restarts`` restarts within
any ``period_s`` sliding window; one more death inside the window quarantines the agent
(``max_restarts=0``: never resurrect). An incarnation that ran ``healthy_after_s`` before
dying was healthy: the deaths before it are forgiven, so an agent that is resurrected and
stays up starts again at attempt 1, while a flapping one (dying soon after every start)
accumulates deaths until the window or the budget ends it. The count is recorded in the
events (``agent.resurrecting.attempt``, ``agent.quarantined.deaths``) and the fold keeps
exactly the counted deaths, so a rebuilt state decides as the live one did.

Call ``decide`` with the state *before* the death is folded in: the notification is the
new death (``now`` is its time, in epoch seconds on the clock of the event timestamps —
the simplest is the timestamp the host gives the ``agent.dead`` event). A state whose
status is already ``dead`` (rebuilt after a worker died between ``agent.dead`` and its
answer) has its death counted already and is decided as it is.

**The stop-versus-crash race.** A voluntary stop cancels the agent's task, and a cancelled
task ends exactly like a crashed one: the host's exit handler runs and asks the guard. If
the stop were recorded *after* ``task.cancel()``, or recorded on a state object the exit
handler does not read, the handler could see a running agent that died and resurrect what
the operator just stopped. So the host must, synchronously and in this order:

1. ``states[id] = mark_stop_requested(states[id])`` — the flag the guard reads;
2. ``task.cancel()``.

The exit handler must read ``states[id]`` when it runs, never a state captured when the
task started (states are immutable values: a captured one never sees the flag). With the
flag set first, every interleaving of "stop" and "the agent raised" ends in
``Skip(stopped_voluntarily)``; a crash processed *before* the stop is a genuine death, and
the stop then lands during the backoff: ``recheck`` after the delay abandons the
resurrection. The same holds for ``mark_resurrecting``: set it when a resurrection is
decided (or inherited from a recovered ``resurrecting`` status), so a second notification
of the same death (the task's exit and a health-checker verdict) is skipped; clear it
(``clear_resurrecting``) before reporting that the resurrection itself failed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from ares.lifecycle.backoff import BackoffPolicy
from ares.lifecycle.state import AgentLifecycle, Status


class SkipReason(StrEnum):
    RUNTIME_STOPPING = "runtime_stopping"
    STOPPED_VOLUNTARILY = "stopped_voluntarily"
    ALREADY_RESURRECTING = "already_resurrecting"
    QUARANTINED = "quarantined"


class QuarantineReason(StrEnum):
    BUDGET_EXHAUSTED = "budget_exhausted"


@dataclass(frozen=True, slots=True)
class Resurrect:
    delay_s: float  # wait this long, then ``recheck``, then recover
    attempt: int  # deaths counted in the window, this one included (1 = first)
    nominal_s: float  # the backoff cap before jitter

    def metadata(self) -> dict[str, str]:
        """Event metadata with what the payload has no field for (the nominal delay)."""
        return {"ares.backoff.nominal_ms": str(round(self.nominal_s * 1000))}


@dataclass(frozen=True, slots=True)
class Skip:
    reason: SkipReason


@dataclass(frozen=True, slots=True)
class Quarantine:
    reason: QuarantineReason
    deaths_in_window: int


Decision = Resurrect | Skip | Quarantine


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Restart budget and backoff of one agent kind."""

    max_restarts: int = 5
    period_s: float = 60.0
    healthy_after_s: float = 60.0
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if not self.period_s > 0:
            raise ValueError(f"period_s must be > 0, got {self.period_s}")
        if not self.healthy_after_s >= 0:
            raise ValueError(f"healthy_after_s must be >= 0, got {self.healthy_after_s}")


@dataclass(frozen=True, slots=True)
class ResurrectionGuard:
    """Decisions for deaths; ``policies`` per agent kind, ``default`` for the others."""

    policies: Mapping[str, RestartPolicy] = field(default_factory=dict)
    default: RestartPolicy = field(default_factory=RestartPolicy)
    rand: Callable[[], float] = random.random  # jitter source: seed it for reproducibility

    def __post_init__(self) -> None:
        object.__setattr__(self, "policies", MappingProxyType(dict(self.policies)))

    def policy_for(self, kind: str) -> RestartPolicy:
        return self.policies.get(kind, self.default)

    def decide(self, state: AgentLifecycle, runtime_stopping: bool, now: float) -> Decision:
        """The answer to a death of ``state``'s agent at ``now`` (see the module docstring)."""
        if runtime_stopping:
            return Skip(SkipReason.RUNTIME_STOPPING)
        if state.stop_requested or state.status is Status.STOPPED:
            return Skip(SkipReason.STOPPED_VOLUNTARILY)
        if state.resurrecting:
            return Skip(SkipReason.ALREADY_RESURRECTING)
        if state.status is Status.QUARANTINED:
            return Skip(SkipReason.QUARANTINED)
        policy = self.policy_for(state.kind)
        deaths = len(counted_deaths(state, policy, now))
        if deaths > policy.max_restarts:
            return Quarantine(QuarantineReason.BUDGET_EXHAUSTED, deaths)
        return Resurrect(policy.backoff.delay(deaths, self.rand), deaths,
                         policy.backoff.nominal(deaths))

    def recheck(self, state: AgentLifecycle, runtime_stopping: bool) -> Skip | None:
        """Called by the resurrection itself after its backoff delay, before recovering:
        a stop, a shutdown or a quarantine that arrived meanwhile abandons it."""
        if runtime_stopping:
            return Skip(SkipReason.RUNTIME_STOPPING)
        if state.stop_requested or state.status is Status.STOPPED:
            return Skip(SkipReason.STOPPED_VOLUNTARILY)
        if state.status is Status.QUARANTINED:
            return Skip(SkipReason.QUARANTINED)
        return None

    def restarts_in_window(self, state: AgentLifecycle, now: float) -> int:
        """Deaths that count against the budget at ``now`` (``ares agents status``): none
        once the running incarnation has been healthy, else those inside the window."""
        policy = self.policy_for(state.kind)
        if (state.status is Status.RUNNING and state.started_at is not None
                and now - state.started_at >= policy.healthy_after_s):
            return 0
        return sum(1 for t in state.restarts if t > now - policy.period_s)


def counted_deaths(state: AgentLifecycle, policy: RestartPolicy,
                   now: float) -> tuple[float, ...]:
    """The deaths (epoch seconds, oldest first) that count for a death at ``now``.

    The death being decided is ``now`` unless the state already records it (status dead).
    If the incarnation that died ran at least ``healthy_after_s`` (``started_at`` is its
    start; the fold clears it when a resurrection is announced, so a resurrection that
    fails before running is never "healthy"), the deaths before it are forgiven. Of the
    rest, those in the window ``(now - period_s, now]`` count.
    """
    recorded = state.status is Status.DEAD and bool(state.restarts)
    deaths = state.restarts if recorded else (*state.restarts, now)
    death_at = deaths[-1]
    started = state.started_at
    if started is not None and death_at - started >= policy.healthy_after_s:
        return (death_at,)  # every earlier death ended an earlier incarnation
    horizon = now - policy.period_s
    return tuple(t for t in deaths if t > horizon) or (death_at,)


# -- payloads the host writes for a decision ---------------------------------------------


def resurrecting_payload(state: AgentLifecycle, decision: Resurrect,
                         cause: str | None = None) -> dict[str, Any]:
    """``agent.resurrecting``: the next incarnation, its parent, the attempt and delay."""
    return {"incarnation": state.incarnation + 1, "parent_incarnation": state.incarnation,
            "attempt": decision.attempt, "backoff_ms": round(decision.delay_s * 1000),
            "cause": cause if cause is not None else state.last_death_cause}


def quarantined_payload(decision: Quarantine) -> dict[str, Any]:
    """``agent.quarantined`` for a spent budget."""
    return {"reason": decision.reason.value, "deaths": decision.deaths_in_window}


__all__ = [
    "Decision", "Quarantine", "QuarantineReason", "RestartPolicy", "Resurrect",
    "ResurrectionGuard", "Skip", "SkipReason", "counted_deaths", "quarantined_payload",
    "resurrecting_payload",
]
