"""The health checker's pure core: heartbeats and lifecycle events in, actions out.

``HealthState`` is fed the records of its partitions of ``ares.events`` and
``ares.heartbeats`` (``observe_event``, ``observe_heartbeat``) and asked, on every tick,
what is ``due`` at a given time: death verdicts for the agents' owners, alerts, quarantine
requests. The service carries them out and reports back (``completed``). Nothing here does
I/O or reads a clock, so every rule is unit-tested with chosen times.

Time: every instant is epoch seconds from the records themselves (event timestamps, the
heartbeat's own timestamp), so a state rebuilt by re-reading the topics after a restart is
the state the live checker had; ``now`` only decides what is overdue.

The rules, and why they produce no false verdict:

* **Silence** (``heartbeat_timeout``): an agent the events say runs, missing from the
  heartbeats of its partition's owner for longer than the silence (3 x the interval the
  worker declares), while that owner keeps beating. When the owner itself falls silent
  there is no per-agent verdict: the worker is reported (``worker_lost``) and the
  partition's next owner resumes the agents; a verdict sent to a dead owner would be read
  by that next owner and kill the incarnation it just resumed.
* **Stall** (``stalled``): an agent with an open task (not paused on an in-doubt tool call,
  nor in a durable wait for a signal or a timer: ``wait.started`` until ``wait.completed``)
  whose stream version and heartbeat progress note have not moved for its step timeout,
  while it is still listed in fresh heartbeats.
* **Grace**: no silence verdict within the grace period after ``agent.started``,
  ``agent.resurrected`` or ``agent.handed_off``; the silence and stall clocks restart when
  the incarnation starts and when a partition changes owner or comes back after a gap (a
  rebalance); never a verdict for stopped, quarantined or handed-off agents.
* **Workers**: a worker is lost when all its heartbeats stop for its silence while the
  runtime's consumer group is stable (not rebalancing) and it still had agents that were
  neither handed off, stopped nor taken over by another worker.
* **Feedback**: every ``agent.dead`` opens a death that ``agent.resurrected`` plus a
  heartbeat of the new incarnation confirms; past the deadline it is late (alert); a
  quarantine or a new death first makes it failed; a stop abandons it.
* **Loops**: judged in event time at each death, so a rebuild reaches the same verdict
  and the same alert id. Deaths are forgiven when the incarnation that died had lived
  ``healthy_after_s``, on ``agent.resumed`` and on a fresh ``agent.started``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from ares.events.model import Event
from ares.health_checker import rules
from ares.health_checker.config import HealthConfig
from ares.health_checker.fingerprint import DeathFacts, fingerprint
from ares.health_checker.model import (
    DEATH_LOOP,
    Action,
    AgentView,
    Death,
    DeclareDead,
    GroupState,
    Loop,
    Outcome,
    PartitionView,
    Phase,
    RaiseAlert,
    WorkerView,
    alert_id,
)
from ares.lifecycle import events as ev
from ares.lifecycle import transitions as tr
from ares.lifecycle.transitions import Status

log = logging.getLogger(__name__)

HANDED_OFF = ev.AGENT_HANDED_OFF
# Deaths that say nothing about the agent itself: an operator's kill, its worker dying.
NOT_COUNTED = frozenset({"killed", "worker_lost"})
# Events that are not the agent's work: the last work event is what it died after.
NOT_WORK_PREFIXES = ("agent.", "snapshot.", "heartbeat", "alert", "summary")


class HealthObserver(Protocol):
    """Where the core reports what metrics count (only for partitions it is live on)."""

    def verdict(self, cause: str, latency_s: float) -> None: ...

    def resurrection(self, outcome: Outcome, seconds: float | None) -> None: ...

    def alert(self, kind: str) -> None: ...


class _Silent:
    def verdict(self, cause: str, latency_s: float) -> None:
        return None

    def resurrection(self, outcome: Outcome, seconds: float | None) -> None:
        return None

    def alert(self, kind: str) -> None:
        return None


class HealthState:
    def __init__(self, config: HealthConfig, observer: HealthObserver | None = None) -> None:
        self.config = config
        self.observer: HealthObserver = observer or _Silent()
        self.agents: dict[str, AgentView] = {}
        self.workers: dict[str, WorkerView] = {}
        self.partitions: dict[int, PartitionView] = {}
        self.group: GroupState | None = None
        self.group_stable_since: float | None = None
        self.emitted: set[str] = set()  # alert ids known to be on ares.alerts
        self._outbox: dict[str, RaiseAlert] = {}  # raised, not yet known to be emitted
        self._in_flight: set[str] = set()
        self._not_before: dict[str, float] = {}

    # -- partitions ----------------------------------------------------------------------

    def assign(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self.partitions.setdefault(p, PartitionView())

    def set_live(self, partition: int) -> None:
        self.partitions.setdefault(partition, PartitionView()).live = True

    def is_live(self, partition: int) -> bool:
        view = self.partitions.get(partition)
        return view is not None and view.live

    def revoke(self, partitions: Iterable[int]) -> None:
        """Forget partitions (aiokafka revokes every partition in a rebalance: what is kept
        is rebuilt from the topics, raised alerts included, under the same ids)."""
        gone = set(partitions)
        self._outbox.clear()
        for p in gone:
            self.partitions.pop(p, None)
        self.agents = {k: v for k, v in self.agents.items() if v.partition not in gone}
        for worker in list(self.workers.values()):
            for p in gone:
                worker.agents.pop(p, None)
            if not worker.agents:
                del self.workers[worker.worker_id]

    def observe_group(self, group: GroupState) -> None:
        previous = self.group
        if not group.stable:
            self.group_stable_since = None
        elif previous is None:
            self.group_stable_since = float("-inf")  # stable as far as we know
        elif self.group_stable_since is None:
            self.group_stable_since = group.observed_at
        self.group = group

    # -- input: events -------------------------------------------------------------------

    def observe_event(self, partition: int, event: Event) -> None:
        view = self._agent(event.stream_id, partition)
        if event.version <= view.version:
            return  # seen already (a re-read after a rebalance)
        view.version = event.version
        ts = _epoch(event.timestamp)
        if view.first_known is None:
            view.first_known = ts
        view.last_progress = _later(view.last_progress, ts)
        # The lifecycle decides what the event is (and the status it leads to); the
        # checker only adds its clocks and verdicts on top.
        transition = tr.read(event)
        if transition is not None:
            self._react(view, event, transition, ts)
        if not event.type.startswith(NOT_WORK_PREFIXES):
            view.last_work = (event.type, event.version)
            if event.type == "tool.in_doubt":
                view.paused = True
            elif event.type == "tool.call.resolved":
                view.paused = False

    def _react(self, view: AgentView, event: Event, t: tr.Transition, ts: float) -> None:
        previous = view.phase
        if t.status is not None:
            view.phase = Phase(t.status.value)
        match t:
            case tr.Started():
                self._on_started(view, t, ts, previous)
            case tr.Stopped() | tr.Quarantined():
                # Quarantine: a death still open failed; stop: it was abandoned.
                outcome = Outcome.ABANDONED if isinstance(t, tr.Stopped) else Outcome.FAILED
                self._close_death(view, outcome, ts)
                view.verdict = None
                view.lost_from = None
            case tr.Died():
                self._on_dead(view, event, t, ts)
            case tr.Resurrected():
                self._on_resurrected(view, t, ts)
            case tr.Resumed():
                self._forgive(view, view.phase)
            case tr.HandedOff():
                view.phase = Phase.HANDED_OFF
                view.verdict = None
                view.grace_until = max(view.grace_until, ts + self._grace(view))
            case tr.TaskAssigned() if t.task_id:
                view.pending.add(t.task_id)
            case tr.TaskCompleted() | tr.TaskFailed():
                view.pending.discard(str(t.task_id))
            case tr.WaitStarted():
                view.waiting = True  # a durable wait: no progress is expected until it ends
            case tr.WaitCompleted():
                view.waiting = False
            case _:
                pass  # resurrecting (the phase says it all), snapshots

    def _on_started(self, view: AgentView, t: tr.Started, ts: float,
                    previous: Phase) -> None:
        if tr.starts_afresh(_status_of(previous)):
            self._forgive(view, previous)  # a new budget, as the runtime's fold has it
        view.kind = t.kind or view.kind
        view.declared_step_timeout = _declared_timeout(t.config_json)
        view.incarnation = t.incarnation or view.incarnation
        view.worker = t.worker
        self._started(view, ts)

    def _on_dead(self, view: AgentView, event: Event, t: tr.Died, ts: float) -> None:
        facts = self._death_facts(view, event, t, ts)
        self._close_death(view, Outcome.FAILED, ts)  # it died again before confirmation
        view.open_death = Death(facts)
        if view.verdict is not None and view.verdict.incarnation <= facts.incarnation:
            view.verdict = None  # the owner recorded the death we declared
        view.lost_from = None
        if view.last_start is not None and ts - view.last_start >= self.config.healthy_after_s:
            self._forgive(view, view.phase)  # the incarnation that died had been healthy
        if facts.cause not in NOT_COUNTED:
            view.deaths.append(facts)
        horizon = ts - self.config.loop_window_s
        view.deaths = [d for d in view.deaths if d.at > horizon]
        if view.loop is None and len(view.deaths) >= self.config.loop_deaths:
            view.loop = Loop(alert_id(f"{DEATH_LOOP}/{view.agent_id}/{event.id}"),
                             fingerprint(view.deaths), ts, self.config.loop_window_s)

    def _on_resurrected(self, view: AgentView, t: tr.Resurrected, ts: float) -> None:
        view.incarnation = t.incarnation or view.incarnation + 1
        view.worker = t.worker or view.worker
        view.lost_from = None
        self._started(view, ts)
        if view.open_death is not None:
            view.open_death.resurrected_at = ts
            view.open_death.incarnation = view.incarnation
            if view.seen_incarnation >= view.incarnation and view.seen_status == "running":
                self._confirm(view, _later(view.last_seen, ts))

    def _started(self, view: AgentView, ts: float) -> None:
        view.last_start = ts
        view.verdict = None
        view.grace_until = max(view.grace_until, ts + self._grace(view))

    def _death_facts(self, view: AgentView, event: Event, t: tr.Died,
                     ts: float) -> DeathFacts:
        work_type, work_version = view.last_work or (None, None)
        if work_type is None:  # the work before it predates what we read: the runtime's
            reported = t.last_event_type
            if reported is not None and not reported.startswith(NOT_WORK_PREFIXES):
                work_type, work_version = reported, t.last_version
        return DeathFacts(
            event_id=event.id, at=ts, cause=t.cause or "unknown",
            incarnation=t.incarnation or view.incarnation,
            error_type=t.error_type, error_message=t.error_message,
            traceback_digest=t.traceback_digest, last_event_type=work_type,
            last_version=work_version, progress=view.seen_progress)

    # -- input: heartbeats ---------------------------------------------------------------

    def observe_heartbeat(self, partition: int, worker_id: str, ts: float, interval_ms: int,
                          agents: Iterable[Mapping[str, Any]]) -> None:
        interval = interval_ms / 1000 if interval_ms > 0 else 1.0
        beats = list(agents)
        part = self.partitions.setdefault(partition, PartitionView())
        if part.last_beat is None or ts >= part.last_beat:
            gap = part.last_beat is not None and ts - part.last_beat > 2 * part.interval_s
            if part.owner != worker_id or gap:  # a new owner, or back after a rebalance
                part.owner_since = ts
            part.owner, part.last_beat, part.interval_s = worker_id, ts, interval
        worker = self.workers.get(worker_id)
        if worker is None:
            worker = self.workers[worker_id] = WorkerView(worker_id, interval, ts)
        if ts >= worker.last_beat:
            worker.last_beat, worker.interval_s = ts, interval
            worker.lost = False
            worker.stopping = bool(beats) and all(b.get("status") == "stopping" for b in beats)
        worker.agents[partition] = frozenset(str(b.get("agent_id")) for b in beats)
        for beat in beats:
            self._observe_beat(partition, worker_id, ts, beat)

    def _observe_beat(self, partition: int, worker_id: str, ts: float,
                      beat: Mapping[str, Any]) -> None:
        view = self._agent(str(beat.get("agent_id")), partition)
        if view.first_known is None:
            view.first_known = ts
        if view.last_seen is None or ts >= view.last_seen:
            version, incarnation = _int(beat, "version") or 0, _int(beat, "incarnation") or 0
            progress = _str(beat, "progress")
            if view.last_seen is not None and (
                    version != view.seen_version or incarnation != view.seen_incarnation
                    or progress != view.seen_progress):
                view.last_progress = _later(view.last_progress, ts)
            view.last_seen, view.seen_worker = ts, worker_id
            view.seen_version, view.seen_incarnation = version, incarnation
            view.seen_progress, view.seen_status = progress, _str(beat, "status")
        if view.lost_from is not None and worker_id != view.lost_from:
            view.lost_from = None  # another worker took it over
        death = view.open_death
        if (death is not None and death.incarnation is not None
                and view.seen_incarnation >= death.incarnation
                and view.seen_status == "running" and ts >= (death.resurrected_at or 0)):
            self._confirm(view, ts)

    # -- feedback ------------------------------------------------------------------------

    def _confirm(self, view: AgentView, at: float) -> None:
        death, view.open_death = view.open_death, None
        if death is None:
            return
        if not death.late and self.is_live(view.partition):
            self.observer.resurrection(Outcome.CONFIRMED, max(at - death.facts.at, 0.0))
        if death.late:
            log.info("agent %s: late resurrection confirmed %.1fs after its death",
                     view.agent_id, at - death.facts.at)

    def _close_death(self, view: AgentView, outcome: Outcome, at: float) -> None:
        death, view.open_death = view.open_death, None
        if death is not None and self.is_live(view.partition):
            self.observer.resurrection(outcome, None)

    def _forgive(self, view: AgentView, phase: Phase) -> None:
        """Forget the deaths; a loop is kept while the agent is (was, for a start right
        after a quarantine) quarantined: its alert and quarantine stand."""
        view.deaths.clear()
        if phase is not Phase.QUARANTINED:
            view.loop = None

    # -- output --------------------------------------------------------------------------

    def due(self, now: float) -> list[Action]:
        """What should be done at ``now``; each action is handed out once until
        ``completed`` reports it (a failed one again after ``retry_s``)."""
        actions: list[Action] = []
        for view in list(self.agents.values()):
            if not self.is_live(view.partition):
                continue
            rules.judge_agent(self, view, now, actions)
        rules.judge_workers(self, now)
        actions.extend(a for a in self._outbox.values() if a.id not in self.emitted)
        return [a for a in actions if self._claim(a.key, now)]

    def completed(self, action: Action, ok: bool, now: float, reply: str = "") -> None:
        self._in_flight.discard(action.key)
        if not ok:
            self._not_before[action.key] = now + self.config.retry_s
            if isinstance(action, DeclareDead):
                view = self.agents.get(action.agent_id)
                if view is not None and view.verdict is not None and not view.verdict.sent:
                    view.verdict = None  # judged again at the retry
            return
        self._not_before.pop(action.key, None)
        if isinstance(action, RaiseAlert):
            self.emitted.add(action.id)
            self._outbox.pop(action.id, None)
            self.observer.alert(action.kind)
        elif isinstance(action, DeclareDead):
            view = self.agents.get(action.agent_id)
            if view is not None and view.verdict is not None:
                view.verdict.sent, view.verdict.reply = True, reply
            self.observer.verdict(action.cause, max(action.decided_at - action.evidence_at, 0))
        else:
            view = self.agents.get(action.agent_id)
            if view is not None and view.loop is not None:
                view.loop.quarantine_sent_at = now

    def claimable(self, key: str, now: float) -> bool:
        return key not in self._in_flight and self._not_before.get(key, 0.0) <= now

    def _claim(self, key: str, now: float) -> bool:
        if not self.claimable(key, now):
            return False
        self._in_flight.add(key)
        return True

    def raise_alert(self, kind: str, key: str, stream_id: str, severity: str, message: str,
               now: float, details: dict[str, str]) -> None:
        """Put an alert in the outbox: offered by ``due`` until it is emitted."""
        alert = RaiseAlert(alert_id(key), kind, stream_id, severity, message, details, now)
        if alert.id not in self.emitted:
            self._outbox.setdefault(alert.id, alert)

    # -- views ---------------------------------------------------------------------------

    def overdue_workers(self, now: float) -> bool:
        """Whether some worker is past its silence (the service then describes the group)."""
        return any(not w.lost and now - w.last_beat > self.config.silence_for(w.interval_s)
                   for w in self.workers.values())

    def counts(self, now: float) -> dict[str, int]:
        """Agents by state for the gauges: alive, dead, quarantined, stopped, other."""
        counts = dict.fromkeys(("alive", "dead", "quarantined", "stopped", "other"), 0)
        for view in self.agents.values():
            if not self.is_live(view.partition):
                continue
            if view.phase is Phase.QUARANTINED:
                counts["quarantined"] += 1
            elif view.phase is Phase.STOPPED:
                counts["stopped"] += 1
            elif view.phase in (Phase.DEAD, Phase.RESURRECTING) or view.verdict is not None:
                counts["dead"] += 1
            elif view.expects_beats and view.last_seen is not None:
                counts["alive"] += 1
            else:
                counts["other"] += 1
        return counts

    def prune(self, now: float) -> None:
        """Forget agents nothing was heard of for the lookback (stopped, gone)."""
        horizon = now - self.config.rebuild_lookback_s
        for agent_id, view in list(self.agents.items()):
            heard = max(view.last_seen or 0.0, view.last_progress or 0.0)
            if (heard < horizon and view.open_death is None and view.loop is None
                    and view.phase in (Phase.UNKNOWN, Phase.STOPPED, Phase.HANDED_OFF)):
                del self.agents[agent_id]

    def _agent(self, agent_id: str, partition: int) -> AgentView:
        view = self.agents.get(agent_id)
        if view is None:
            view = self.agents[agent_id] = AgentView(agent_id, partition)
        return view

    def _grace(self, view: AgentView) -> float:
        part = self.partitions.get(view.partition)
        return self.config.grace_for(part.interval_s if part is not None else 1.0)


def _status_of(phase: Phase) -> Status | None:
    """The lifecycle status behind a phase (``None``: no lifecycle event read yet); a
    hand-off leaves the status as it was, running."""
    if phase is Phase.UNKNOWN:
        return None
    return Status.RUNNING if phase is Phase.HANDED_OFF else Status(phase.value)


def _epoch(ts: datetime) -> float:
    return (ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)).timestamp()


def _later(a: float | None, b: float) -> float:
    return b if a is None else max(a, b)


def _str(p: Mapping[str, Any], key: str) -> str | None:
    value = p.get(key)
    return value if isinstance(value, str) else None


def _int(p: Mapping[str, Any], key: str) -> int | None:
    value = p.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _declared_timeout(config_json: str | None) -> float | None:
    """The agent's own step timeout: ``step_timeout_s`` in its config."""
    if not config_json:
        return None
    try:
        value = json.loads(config_json).get("step_timeout_s")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
