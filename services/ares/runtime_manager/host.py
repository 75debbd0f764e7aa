"""The agent host: births, deaths and resurrections of the agents of owned partitions.

The host is the partition owner's command handler for everything that is not a plain
append. It changes an agent's state only by appending events and reacting to them once they
are committed (``_on_commit``), so what runs always matches what the log says. Deaths go
through the ``ResurrectionGuard``; recovery rebuilds agents from snapshots plus the log
(``replay.py``) and verifies every stream's hash chain on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka import TopicPartition

from ares import metrics
from ares.agents.errors import AgentConfigError, UnknownAgentKindError
from ares.agents.host_api import AgentServices, TaskOutcome
from ares.agents.registry import AgentRegistry
from ares.commands.model import (
    Command,
    InvalidCommandError,
    Reply,
    ReplyStatus,
    with_command_metadata,
)
from ares.config import Settings
from ares.errors import AresError, FencedError
from ares.events.canonical import canonical_json
from ares.events.kafka_reader import PartitionScanner
from ares.events.kafka_store import open_writer
from ares.events.model import ANY_VERSION, NewEvent, StreamHead
from ares.events.partition_writer import PartitionWriter, TransactionScope
from ares.events.snapshots import Snapshot, load_snapshots
from ares.events.writer import AppendPlan, StreamTable
from ares.lifecycle import events as ev
from ares.lifecycle import state as lc
from ares.lifecycle.recovery import (
    CHECKPOINT_KEY,
    CHECKPOINT_KIND,
    RecoveryRecord,
    VerificationFailure,
)
from ares.runtime_manager.alerts import alert_record
from ares.runtime_manager.guard import (
    Quarantine,
    Resurrect,
    ResurrectionGuard,
    Skip,
    SkipReason,
    quarantined_payload,
    resurrecting_payload,
)
from ares.runtime_manager.heartbeats import AgentBeat
from ares.runtime_manager.hosted import AgentSinkImpl, HostedAgent, run_open_tasks
from ares.runtime_manager.replay import (
    AgentReplay,
    old_heap_frozen,
    replay_start,
    snapshot_state,
)
from ares.tasks import cancel_and_wait
from ares.topics import ALERTS, EVENTS, SNAPSHOTS, TopicPlan

log = logging.getLogger(__name__)
MODULE = "runtime-manager"
HANDED_OFF = ev.AGENT_HANDED_OFF
# Command metadata of a health verdict: the incarnation it judged.
INCARNATION_META = "ares.incarnation"


@dataclass(frozen=True, slots=True)
class HostConfig:
    snapshot_every: int = 200  # events of an agent between automatic snapshots
    checkpoint_every_s: float = 30.0  # partition checkpoints (all stream heads)


@dataclass(slots=True)
class _Partition:
    writer: PartitionWriter
    agents: dict[str, HostedAgent] = field(default_factory=dict)
    last_checkpoint: float = field(default_factory=time.monotonic)


class AgentHost:
    def __init__(self, settings: Settings, plan: TopicPlan, registry: AgentRegistry,
                 worker_id: str, services: AgentServices | None = None,
                 guard: ResurrectionGuard | None = None,
                 config: HostConfig | None = None) -> None:
        self.settings = settings
        self.plan = plan
        self.registry = registry
        self.worker_id = worker_id
        self.services = services or AgentServices.from_env()
        self.guard = guard or ResurrectionGuard()
        self.config = config or HostConfig()
        self.stopping = False
        self.partitions: dict[int, _Partition] = {}
        self.recoveries: list[RecoveryRecord] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._scanner: PartitionScanner | None = None
        self._live_workers: frozenset[str] = frozenset()
        self._hosted_here: set[str] = set()  # agents this process has run

    # -- what the owner asks of the host -------------------------------------------------

    def agents(self) -> list[HostedAgent]:
        return [a for p in self.partitions.values() for a in p.agents.values()]

    def beats(self) -> list[AgentBeat]:
        """Liveness of the agents running here; while draining, every agent as "stopping"
        so a health checker tells a slow graceful stop from a lost worker."""
        if self.stopping:
            return [replace(a.beat, status="stopping") for a in self.agents()
                    if a.beat is not None and a.lifecycle.is_live]
        return [a.beat for a in self.agents() if a.beat is not None and a.running]

    async def open_partition(self, partition: int, scanner: PartitionScanner,
                             live_workers: frozenset[str] = frozenset()) -> PartitionWriter:
        """Recover partition ``partition``: snapshots, one scan, verify, resume agents.

        ``live_workers``: the group's members now. An agent whose last worker is among them
        was handed over by a rebalance (no death); one whose worker is gone died with it.
        """
        self._scanner = scanner
        self._live_workers = live_workers
        started = time.monotonic()
        replays: dict[str, AgentReplay] = {}
        loaded = 0.0

        async def plan_scan() -> tuple[int | None, StreamTable]:
            """After the fence: the previous owner can no longer write a newer snapshot."""
            nonlocal loaded
            snapshots = await load_snapshots(scanner, self.plan.name(SNAPSHOTS), partition)
            table, start = _seed_from(snapshots.pop(CHECKPOINT_KEY, None), snapshots)
            loaded = time.monotonic() - started
            replays.update((sid, AgentReplay(sid, partition, snap, started=started,
                                             load_s=loaded, registry=self.registry))
                           for sid, snap in snapshots.items())
            return start, table

        def observe(offset: int, event: Any) -> None:
            replay = replays.get(event.stream_id)
            if replay is None:
                replay = replays[event.stream_id] = AgentReplay(
                    event.stream_id, partition, None, started=started, load_s=loaded,
                    registry=self.registry)
            replay.feed(offset, event)

        with old_heap_frozen():
            writer = await open_writer(self.settings, self.plan.name(EVENTS), partition,
                                       scanner, plan_scan=plan_scan, observer=observe)
            for replay in replays.values():
                replay.settle()  # the streams' last runs: verified and folded in the replay
        table = writer.table
        replay_done = time.monotonic()
        state = _Partition(writer)
        self.partitions[partition] = state
        writer.listeners.append(lambda plan, offsets: self._on_commit(partition, plan, offsets))
        resumes = [self._adopt(state, replay, table, replay_done) for replay in replays.values()]
        await asyncio.gather(*resumes)
        self._count_agents()
        return writer

    async def suspend_partition(self, partition: int) -> None:
        """A rebalance started: pause the partition's agents, keep their state."""
        state = self.partitions.get(partition)
        if state is not None:
            await self._stop_agents(state.agents.values())
            # A stopped incarnation's queued appends still commit (cancelling the caller
            # does not withdraw its work item): wait for them, so every agent's journal
            # holds all its committed events before it runs again.
            with contextlib.suppress(AresError):
                await state.writer.submit(_nothing)

    async def resume_partition(self, partition: int) -> None:
        """The partition came back after a rebalance: run its live agents again."""
        state = self.partitions.get(partition)
        if state is None or self.stopping:
            return
        for hosted in state.agents.values():
            life = hosted.lifecycle
            if life.is_live and life.status is lc.Status.RUNNING and hosted.agent is not None:
                self._spawn(state, hosted)

    async def release_partition(self, partition: int) -> None:
        """Ownership moved away: stop the partition's agents without writing anything (the
        new owner resumes them; our writer is or will be fenced)."""
        state = self.partitions.pop(partition, None)
        if state is None:
            return
        await self._stop_agents(state.agents.values())

    async def drain(self) -> None:
        """Graceful shutdown: stop every agent, record the hand-off and final snapshots."""
        self.stopping = True
        for state in self.partitions.values():
            await self._stop_agents(state.agents.values())
        for partition, state in list(self.partitions.items()):
            live = [a for a in state.agents.values() if a.lifecycle.is_live]

            async def handoff(tx: TransactionScope, live: list[HostedAgent] = live,
                              partition: int = partition) -> None:
                # Snapshots first: the hand-off must be each stream's last event, which is
                # how the next owner tells a graceful hand-off from a death.
                for hosted in live:
                    await self._write_snapshot(tx, partition, hosted)
                for hosted in live:
                    await tx.append(hosted.agent_id, [NewEvent(
                        HANDED_OFF, MODULE, {"worker": self.worker_id, "reason": "shutdown"})],
                        ANY_VERSION)
                await self._write_checkpoint(tx, partition)

            try:
                await state.writer.submit(handoff)
            except AresError as exc:
                log.warning("partition %d: final snapshots not written (%s)", partition, exc)
        self.partitions.clear()

    async def handle(self, tx: TransactionScope, command: Command) -> Reply:
        partition = self._partition_of(command.stream_id)
        state = self.partitions.get(partition)
        if state is None:
            return _reply(command, ReplyStatus.REJECTED, message="partition not recovered yet")
        hosted = state.agents.get(command.stream_id)
        handler = _HANDLERS.get(command.type)
        if handler is None:
            raise InvalidCommandError("unknown_command", f"no handler for {command.type!r}")
        return await handler(self, _Stamped(tx, command), state, hosted, command)

    async def close(self) -> None:
        await cancel_and_wait(*self._background, ignore_errors=True)
        await self.services.close()

    # -- commands (inside the owner's transaction) ---------------------------------------

    async def _cmd_start(self, tx: TransactionScope, state: _Partition, hosted: HostedAgent | None,
                         command: Command) -> Reply:
        kind = str(command.payload["kind"])
        config_json = str(command.payload.get("config_json") or "{}")
        try:
            config = json.loads(config_json)
            self.registry.create(kind, command.stream_id, config)  # validates kind and config
        except (UnknownAgentKindError, AgentConfigError, ValueError) as exc:
            raise InvalidCommandError("invalid_agent", str(exc)) from exc
        if hosted is not None and hosted.lifecycle.is_live:
            return _reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                          "already running")
        if hosted is not None and hosted.lifecycle.version > 0:
            return _reply(command, ReplyStatus.REJECTED, hosted.lifecycle.version,
                          f"agent is {hosted.lifecycle.status.value}: use `ares agents resume`")
        incarnation = 1 if hosted is None else hosted.lifecycle.incarnation + 1
        version = await tx.append(command.stream_id, [NewEvent(lc.AGENT_STARTED, MODULE, {
            "kind": kind, "config_json": canonical_json(config), "incarnation": incarnation,
            "worker": self.worker_id})], ANY_VERSION)
        return _reply(command, ReplyStatus.OK, version)

    async def _cmd_stop(self, tx: TransactionScope, state: _Partition, hosted: HostedAgent | None,
                        command: Command) -> Reply:
        if hosted is None:
            return _unknown(command)
        # The flag before anything else: a crash racing this stop must not resurrect.
        hosted.lifecycle = lc.mark_stop_requested(hosted.lifecycle)
        if hosted.lifecycle.status is lc.Status.STOPPED:
            return _reply(command, ReplyStatus.OK, hosted.lifecycle.version, "already stopped")
        version = await tx.append(command.stream_id, [NewEvent(lc.AGENT_STOPPED, MODULE, {
            "reason": str(command.payload.get("reason") or "requested")})], ANY_VERSION)
        return _reply(command, ReplyStatus.OK, version)

    async def _cmd_kill(self, tx: TransactionScope, state: _Partition, hosted: HostedAgent | None,
                        command: Command) -> Reply:
        if hosted is None:
            return _unknown(command)
        cause = "killed" if command.type == "agent.kill" else str(
            command.payload.get("cause") or "declared_dead")
        judged = command.metadata.get(INCARNATION_META)
        if (command.type == "agent.declare_dead" and judged and judged.isdigit()
                and int(judged) != hosted.lifecycle.incarnation):
            # A verdict on an incarnation that is gone must not kill its successor.
            return _reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                          f"stale verdict for incarnation {judged}")
        if hosted.incarnation_task is None or hosted.incarnation_task.done():
            if hosted.lifecycle.status is lc.Status.RUNNING and not hosted.running:
                # The log says running but nothing runs it here: record the death and let
                # the guard decide, as for any death.
                self._detach(self._death_of_unhosted(state, hosted, cause))
                return _reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                              "not running here: death recorded")
            return _reply(command, ReplyStatus.OK, hosted.lifecycle.version, "not running")
        hosted.kill_cause = cause  # before the cancel: the exit is read as this death
        hosted.incarnation_task.cancel()
        return _reply(command, ReplyStatus.OK, hosted.lifecycle.version)

    async def _cmd_quarantine(self, tx: TransactionScope, state: _Partition,
                              hosted: HostedAgent | None, command: Command) -> Reply:
        if hosted is None:
            return _unknown(command)
        reason = str(command.payload.get("reason") or "requested")
        if hosted.lifecycle.status is lc.Status.QUARANTINED:
            return _reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                          "already quarantined")
        hosted.lifecycle = lc.mark_stop_requested(hosted.lifecycle)
        version = await tx.append(command.stream_id, [NewEvent(lc.AGENT_QUARANTINED, MODULE, {
            "reason": reason, "deaths": int(command.payload.get("deaths") or 0)})], ANY_VERSION)
        await tx.send(self.plan.name(ALERTS), alert_record(
            "agent_quarantined", command.stream_id, f"agent quarantined: {reason}",
            source=command.issuer), key=command.stream_id.encode())
        return _reply(command, ReplyStatus.OK, version)

    async def _cmd_resume(self, tx: TransactionScope, state: _Partition, hosted: HostedAgent | None,
                          command: Command) -> Reply:
        if hosted is None:
            return _unknown(command)
        life = hosted.lifecycle
        if life.status not in (lc.Status.STOPPED, lc.Status.QUARANTINED):
            return _reply(command, ReplyStatus.OK, life.version, f"agent is {life.status.value}")
        version = await tx.append(command.stream_id, [
            NewEvent(lc.AGENT_RESUMED, MODULE, {"reason": str(command.payload.get("reason")
                                                               or "operator")}),
            NewEvent(lc.AGENT_STARTED, MODULE, {
                "kind": life.kind, "config_json": life.config_json,
                "incarnation": life.incarnation + 1, "worker": self.worker_id}),
        ], ANY_VERSION)
        return _reply(command, ReplyStatus.OK, version)

    async def _cmd_assign(self, tx: TransactionScope, state: _Partition, hosted: HostedAgent | None,
                          command: Command) -> Reply:
        if hosted is None:
            return _unknown(command)
        task_id = str(command.payload["task_id"])
        life = hosted.lifecycle
        if task_id in life.finished_tasks or any(t.task_id == task_id
                                                 for t in life.pending_tasks):
            return _reply(command, ReplyStatus.OK, life.version, "task already assigned")
        input_json = str(command.payload.get("input_json") or "null")
        try:
            json.loads(input_json)
        except ValueError as exc:
            raise InvalidCommandError("invalid_payload", f"task input is not JSON: {exc}") from exc
        version = await tx.append(command.stream_id, [NewEvent(lc.TASK_ASSIGNED, MODULE, {
            "task_id": task_id, "input_json": input_json})], ANY_VERSION)
        return _reply(command, ReplyStatus.OK, version)

    async def _cmd_snapshot(self, tx: TransactionScope, state: _Partition,
                            hosted: HostedAgent | None, command: Command) -> Reply:
        if hosted is None:
            return _unknown(command)
        version = await self._write_snapshot(tx, state.writer.partition, hosted)
        return _reply(command, ReplyStatus.OK, version)

    # -- reacting to committed events ----------------------------------------------------

    def _on_commit(self, partition: int, plan: AppendPlan, offsets: list[int]) -> None:
        state = self.partitions.get(partition)
        if state is None:
            return
        hosted = state.agents.get(plan.stream_id)
        for event, offset in zip(plan.events, offsets, strict=True):
            if hosted is None:
                if event.type != lc.AGENT_STARTED:
                    return  # not an agent's stream (plain appends)
                hosted = state.agents[plan.stream_id] = HostedAgent(
                    plan.stream_id, partition, lc.AgentLifecycle(plan.stream_id))
            hosted.on_event(event, offset)
            if hosted.buffer is not None:
                hosted.buffer.append((event, offset))
            if event.type == lc.AGENT_QUARANTINED:
                metrics.QUARANTINES.labels(str(event.payload.get("reason"))).inc()
            if event.type == lc.AGENT_STARTED and not self.stopping:
                self._spawn(state, hosted)
            elif event.type in (lc.AGENT_STOPPED, lc.AGENT_QUARANTINED) and hosted.running:
                self._detach(self._stop_agents([hosted]))
        if (hosted is not None and hosted.lifecycle.is_live
                and hosted.events_since_snapshot >= self.config.snapshot_every):
            hosted.events_since_snapshot = 0
            self._detach(self._snapshot_later(state, hosted))

    def _spawn(self, state: _Partition, hosted: HostedAgent) -> None:
        if hosted.running:
            return
        self._hosted_here.add(hosted.agent_id)
        if hosted.agent is None:
            hosted.agent = self.registry.create(hosted.lifecycle.kind, hosted.agent_id,
                                                hosted.lifecycle.config)
        hosted.supervisor = asyncio.create_task(self._supervise(state, hosted),
                                                name=f"agent-{hosted.agent_id}")

    async def _supervise(self, state: _Partition, hosted: HostedAgent) -> None:
        """Runs incarnations until the agent stops, is quarantined or the host stops."""
        while True:
            sink = AgentSinkImpl(hosted, state.writer)
            hosted.incarnation_task = asyncio.create_task(
                run_open_tasks(hosted, sink, self.services, self._on_paused))
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
                successor = await self._after_death(state, hosted, cause, error)
                if successor is None:
                    return
                hosted = successor  # the rebuilt agent runs the next incarnation
            except (FencedError, asyncio.CancelledError):
                return
            except AresError as exc:
                log.error("agent %s: resurrection failed: %s", hosted.agent_id, exc)
                return

    async def _death_of_unhosted(self, state: _Partition, hosted: HostedAgent,
                                 cause: str) -> None:
        try:
            successor = await self._after_death(state, hosted, cause, None)
        except AresError as exc:
            log.error("agent %s: death not handled: %s", hosted.agent_id, exc)
            return
        if successor is not None:
            self._spawn(state, successor)

    async def _after_death(self, state: _Partition, hosted: HostedAgent, cause: str,
                           error: BaseException | None) -> HostedAgent | None:
        """Record the death and decide; the rebuilt agent when a new incarnation runs."""
        decision = self.guard.decide(hosted.lifecycle, self.stopping, time.time())
        if isinstance(decision, Skip) and decision.reason in (
                SkipReason.RUNTIME_STOPPING, SkipReason.STOPPED_VOLUNTARILY):
            return None  # a stop or a shutdown cancelled it: no death to record
        dead = NewEvent(lc.AGENT_DEAD, MODULE, lc.dead_payload(
            hosted.lifecycle, cause, error_type=None if error is None else type(error).__name__,
            error_message=None if error is None else str(error)[:1000],
            traceback_digest=None if error is None else _traceback_digest(error)))
        if isinstance(decision, Quarantine):
            await self._append(state, hosted, [dead, NewEvent(
                lc.AGENT_QUARANTINED, MODULE, quarantined_payload(decision))], alert=(
                "agent_quarantined", f"restart budget exhausted after "
                f"{decision.deaths_in_window} deaths (last: {cause})", "critical",
                {"cause": cause, "error": repr(error)[:500]}))
            return None
        if isinstance(decision, Skip):
            await self._append(state, hosted, [dead])
            return None
        assert isinstance(decision, Resurrect)
        return await self._resurrect(state, hosted, decision, [dead], cause)

    async def _resurrect(self, state: _Partition, hosted: HostedAgent, decision: Resurrect,
                         before: Sequence[NewEvent], cause: str) -> HostedAgent | None:
        hosted.lifecycle = lc.mark_resurrecting(hosted.lifecycle)
        parent = hosted.lifecycle.incarnation
        resurrecting = NewEvent(lc.AGENT_RESURRECTING, MODULE,
                                resurrecting_payload(hosted.lifecycle, decision, cause),
                                metadata=decision.metadata())
        await self._append(state, hosted, [*before, resurrecting])
        if decision.delay_s > 0:
            await asyncio.sleep(decision.delay_s)
        if self.guard.recheck(hosted.lifecycle, self.stopping) is not None:
            hosted.lifecycle = lc.clear_resurrecting(hosted.lifecycle)
            return None
        hosted.buffer = []
        try:
            replay = await self._replay_agent(state, hosted)
        except _IntegrityFailure as failure:
            # The log does not verify: never resume with silently partial state.
            hosted.lifecycle = lc.clear_resurrecting(hosted.lifecycle)
            await self._quarantine_hosted(state, hosted, failure.kind, failure.version,
                                          failure.detail)
            return None
        finally:
            buffered, hosted.buffer = hosted.buffer, None
        record = replay.record(time.monotonic(), 0.0, verified=True)
        fresh = replay.hosted
        for event, offset in buffered or ():  # committed while the replay ran
            if event.version > fresh.lifecycle.version:
                fresh.on_event(event, offset)
        self._install(state, hosted, fresh)
        if self.guard.recheck(fresh.lifecycle, self.stopping) is not None:
            return None  # stopped while it was being rebuilt
        resumed_at = time.monotonic()
        await self._append(state, fresh, [NewEvent(
            lc.AGENT_RESURRECTED, MODULE,
            record.to_payload(incarnation=parent + 1, parent_incarnation=parent,
                              worker=self.worker_id),
            metadata={**record.to_metadata(), "ares.recovery.resume_ms":
                      str(round((time.monotonic() - resumed_at) * 1000))})])
        fresh.lifecycle = lc.clear_resurrecting(fresh.lifecycle)
        self._recovered(record, cause)
        return fresh

    async def _replay_agent(self, state: _Partition, hosted: HostedAgent) -> AgentReplay:
        """A single agent rebuilt from Kafka: its snapshot, then its events after it."""
        assert self._scanner is not None
        started = time.monotonic()
        partition = state.writer.partition
        snapshots = await load_snapshots(self._scanner, self.plan.name(SNAPSHOTS), partition)
        snapshot = snapshots.get(hosted.agent_id)
        replay = AgentReplay(hosted.agent_id, partition, snapshot, started=started,
                             load_s=time.monotonic() - started)
        tp = TopicPartition(self.plan.name(EVENTS), partition)
        await self._scanner.wait_until_stable(tp, state.writer.committed_end)
        async for offset, event in self._scanner.scan(tp, replay_start(snapshot),
                                                      hosted.agent_id.encode()):
            replay.feed(offset, event)
        failure = replay.finish(state.writer.table.head(hosted.agent_id))
        if failure is not None and failure.discard_snapshot:
            log.warning("agent %s: snapshot discarded (%s): full replay", hosted.agent_id,
                        failure.detail)
            replay = AgentReplay(hosted.agent_id, partition, None, started=started)
            async for offset, event in self._scanner.scan(tp, None, hosted.agent_id.encode()):
                replay.feed(offset, event)
            failure = replay.finish(state.writer.table.head(hosted.agent_id))
        if failure is not None:
            raise _IntegrityFailure(failure.kind, failure.version, failure.detail)
        replay.build_agent(self.registry)
        return replay

    def _install(self, state: _Partition, old: HostedAgent, fresh: HostedAgent) -> None:
        """The rebuilt agent takes the old one's place (same supervisor task, same flags)."""
        if old.lifecycle.stop_requested:
            fresh.lifecycle = lc.mark_stop_requested(fresh.lifecycle)
        fresh.lifecycle = lc.mark_resurrecting(fresh.lifecycle)
        fresh.supervisor = old.supervisor
        state.agents[old.agent_id] = fresh
        old.supervisor = None

    # -- recovery of a partition ---------------------------------------------------------

    async def _adopt(self, state: _Partition, replay: AgentReplay, table: StreamTable,
                     replay_done: float) -> None:
        """After the partition scan: verify the stream, host the agent, resume it."""
        failure = replay.finish(table.head(replay.stream_id))
        discarded = None
        if failure is not None and failure.discard_snapshot:
            discarded = failure.detail
            replay, failure = await self._rescan(replay, None, table)
        if not replay.hosted.lifecycle.kind:
            return  # a stream that is no agent's
        try:
            if failure is None and not replay.build_agent(self.registry):
                # Its apply needs the events the partition scan let go: read them again.
                replay, failure = await self._rescan(replay, replay.snapshot, table)
                if failure is None:
                    replay.build_agent(self.registry)
        except (UnknownAgentKindError, AgentConfigError) as exc:
            log.error("agent %s cannot be hosted here: %s", replay.stream_id, exc)
            state.agents[replay.stream_id] = replay.hosted
            return
        if failure is not None:
            await self._quarantine_for_integrity(state, replay, failure.kind, failure.version,
                                                 failure.detail)
            return
        hosted = replay.hosted
        life = hosted.lifecycle
        state.agents[hosted.agent_id] = hosted
        if not life.is_live or self.stopping:
            return
        resume_started = time.monotonic()
        record = replay.record(replay_done, 0.0, verified=True, discarded=discarded)
        try:
            await self._resume_after_recovery(state, hosted, record, resume_started)
        except (FencedError, asyncio.CancelledError):
            return

    async def _rescan(self, replay: AgentReplay, snapshot: Snapshot | None,
                      table: StreamTable) -> tuple[AgentReplay, VerificationFailure | None]:
        """``replay``'s stream read again on its own (its key), from ``snapshot`` (None: from
        the log start), every event kept for the agent's apply; and its verdict."""
        assert self._scanner is not None
        fresh = AgentReplay(replay.stream_id, replay.partition, snapshot)
        tp = TopicPartition(self.plan.name(EVENTS), replay.partition)
        async for offset, event in self._scanner.scan(tp, replay_start(snapshot),
                                                      replay.stream_id.encode()):
            fresh.feed(offset, event)
        return fresh, fresh.finish(table.head(replay.stream_id))

    async def _resume_after_recovery(self, state: _Partition, hosted: HostedAgent,
                                     record: RecoveryRecord, resume_started: float) -> None:
        life = hosted.lifecycle
        if life.status is lc.Status.STARTING:  # resumed by an operator, not started yet
            await self._append(state, hosted, [NewEvent(lc.AGENT_STARTED, MODULE, {
                "kind": life.kind, "config_json": life.config_json,
                "incarnation": life.incarnation + 1, "worker": self.worker_id})])
            return
        moved = life.worker is not None and (
            life.worker in self._live_workers and not (
                life.worker == self.worker_id and hosted.agent_id not in self._hosted_here))
        if life.last_event_type == HANDED_OFF or (life.status is lc.Status.RUNNING and moved):
            before: list[NewEvent] = []  # its worker is alive: handed over, not dead
            cause = "handoff" if life.last_event_type == HANDED_OFF else "rebalance"
        elif life.status is lc.Status.RUNNING:
            before = [NewEvent(lc.AGENT_DEAD, MODULE, lc.dead_payload(life, "worker_lost"))]
            cause = "worker_lost"
        else:  # dead or resurrecting when its worker went away
            before, cause = [], life.last_death_cause or "worker_lost"
        if cause not in ("handoff", "rebalance"):
            decision = self.guard.decide(life, False, time.time())
            if isinstance(decision, Quarantine):
                await self._append(state, hosted, [*before, NewEvent(
                    lc.AGENT_QUARANTINED, MODULE, quarantined_payload(decision))])
                return
            if not isinstance(decision, Resurrect):
                if before:
                    await self._append(state, hosted, before)
                return
            before.append(NewEvent(lc.AGENT_RESURRECTING, MODULE,
                                   resurrecting_payload(life, decision, cause),
                                   metadata=decision.metadata()))
        parent = life.incarnation
        metadata = {**record.to_metadata(), "ares.recovery.cause": cause,
                    "ares.recovery.resume_ms":
                    str(round((time.monotonic() - resume_started) * 1000))}
        await self._append(state, hosted, [*before, NewEvent(
            lc.AGENT_RESURRECTED, MODULE,
            record.to_payload(incarnation=parent + 1, parent_incarnation=parent,
                              worker=self.worker_id), metadata=metadata)])
        self._recovered(record, cause)
        self._spawn(state, hosted)

    async def _quarantine_for_integrity(self, state: _Partition, replay: AgentReplay,
                                        kind: str, version: int, detail: str) -> None:
        hosted = replay.hosted
        state.agents[hosted.agent_id] = hosted
        if replay.quarantined_after_failure:
            return  # an earlier recovery quarantined it already: one verdict, one alert
        await self._quarantine_hosted(state, hosted, kind, version, detail)

    async def _quarantine_hosted(self, state: _Partition, hosted: HostedAgent, kind: str,
                                 version: int, detail: str) -> None:
        message = f"integrity failure at version {version}: {kind}: {detail}"
        log.error("agent %s: %s", hosted.agent_id, message)
        if hosted.lifecycle.status is lc.Status.QUARANTINED:
            return
        hosted.lifecycle = lc.mark_stop_requested(hosted.lifecycle)
        await self._append(state, hosted, [NewEvent(lc.AGENT_QUARANTINED, MODULE, {
            "reason": f"integrity:{kind}", "deaths": 0})], alert=(
            "integrity_failure", message, "critical", {"kind": kind, "version": version}))

    # -- helpers -------------------------------------------------------------------------

    def _recovered(self, record: RecoveryRecord, cause: str) -> None:
        self.recoveries.append(record)
        metrics.RESURRECTIONS.labels(cause).inc()
        for phase, seconds in (("load", record.load_s), ("replay", record.replay_s),
                               ("resume", record.resume_s)):
            if seconds is not None:
                metrics.RECOVERY_SECONDS.labels(phase).observe(seconds)
        self._count_agents()

    def _count_agents(self) -> None:
        counts: dict[str, int] = {status.value: 0 for status in lc.Status}
        for hosted in self.agents():
            counts[hosted.lifecycle.status.value] += 1
        for status, count in counts.items():
            metrics.AGENTS.labels(status).set(count)

    async def _append(self, state: _Partition, hosted: HostedAgent,
                      events: Sequence[NewEvent], alert: _Alert | None = None) -> int:
        """Append to the agent's stream; an ``alert`` goes out in the same transaction."""
        if alert is None:
            return await state.writer.append(hosted.agent_id, events, ANY_VERSION)
        kind, message, severity, details = alert
        record = alert_record(kind, hosted.agent_id, message, severity=severity,
                              details=details)

        async def work(tx: TransactionScope) -> int:
            version = await tx.append(hosted.agent_id, events, ANY_VERSION)
            await tx.send(self.plan.name(ALERTS), record, key=hosted.agent_id.encode())
            return version

        return int(await state.writer.submit(work))

    async def _alert(self, state: _Partition, stream_id: str, kind: str, message: str,
                     severity: str = "warning", details: dict[str, object] | None = None) -> None:
        record = alert_record(kind, stream_id, message, severity=severity, details=details)

        async def send(tx: TransactionScope) -> None:
            await tx.send(self.plan.name(ALERTS), record, key=stream_id.encode())

        await state.writer.submit(send)

    async def _on_paused(self, hosted: HostedAgent, outcome: TaskOutcome) -> None:
        state = self.partitions.get(hosted.partition)
        if state is None:
            return
        calls = [c.to_json() for c in outcome.in_doubt]
        await self._alert(state, hosted.agent_id, "tool_in_doubt",
                          f"task {outcome.task_id} paused: {len(calls)} tool call(s) in doubt; "
                          f"resolve with `ares agents resolve {hosted.agent_id} --call ID "
                          "--as done|retry|skip`", severity="critical",
                          details={"task_id": outcome.task_id, "calls": json.dumps(calls)})

    async def _write_snapshot(self, tx: TransactionScope, partition: int,
                              hosted: HostedAgent) -> int:
        """A snapshot of the agent as of its last committed event, with snapshot.taken."""
        if hosted.last_offset is None or hosted.agent is None:
            return hosted.lifecycle.version
        snapshot = Snapshot(hosted.agent_id, hosted.lifecycle.version, hosted.last_hash,
                            hosted.last_offset + 1, hosted.lifecycle.kind,
                            snapshot_state(hosted), hosted.lifecycle.incarnation)
        await tx.send(self.plan.name(SNAPSHOTS), snapshot.encode(),
                      key=hosted.agent_id.encode(), partition=partition)
        return await tx.append(hosted.agent_id, [NewEvent(lc.SNAPSHOT_TAKEN, MODULE, {
            "snapshot_version": snapshot.version, "snapshot_hash": snapshot.hash,
            "events_offset": snapshot.events_offset})], ANY_VERSION)

    async def _write_checkpoint(self, tx: TransactionScope, partition: int) -> None:
        """Every stream head of the partition as of the committed end: recovery seeds its
        table with them and starts scanning there (or at the oldest open journal)."""
        state = self.partitions.get(partition)
        if state is None:
            return
        table = state.writer.table
        heads = {}
        for stream_id in table.stream_ids():
            stream = table.state(stream_id)
            if stream is not None:
                hosted = state.agents.get(stream_id)
                kind = hosted.lifecycle.kind if hosted is not None else None
                heads[stream_id] = [stream.version, stream.hash, stream.first_offset,
                                    kind or None]
        checkpoint = Snapshot(CHECKPOINT_KEY, 0, "", state.writer.committed_end,
                              CHECKPOINT_KIND, {"heads": heads})
        await tx.send(self.plan.name(SNAPSHOTS), checkpoint.encode(),
                      key=CHECKPOINT_KEY.encode(), partition=partition)
        state.last_checkpoint = time.monotonic()

    async def _snapshot_later(self, state: _Partition, hosted: HostedAgent) -> None:
        partition = state.writer.partition

        async def work(tx: TransactionScope) -> None:
            await self._write_snapshot(tx, partition, hosted)
            if time.monotonic() - state.last_checkpoint > self.config.checkpoint_every_s:
                await self._write_checkpoint(tx, partition)

        try:
            await state.writer.submit(work)
        except AresError as exc:
            log.warning("snapshot of %s not taken: %s", hosted.agent_id, exc)

    async def _stop_agents(self, agents: Any) -> None:
        await cancel_and_wait(*(hosted.supervisor for hosted in list(agents)
                                if hosted.supervisor is not None
                                and not hosted.supervisor.done()), ignore_errors=True)

    def _detach(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _partition_of(self, stream_id: str) -> int:
        from ares.events.routing import partition_for

        return partition_for(stream_id, self.plan.partitions)


class _Stamped:
    """The owner's transaction, stamping every event a command causes with its id and
    issuer (the audit trail of who asked for what)."""

    def __init__(self, tx: TransactionScope, command: Command) -> None:
        self._tx = tx
        self._command = command

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int:
        return await self._tx.append(stream_id, with_command_metadata(events, self._command),
                                     expected_version)

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> None:
        await self._tx.send(topic, value, key, partition, headers)

    async def commit_offsets(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        await self._tx.commit_offsets(offsets, group_id)


# (kind, message, severity, details) of an alert that goes with an append.
_Alert = tuple[str, str, str, dict[str, object]]


def _seed_from(checkpoint: Snapshot | None,
               snapshots: dict[str, Snapshot]) -> tuple[StreamTable, int | None]:
    """The stream heads a checkpoint knows, and where the recovery scan must start: the
    checkpoint's offset, lowered to every agent's snapshot journal start and to the first
    event of every agent without a snapshot (its whole stream must be replayed)."""
    table = StreamTable()
    if checkpoint is None:
        return table, None  # no checkpoint: scan the partition from the log start
    start = checkpoint.events_offset
    for stream_id, head in checkpoint.state["heads"].items():
        version, digest, first = head[0], head[1], head[2]
        kind = head[3] if len(head) > 3 else None
        first_offset = None if first is None else int(first)
        table.seed(stream_id, StreamHead(int(version), str(digest)), first_offset)
        if kind and stream_id not in snapshots:
            if first_offset is None:
                return table, None
            start = min(start, first_offset)
    for snapshot in snapshots.values():
        snap_start = replay_start(snapshot)
        if snap_start is None:
            return table, None
        start = min(start, snap_start)
    return table, start


class _IntegrityFailure(AresError):
    def __init__(self, kind: str, version: int, detail: str) -> None:
        super().__init__(f"{kind} at version {version}: {detail}")
        self.kind, self.version, self.detail = kind, version, detail


async def _nothing(tx: TransactionScope) -> None:
    """A work item that only waits its turn: everything queued before it has committed."""


def _reply(command: Command, status: ReplyStatus, version: int = 0,
           message: str = "") -> Reply:
    return Reply(command.id, status, command.stream_id, version, message=message)


def _unknown(command: Command) -> Reply:
    return _reply(command, ReplyStatus.REJECTED,
                  message=f"no agent {command.stream_id!r} (start it with `ares agents start`)")


def _traceback_digest(error: BaseException) -> str:
    """Where it died, not the exact text: frames (file, function) hashed, for fingerprints."""
    frames = traceback.extract_tb(error.__traceback__)
    shape = "|".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.name}" for f in frames)
    return hashlib.sha256(f"{type(error).__name__}|{shape}".encode()).hexdigest()[:16]


_HANDLERS = {
    "agent.start": AgentHost._cmd_start,
    "agent.stop": AgentHost._cmd_stop,
    "agent.kill": AgentHost._cmd_kill,
    "agent.declare_dead": AgentHost._cmd_kill,
    "agent.quarantine": AgentHost._cmd_quarantine,
    "agent.resume": AgentHost._cmd_resume,
    "task.assign": AgentHost._cmd_assign,
    "snapshot.request": AgentHost._cmd_snapshot,
}
