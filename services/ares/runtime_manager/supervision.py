"""Supervision of hosted agents: a death recorded, the guard consulted, the agent
rebuilt from its snapshot and the log (integrity checked on the way), and resumed.

Functions of the ``AgentHost`` they act for (the host owns the state; this module owns the
decisions about a life that ended): ``spawn`` starts an incarnation under ``supervise``,
which turns its end into ``after_death`` and, if the ``ResurrectionGuard`` says so,
``resurrect``; ``resume_after_recovery`` does the same for an agent found running in the
log of a partition just taken over.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiokafka import TopicPartition

from ares import metrics
from ares.agents.errors import AgentConfigError, UnknownAgentKindError
from ares.errors import AresError, FencedError
from ares.events.kafka.snapshots import Snapshot, load_snapshots
from ares.events.model import NewEvent
from ares.events.writer import StreamTable
from ares.lifecycle import events as ev
from ares.lifecycle import state as lc
from ares.lifecycle.recovery import RecoveryRecord
from ares.lifecycle.verification import VerificationFailure
from ares.runtime_manager.guard import (
    Quarantine,
    Resurrect,
    Skip,
    SkipReason,
    quarantined_payload,
    resurrecting_payload,
)
from ares.runtime_manager.host_commands import MODULE
from ares.runtime_manager.hosted import AgentSinkImpl, HostedAgent, run_open_tasks
from ares.runtime_manager.replay import (
    AgentReplay,
    replay_start,
)
from ares.topics import ALERTS, COMMANDS, EVENTS, SNAPSHOTS

if TYPE_CHECKING:
    from ares.runtime_manager.host import AgentHost, PartitionState

log = logging.getLogger("ares.runtime_manager.host")  # one logger for the host's story


def spawn(host: AgentHost, state: PartitionState, hosted: HostedAgent) -> None:
    if hosted.running:
        return
    host.hosted_here.add(hosted.agent_id)
    if hosted.agent is None:
        hosted.agent = host.registry.create(hosted.lifecycle.kind, hosted.agent_id,
                                            hosted.lifecycle.config)
    hosted.supervisor = asyncio.create_task(supervise(host, state, hosted),
                                            name=f"agent-{hosted.agent_id}")

async def supervise(host: AgentHost, state: PartitionState, hosted: HostedAgent) -> None:
    """Runs incarnations until the agent stops, is quarantined or the host stops."""
    while True:
        sink = AgentSinkImpl(hosted, state.writer, host.plan.name(ALERTS),
                             host.plan.name(COMMANDS), host.plan.partitions)
        hosted.incarnation_task = asyncio.create_task(
            run_open_tasks(hosted, sink, host.services, host.on_paused))
        error: BaseException | None = None
        try:
            await hosted.incarnation_task
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the supervisor itself is stopped
            cause = hosted.kill_cause or "cancelled"
        except FencedError:
            return  # the partition moved: the new owner resumes the agent
        except Exception as exc:  # the agent crashed: that is what we are here for
            cause, error = "exception", exc
        hosted.kill_cause = None
        try:
            successor = await after_death(host, state, hosted, cause, error)
            if successor is None:
                return
            hosted = successor  # the rebuilt agent runs the next incarnation
        except (FencedError, asyncio.CancelledError):
            return
        except AresError as exc:
            log.error("agent %s: resurrection failed: %s", hosted.agent_id, exc)
            return

async def death_of_unhosted(host: AgentHost, state: PartitionState, hosted: HostedAgent,
                             cause: str) -> None:
    try:
        successor = await after_death(host, state, hosted, cause, None)
    except AresError as exc:
        log.error("agent %s: death not handled: %s", hosted.agent_id, exc)
        return
    if successor is not None:
        spawn(host, state, successor)

async def after_death(host: AgentHost, state: PartitionState, hosted: HostedAgent, cause: str,
                       error: BaseException | None) -> HostedAgent | None:
    """Record the death and decide; the rebuilt agent when a new incarnation runs."""
    decision = host.guard.decide(hosted.lifecycle, host.stopping, time.time())
    if isinstance(decision, Skip) and decision.reason in (
            SkipReason.RUNTIME_STOPPING, SkipReason.STOPPED_VOLUNTARILY):
        return None  # a stop or a shutdown cancelled it: no death to record
    dead = NewEvent(lc.AGENT_DEAD, MODULE, lc.dead_payload(
        hosted.lifecycle, cause, error_type=None if error is None else type(error).__name__,
        error_message=None if error is None else str(error)[:1000],
        traceback_digest=None if error is None else traceback_digest(error)))
    if isinstance(decision, Quarantine):
        await host.append_events(state, hosted, [dead, NewEvent(
            lc.AGENT_QUARANTINED, MODULE, quarantined_payload(decision))], alert=(
            "agent_quarantined", f"restart budget exhausted after "
            f"{decision.deaths_in_window} deaths (last: {cause})", "critical",
            {"cause": cause, "error": repr(error)[:500]}))
        return None
    if isinstance(decision, Skip):
        await host.append_events(state, hosted, [dead])
        return None
    assert isinstance(decision, Resurrect)
    return await resurrect(host, state, hosted, decision, [dead], cause)

async def resurrect(host: AgentHost, state: PartitionState, hosted: HostedAgent,
                    decision: Resurrect, before: Sequence[NewEvent],
                    cause: str) -> HostedAgent | None:
    hosted.lifecycle = lc.mark_resurrecting(hosted.lifecycle)
    parent = hosted.lifecycle.incarnation
    resurrecting = NewEvent(lc.AGENT_RESURRECTING, MODULE,
                            resurrecting_payload(hosted.lifecycle, decision, cause),
                            metadata=decision.metadata())
    await host.append_events(state, hosted, [*before, resurrecting])
    if decision.delay_s > 0:
        await asyncio.sleep(decision.delay_s)
    if host.guard.recheck(hosted.lifecycle, host.stopping) is not None:
        hosted.lifecycle = lc.clear_resurrecting(hosted.lifecycle)
        return None
    hosted.buffer = []
    try:
        replay = await replay_agent(host, state, hosted)
    except IntegrityFailure as failure:
        # The log does not verify: never resume with silently partial state.
        hosted.lifecycle = lc.clear_resurrecting(hosted.lifecycle)
        await quarantine_hosted(host, state, hosted, failure.kind, failure.version,
                                      failure.detail)
        return None
    finally:
        buffered, hosted.buffer = hosted.buffer, None
    record = replay.record(time.monotonic())
    resume_started = time.monotonic()
    fresh = replay.hosted
    for event, offset in buffered or ():  # committed while the replay ran
        if event.version > fresh.lifecycle.version:
            fresh.on_event(event, offset)
    install(host, state, hosted, fresh)
    if host.guard.recheck(fresh.lifecycle, host.stopping) is not None:
        return None  # stopped while it was being rebuilt
    # Resume: from the rebuilt agent to its resurrection appended (this event can only
    # carry what happened before it is sealed).
    record = record.resumed(time.monotonic() - resume_started)
    await host.append_events(state, fresh, [NewEvent(
        lc.AGENT_RESURRECTED, MODULE,
        record.to_payload(incarnation=parent + 1, parent_incarnation=parent,
                          worker=host.worker_id),
        metadata=record.to_metadata())])
    fresh.lifecycle = lc.clear_resurrecting(fresh.lifecycle)
    recovered(host, record, cause)
    return fresh

async def replay_agent(host: AgentHost, state: PartitionState, hosted: HostedAgent) -> AgentReplay:
    """A single agent rebuilt from Kafka: its snapshot, then its events after it."""
    assert host._scanner is not None
    started = time.monotonic()
    partition = state.writer.partition
    snapshots = await load_snapshots(host._scanner, host.plan.name(SNAPSHOTS), partition,
                                     host.reject)
    await host.flush_dead_letters()
    snapshot = snapshots.get(hosted.agent_id)
    replay = AgentReplay(hosted.agent_id, partition, snapshot, started=started,
                         load_s=time.monotonic() - started)
    tp = TopicPartition(host.plan.name(EVENTS), partition)
    await host._scanner.wait_until_stable(tp, state.writer.committed_end)
    async for offset, event in host._scanner.scan(tp, replay_start(snapshot),
                                                  hosted.agent_id.encode()):
        replay.feed(offset, event)
    failure = replay.finish(state.writer.table.head(hosted.agent_id))
    if failure is not None and failure.discard_snapshot:
        log.warning("agent %s: snapshot discarded (%s): full replay", hosted.agent_id,
                    failure.detail)
        replay = AgentReplay(hosted.agent_id, partition, None, started=started)
        async for offset, event in host._scanner.scan(tp, None, hosted.agent_id.encode()):
            replay.feed(offset, event)
        failure = replay.finish(state.writer.table.head(hosted.agent_id))
    if failure is not None:
        raise IntegrityFailure(failure.kind, failure.version, failure.detail)
    replay.build_agent(host.registry)
    return replay

def install(host: AgentHost, state: PartitionState, old: HostedAgent, fresh: HostedAgent) -> None:
    """The rebuilt agent takes the old one's place (same supervisor task, same flags)."""
    if old.lifecycle.stop_requested:
        fresh.lifecycle = lc.mark_stop_requested(fresh.lifecycle)
    fresh.lifecycle = lc.mark_resurrecting(fresh.lifecycle)
    fresh.supervisor = old.supervisor
    state.agents[old.agent_id] = fresh
    old.supervisor = None

# -- recovery of a partition ---------------------------------------------------------

async def adopt(host: AgentHost, state: PartitionState, replay: AgentReplay, table: StreamTable,
                 replay_done: float, live_workers: frozenset[str]) -> None:
    """After the partition scan: verify the stream, host the agent, resume it.
    ``live_workers``: the group's members as the takeover found them."""
    failure = replay.finish(table.head(replay.stream_id))
    discarded = None
    if failure is not None and failure.discard_snapshot:
        discarded = failure.detail
        replay, failure = await rescan(host, replay, None, table)
    if not replay.hosted.lifecycle.kind:
        return  # a stream that is no agent's
    try:
        if failure is None and not replay.build_agent(host.registry):
            # Its apply needs the events the partition scan let go: read them again.
            replay, failure = await rescan(host, replay, replay.snapshot, table)
            if failure is None:
                replay.build_agent(host.registry)
    except (UnknownAgentKindError, AgentConfigError) as exc:
        log.error("agent %s cannot be hosted here: %s", replay.stream_id, exc)
        state.agents[replay.stream_id] = replay.hosted
        return
    if failure is not None:
        await quarantine_for_integrity(host, state, replay, failure.kind, failure.version,
                                             failure.detail)
        return
    hosted = replay.hosted
    life = hosted.lifecycle
    state.agents[hosted.agent_id] = hosted
    if not life.is_live or host.stopping:
        return
    resume_started = time.monotonic()
    record = replay.record(replay_done, discarded=discarded)
    try:
        await resume_after_recovery(host, state, hosted, record, resume_started,
                                    live_workers)
    except (FencedError, asyncio.CancelledError):
        return

async def rescan(host: AgentHost, replay: AgentReplay, snapshot: Snapshot | None,
                  table: StreamTable) -> tuple[AgentReplay, VerificationFailure | None]:
    """``replay``'s stream read again on its own (its key), from ``snapshot`` (None: from
    the log start), every event kept for the agent's apply; and its verdict."""
    assert host._scanner is not None
    fresh = AgentReplay(replay.stream_id, replay.partition, snapshot)
    tp = TopicPartition(host.plan.name(EVENTS), replay.partition)
    async for offset, event in host._scanner.scan(tp, replay_start(snapshot),
                                                  replay.stream_id.encode()):
        fresh.feed(offset, event)
    return fresh, fresh.finish(table.head(replay.stream_id))

async def resume_after_recovery(host: AgentHost, state: PartitionState, hosted: HostedAgent,
                                 record: RecoveryRecord, resume_started: float,
                                 live_workers: frozenset[str]) -> None:
    life = hosted.lifecycle
    if life.status is lc.Status.STARTING:  # resumed by an operator, not started yet
        await host.append_events(state, hosted, [NewEvent(lc.AGENT_STARTED, MODULE, {
            "kind": life.kind, "config_json": life.config_json,
            "incarnation": life.incarnation + 1, "worker": host.worker_id})])
        return
    moved = life.worker is not None and (
        life.worker in live_workers and not (
            life.worker == host.worker_id and hosted.agent_id not in host.hosted_here))
    if life.last_event_type == ev.AGENT_HANDED_OFF or (life.status is lc.Status.RUNNING and moved):
        before: list[NewEvent] = []  # its worker is alive: handed over, not dead
        cause = "handoff" if life.last_event_type == ev.AGENT_HANDED_OFF else "rebalance"
    elif life.status is lc.Status.RUNNING:
        before = [NewEvent(lc.AGENT_DEAD, MODULE, lc.dead_payload(life, "worker_lost"))]
        cause = "worker_lost"
    else:  # dead or resurrecting when its worker went away
        before, cause = [], life.last_death_cause or "worker_lost"
    if cause not in ("handoff", "rebalance"):
        decision = host.guard.decide(life, False, time.time())
        if isinstance(decision, Quarantine):
            await host.append_events(state, hosted, [*before, NewEvent(
                lc.AGENT_QUARANTINED, MODULE, quarantined_payload(decision))])
            return
        if not isinstance(decision, Resurrect):
            if before:
                await host.append_events(state, hosted, before)
            return
        before.append(NewEvent(lc.AGENT_RESURRECTING, MODULE,
                               resurrecting_payload(life, decision, cause),
                               metadata=decision.metadata()))
    parent = life.incarnation
    record = record.resumed(time.monotonic() - resume_started)  # measured here, not patched
    metadata = {**record.to_metadata(), "ares.recovery.cause": cause}
    await host.append_events(state, hosted, [*before, NewEvent(
        lc.AGENT_RESURRECTED, MODULE,
        record.to_payload(incarnation=parent + 1, parent_incarnation=parent,
                          worker=host.worker_id), metadata=metadata)])
    recovered(host, record, cause)
    spawn(host, state, hosted)

async def quarantine_for_integrity(host: AgentHost, state: PartitionState, replay: AgentReplay,
                                    kind: str, version: int, detail: str) -> None:
    hosted = replay.hosted
    state.agents[hosted.agent_id] = hosted
    if replay.quarantined_after_failure:
        return  # an earlier recovery quarantined it already: one verdict, one alert
    await quarantine_hosted(host, state, hosted, kind, version, detail)

async def quarantine_hosted(host: AgentHost, state: PartitionState, hosted: HostedAgent, kind: str,
                             version: int, detail: str) -> None:
    message = f"integrity failure at version {version}: {kind}: {detail}"
    log.error("agent %s: %s", hosted.agent_id, message)
    if hosted.lifecycle.status is lc.Status.QUARANTINED:
        return
    hosted.lifecycle = lc.mark_stop_requested(hosted.lifecycle)
    await host.append_events(state, hosted, [NewEvent(lc.AGENT_QUARANTINED, MODULE, {
        "reason": f"integrity:{kind}", "deaths": 0})], alert=(
        "integrity_failure", message, "critical", {"kind": kind, "version": version}))

# -- helpers -------------------------------------------------------------------------

def recovered(host: AgentHost, record: RecoveryRecord, cause: str) -> None:
    host.recoveries.append(record)
    metrics.RESURRECTIONS.labels(cause).inc()
    for phase, seconds in (("load", record.load_s), ("replay", record.replay_s),
                           ("resume", record.resume_s)):
        if seconds is not None:
            metrics.RECOVERY_SECONDS.labels(phase).observe(seconds)
    host.count_agents()


class IntegrityFailure(AresError):
    def __init__(self, kind: str, version: int, detail: str) -> None:
        super().__init__(f"{kind} at version {version}: {detail}")
        self.kind, self.version, self.detail = kind, version, detail


def traceback_digest(error: BaseException) -> str:
    """Where it died, not the exact text: frames (file, function) hashed, for fingerprints."""
    frames = traceback.extract_tb(error.__traceback__)
    shape = "|".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.name}" for f in frames)
    return hashlib.sha256(f"{type(error).__name__}|{shape}".encode()).hexdigest()[:16]
