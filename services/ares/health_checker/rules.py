"""The judgments of the health checker's core: when an agent is dead, a resurrection late,
a loop due for its alert and quarantine, a worker lost. ``HealthState.due`` calls them with
the state folded so far; the rules themselves are documented in ``detector``."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ares.health_checker.model import (
    DEATH_LOOP,
    HEARTBEAT_TIMEOUT,
    RESURRECTION_LATE,
    STALLED,
    WORKER_LOST,
    Action,
    AgentView,
    DeclareDead,
    Outcome,
    Phase,
    QuarantineAgent,
    RaiseAlert,
    Verdict,
)

if TYPE_CHECKING:
    from ares.health_checker.detector import HealthState

log = logging.getLogger(__name__)
GROUP_STALE_S = 5.0  # a description of the runtime's group older than this is not trusted


def judge_agent(state: HealthState, view: AgentView, now: float,
                actions: list[Action]) -> None:
    _verdicts(state, view, now, actions)
    _feedback(state, view, now)
    _loops(state, view, now, actions)


def judge_workers(state: HealthState, now: float) -> None:
    _lost_workers(state, now)


def _verdicts(state: HealthState, view: AgentView, now: float, actions: list[Action]) -> None:
    if view.verdict is not None or not view.expects_beats:
        return
    part = state.partitions[view.partition]
    if part.last_beat is None:
        return
    silence = state.config.silence_for(part.interval_s)
    if now - part.last_beat > silence:
        return  # the owner itself is silent: the worker's failure, not the agent's
    # Clocks restart when the incarnation starts or the partition gets (back) an owner.
    settled = max(view.last_start or 0.0, part.owner_since)
    timeout = state.config.step_timeout_for(view.kind, view.declared_step_timeout)
    fresh = view.last_seen is not None and now - view.last_seen <= silence
    if timeout is not None and view.busy and fresh:
        since = max(view.last_progress or view.first_known or now, settled)
        if now - since > timeout:
            _declare(state, view, STALLED, now, since,
                          f"no progress for {now - since:.1f}s (step timeout "
                          f"{timeout:g}s; last note {view.seen_progress!r})", actions)
            return
    missing_since = max(view.last_seen or 0.0, settled)
    if now >= view.grace_until and part.last_beat - missing_since > silence:
        _declare(state, view, HEARTBEAT_TIMEOUT, now, view.last_seen or missing_since,
                      f"not in the heartbeats of {part.owner} for "
                      f"{part.last_beat - missing_since:.1f}s (silence {silence:g}s)",
                      actions)

def _declare(state: HealthState, view: AgentView, cause: str, now: float, evidence_at: float,
             detail: str, actions: list[Action]) -> None:
    action = DeclareDead(view.agent_id, cause, view.incarnation,
                         view.seen_worker or view.worker, view.last_seen, detail,
                         evidence_at, now)
    if state.claimable(action.key, now):  # else: a retry is not due yet
        view.verdict = Verdict(cause, view.incarnation, now, evidence_at)
        actions.append(action)

def _feedback(state: HealthState, view: AgentView, now: float) -> None:
    deadline = state.config.resurrection_deadline_s
    death = view.open_death
    if death is not None and not death.late and now - death.facts.at > deadline:
        death.late = True
        state.observer.resurrection(Outcome.LATE, None)
        where = ("announced, but no heartbeat of it yet" if death.resurrected_at
                 else "not announced")
        state.raise_alert(
            RESURRECTION_LATE, f"{RESURRECTION_LATE}/{view.agent_id}/{death.facts.event_id}",
            view.agent_id, "warning",
            f"agent {view.agent_id} died ({death.facts.cause}) {now - death.facts.at:.0f}s "
            f"ago and is not back: resurrection {where}", now,
            {"cause": death.facts.cause, "death_event": death.facts.event_id,
             "incarnation": str(death.facts.incarnation), "phase": view.phase.value})
    verdict = view.verdict
    if (verdict is not None and verdict.sent and not verdict.late_alerted
            and now - verdict.decided_at > deadline):
        verdict.late_alerted = True
        state.raise_alert(
            RESURRECTION_LATE,
            f"{RESURRECTION_LATE}/{view.agent_id}/verdict/{verdict.incarnation}",
            view.agent_id, "critical",
            f"agent {view.agent_id} was declared dead ({verdict.cause}) "
            f"{now - verdict.decided_at:.0f}s ago but its owner recorded no death "
            f"(reply: {verdict.reply or 'none'})", now,
            {"cause": verdict.cause, "incarnation": str(verdict.incarnation),
             "reply": verdict.reply})
    if (view.lost_from is not None and not view.lost_alerted
            and now - view.lost_at > deadline):
        view.lost_alerted = True
        state.raise_alert(
            RESURRECTION_LATE,
            f"{RESURRECTION_LATE}/{view.agent_id}/{WORKER_LOST}/{view.lost_from}",
            view.agent_id, "critical",
            f"agent {view.agent_id} was on lost worker {view.lost_from} and no other "
            f"worker has taken it over for {now - view.lost_at:.0f}s", now,
            {"cause": WORKER_LOST, "worker": view.lost_from})

def _loops(state: HealthState, view: AgentView, now: float, actions: list[Action]) -> None:
    loop = view.loop
    if loop is None:
        return
    if loop.alert_id not in state.emitted:
        fp = loop.fingerprint
        then = ("already quarantined" if view.phase is Phase.QUARANTINED
                else "quarantine requested")
        actions.append(RaiseAlert(
            loop.alert_id, DEATH_LOOP, view.agent_id, "critical",
            f"agent {view.agent_id} is in a death loop: {fp.deaths} deaths in "
            f"{loop.window_s:g}s; {fp.statement()}; {then}",
            {**fp.details(), "window_s": f"{loop.window_s:g}",
             "kind": view.kind or "", "detected_at": _iso(loop.detected_at)}, now))
        return
    if view.phase is Phase.QUARANTINED:
        return
    sent = loop.quarantine_sent_at
    if sent is None or now - sent > state.config.resurrection_deadline_s:
        actions.append(QuarantineAgent(
            view.agent_id, f"death_loop: {loop.fingerprint.statement()}"[:500],
            loop.fingerprint.deaths))

def _lost_workers(state: HealthState, now: float) -> None:
    for worker in list(state.workers.values()):
        silence = state.config.silence_for(worker.interval_s)
        if now - worker.last_beat > max(state.config.rebuild_lookback_s, silence):
            del state.workers[worker.worker_id]
            continue
        if worker.lost or now - worker.last_beat <= silence or worker.stopping:
            continue
        partitions = sorted(p for p in worker.agents if state.is_live(p))
        if not partitions or not _group_settled(state, now, silence):
            continue
        worker.lost = True
        hosted = sorted(a for p in partitions for a in worker.agents[p]
                        if _still_with(state, a, worker.worker_id))
        if not hosted:
            log.info("worker %s went silent with nothing left to take over",
                     worker.worker_id)
            continue
        for agent in hosted:
            view = state.agents[agent]
            view.lost_from, view.lost_at, view.lost_alerted = worker.worker_id, now, False
        member = state.group is not None and worker.worker_id in state.group.members
        beat_us = int(worker.last_beat * 1_000_000)
        state.raise_alert(
            WORKER_LOST, f"{WORKER_LOST}/{worker.worker_id}/{beat_us}/{partitions}",
            "", "critical",
            f"worker {worker.worker_id} lost: no heartbeat for "
            f"{now - worker.last_beat:.1f}s; it hosted {len(hosted)} agent(s): "
            f"{', '.join(hosted[:20])}{' ...' if len(hosted) > 20 else ''}", now,
            {"worker": worker.worker_id, "agents": ",".join(hosted),
             "partitions": ",".join(map(str, partitions)),
             "last_heartbeat": _iso(worker.last_beat),
             "group_member": "true" if member else "false"})

def _group_settled(state: HealthState, now: float, silence: float) -> bool:
    """No worker is judged while the runtime's group rebalances (its members pause
    their partitions) nor until a silence after it settled."""
    group = state.group
    if group is None or now - group.observed_at > GROUP_STALE_S:
        return group is None  # never described: judge on heartbeats alone
    since = state.group_stable_since
    return group.stable and since is not None and now - since > silence

def _still_with(state: HealthState, agent_id: str, worker_id: str) -> bool:
    view = state.agents.get(agent_id)
    return view is not None and view.seen_worker == worker_id and view.phase in (
        Phase.RUNNING, Phase.UNKNOWN, Phase.DEAD, Phase.RESURRECTING)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()
