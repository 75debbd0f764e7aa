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
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka import TopicPartition

from ares import metrics
from ares.agents.host_api import AgentServices, TaskOutcome
from ares.agents.registry import AgentRegistry
from ares.commands.model import (
    Command,
    InvalidCommandError,
    Reply,
    ReplyStatus,
    with_command_metadata,
)
from ares.config import DEFAULT_DEDUPE_WINDOW, Settings
from ares.errors import AresError
from ares.events.kafka.dlq import DeadLetters, Reject
from ares.events.kafka.partition_writer import PartitionWriter, TransactionScope
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.snapshots import Snapshot, load_snapshots
from ares.events.kafka.store import open_writer
from ares.events.model import ANY_VERSION, NewEvent, StreamHead
from ares.events.writer import AppendPlan, StreamTable
from ares.lifecycle import events as ev
from ares.lifecycle import state as lc
from ares.lifecycle.recovery import CHECKPOINT_KEY, CHECKPOINT_KIND, RecoveryRecord
from ares.runtime_manager import delegations, supervision
from ares.runtime_manager.alerts import alert_record
from ares.runtime_manager.guard import (
    ResurrectionGuard,
)
from ares.runtime_manager.heartbeats import AgentBeat
from ares.runtime_manager.host_commands import (
    HANDLERS,
    MODULE,
    ONCE_PER_STREAM,
    effect_key,
    reply,
)
from ares.runtime_manager.hosted import HostedAgent
from ares.runtime_manager.replay import (
    AgentReplay,
    old_heap_frozen,
    replay_start,
    snapshot_state,
)
from ares.tasks import cancel_and_wait
from ares.topics import ALERTS, EVENTS, SNAPSHOTS, TopicPlan

log = logging.getLogger(__name__)
# Command metadata of a health verdict: the incarnation it judged.


@dataclass(frozen=True, slots=True)
class HostConfig:
    snapshot_every: int = 200  # events of an agent between automatic snapshots
    checkpoint_every_s: float = 30.0  # partition checkpoints (all stream heads)


@dataclass(slots=True)
class PartitionState:
    """What the host keeps of one owned partition: its writer and the agents it hosts."""

    writer: PartitionWriter
    agents: dict[str, HostedAgent] = field(default_factory=dict)
    last_checkpoint: float = field(default_factory=time.monotonic)
    # New agents whose agent.started is staged and not yet committed (so not hosted yet):
    # a task assigned in the same transaction (a delegation's start and assignment) joins it.
    starting: set[str] = field(default_factory=set)
    # Effects staged by commands in the open transaction (``once_in``): the lifecycle folds
    # an event only once it commits, so two copies of a command in one batch (a redelivery
    # after a crash and the client's retry) would otherwise both append.
    _effects_tx: object | None = None
    _effects: set[tuple[str, ...]] = field(default_factory=set)

    def staged_effects(self, tx: object) -> set[tuple[str, ...]]:
        """The effects staged in transaction ``tx`` (a new transaction starts empty: an
        aborted one's effects are gone with it)."""
        if self._effects_tx is not tx:
            self._effects_tx, self._effects = tx, set()
        return self._effects

    def started_in_this_transaction(self, stream_id: str) -> bool:
        """Whether ``stream_id``'s agent.started is staged in the open transaction (an
        aborted one restores the writer's table, so a stale name does not count)."""
        return stream_id in self.starting and self.writer.table.state(stream_id) is not None


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
        self.partitions: dict[int, PartitionState] = {}
        self.recoveries: list[RecoveryRecord] = []
        self._background: set[asyncio.Task[Any]] = set()
        # A scanner of the owner's (they stay open as long as it), kept for the rereads of a
        # single agent after a takeover (a resurrection's replay). What a takeover alone
        # needs (the group's members) is passed down its calls: takeovers run concurrently.
        self._scanner: PartitionScanner | None = None
        self.hosted_here: set[str] = set()  # agents this process has run
        # The runtime manager dead-letters unreadable snapshots (it reads them at every
        # takeover); set by the service, None in tests that run a bare host.
        self.letters: DeadLetters | None = None

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
        Safe to run for several partitions at once (the owner's parallel takeovers): what
        is one takeover's own lives in this call, not on the host.
        """
        if self._scanner is None:  # the later rereads use the first: any open one would do
            self._scanner = scanner
        started = time.monotonic()
        replays: dict[str, AgentReplay] = {}
        loaded = 0.0

        async def plan_scan() -> tuple[int | None, StreamTable]:
            """After the fence: the previous owner can no longer write a newer snapshot."""
            nonlocal loaded
            snapshots = await load_snapshots(scanner, self.plan.name(SNAPSHOTS), partition,
                                             self.reject)
            table, start = _seed_from(snapshots.pop(CHECKPOINT_KEY, None), snapshots,
                                      self.settings.dedupe_window)
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
        state = PartitionState(writer)
        self.partitions[partition] = state
        writer.listeners.append(lambda plan, offsets: self._on_commit(partition, plan, offsets))
        resumes = [supervision.adopt(self, state, replay, table, replay_done, live_workers)
                   for replay in replays.values()]
        await asyncio.gather(*resumes)
        for hosted in state.agents.values():  # what the previous owner did not send
            if delegations.owes(hosted):
                self.detach(delegations.settle(self, state, hosted))
        self.count_agents()
        await self.flush_dead_letters()
        return writer

    @property
    def reject(self) -> Reject | None:
        return None if self.letters is None else self.letters.reject

    async def flush_dead_letters(self) -> None:
        """Write the dead letters the reads queued; kept queued on failure (the snapshots
        are read again at the next takeover, the letters flushed again at the next call)."""
        if self.letters is not None and self.letters.pending:
            await self.letters.flush()

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
                supervision.spawn(self, state, hosted)

    async def release_partition(self, partition: int) -> None:
        """Ownership moved away: stop the partition's agents without writing anything (the
        new owner resumes them; our writer is or will be fenced)."""
        state = self.partitions.pop(partition, None)
        if state is None:
            return
        await self._stop_agents(state.agents.values())

    async def stop_agents(self) -> None:
        """Graceful shutdown, first half: stop every agent (what it committed stays)."""
        self.stopping = True
        for state in self.partitions.values():
            await self._stop_agents(state.agents.values())

    async def drain(self) -> None:
        """Both halves of the graceful shutdown, without budgets (tools and benchmarks;
        the owner runs them as phases of their own)."""
        await self.stop_agents()
        await self.hand_off()

    async def hand_off(self) -> None:
        """Graceful shutdown, second half: per partition, the live agents' final snapshots
        and hand-off events, in one transaction."""
        self.stopping = True
        try:
            await self._hand_off()
        finally:
            self.partitions.clear()

    async def _hand_off(self) -> None:
        for partition, state in list(self.partitions.items()):
            live = [a for a in state.agents.values() if a.lifecycle.is_live]

            async def handoff(tx: TransactionScope, live: list[HostedAgent] = live,
                              partition: int = partition) -> None:
                # Snapshots first: the hand-off must be each stream's last event, which is
                # how the next owner tells a graceful hand-off from a death.
                for hosted in live:
                    await self.write_snapshot(tx, partition, hosted)
                for hosted in live:
                    await tx.append(hosted.agent_id, [NewEvent(
                        ev.AGENT_HANDED_OFF, MODULE,
                        {"worker": self.worker_id, "reason": "shutdown"})], ANY_VERSION)
                await self._write_checkpoint(tx, partition)

            try:
                await state.writer.submit(handoff)
            except AresError as exc:
                log.warning("partition %d: final snapshots not written (%s)", partition, exc)

    async def handle(self, tx: TransactionScope, command: Command) -> Reply:
        partition = self._partition_of(command.stream_id)
        state = self.partitions.get(partition)
        if state is None:
            return reply(command, ReplyStatus.REJECTED, message="partition not recovered yet")
        hosted = state.agents.get(command.stream_id)
        handler = HANDLERS.get(command.type)
        if handler is None:
            raise InvalidCommandError("unknown_command", f"no handler for {command.type!r}")
        effect = effect_key(command)
        if effect is None:
            return await handler(self, _Stamped(tx, command), state, hosted, command)
        # Once per transaction here; across transactions the lifecycle folded from the log
        # says it (a task id already assigned, a signal id already received...). Neither
        # needs the event-id dedupe window.
        staged = state.staged_effects(tx)
        table = state.writer.table
        if effect in staged:
            return reply(command, ReplyStatus.OK, table.head(command.stream_id).version,
                         "already applied (in this transaction)")
        before = table.head(command.stream_id).version
        answer = await handler(self, _Stamped(tx, command), state, hosted, command)
        if table.head(command.stream_id).version != before:
            if command.type in ONCE_PER_STREAM:  # a stop after a resume is another effect
                staged -= {(t, command.stream_id) for t in ONCE_PER_STREAM}
            staged.add(effect)
        return answer

    async def close(self) -> None:
        await cancel_and_wait(*self._background, ignore_errors=True)
        await self.services.close()

    # -- commands (inside the owner's transaction) ---------------------------------------

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
                state.starting.discard(plan.stream_id)
                hosted = state.agents[plan.stream_id] = HostedAgent(
                    plan.stream_id, partition, lc.AgentLifecycle(plan.stream_id))
            hosted.on_event(event, offset)
            if hosted.buffer is not None:
                hosted.buffer.append((event, offset))
            if event.type == lc.AGENT_QUARANTINED:
                metrics.QUARANTINES.labels(str(event.payload.get("reason"))).inc()
            if event.type == lc.AGENT_STARTED and not self.stopping:
                supervision.spawn(self, state, hosted)
            elif event.type in (lc.AGENT_STOPPED, lc.AGENT_QUARANTINED) and hosted.running:
                self.detach(self._stop_agents([hosted]))
        if hosted is not None and not hosted.settling and delegations.owes(hosted):
            self.detach(delegations.settle(self, state, hosted))
        if (hosted is not None and hosted.lifecycle.is_live
                and hosted.events_since_snapshot >= self.config.snapshot_every):
            hosted.events_since_snapshot = 0
            self.detach(self._snapshot_later(state, hosted))

    def count_agents(self) -> None:
        counts: dict[str, int] = {status.value: 0 for status in lc.Status}
        for hosted in self.agents():
            counts[hosted.lifecycle.status.value] += 1
        for status, count in counts.items():
            metrics.AGENTS.labels(status).set(count)

    async def append_events(self, state: PartitionState, hosted: HostedAgent,
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

    async def _alert(self, state: PartitionState, stream_id: str, kind: str, message: str,
                     severity: str = "warning", details: dict[str, object] | None = None) -> None:
        record = alert_record(kind, stream_id, message, severity=severity, details=details)

        async def send(tx: TransactionScope) -> None:
            await tx.send(self.plan.name(ALERTS), record, key=stream_id.encode())

        await state.writer.submit(send)

    async def on_paused(self, hosted: HostedAgent, outcome: TaskOutcome) -> None:
        state = self.partitions.get(hosted.partition)
        if state is None:
            return
        calls = [c.to_json() for c in outcome.in_doubt]
        await self._alert(state, hosted.agent_id, "tool_in_doubt",
                          f"task {outcome.task_id} paused: {len(calls)} tool call(s) in doubt; "
                          f"resolve with `ares agents resolve {hosted.agent_id} --call ID "
                          "--as done|retry|skip`", severity="critical",
                          details={"task_id": outcome.task_id, "calls": json.dumps(calls)})

    async def write_snapshot(self, tx: TransactionScope, partition: int,
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

    async def _snapshot_later(self, state: PartitionState, hosted: HostedAgent) -> None:
        partition = state.writer.partition

        async def work(tx: TransactionScope) -> None:
            await self.write_snapshot(tx, partition, hosted)
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

    def detach(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _partition_of(self, stream_id: str) -> int:
        from ares.events.kafka.routing import partition_for

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
               snapshots: dict[str, Snapshot],
               dedupe_window: int = DEFAULT_DEDUPE_WINDOW) -> tuple[StreamTable, int | None]:
    """The stream heads a checkpoint knows, and where the recovery scan must start: the
    checkpoint's offset, lowered to every agent's snapshot journal start and to the first
    event of every agent without a snapshot (its whole stream must be replayed)."""
    table = StreamTable(dedupe_window)
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


async def _nothing(tx: TransactionScope) -> None:
    """A work item that only waits its turn: everything queued before it has committed."""
