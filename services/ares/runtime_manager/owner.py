"""The partition owner: the write side of the event store, driven by ``ares.commands``.

Owner processes share the consumer group ``<prefix>ares-runtime`` on ``ares.commands``. The
member assigned partition p is the only writer of p's streams: it takes over p's fenced
transactional writer, rebuilds the stream heads, and then handles p's commands in
transactions that also carry the replies, dead letters and the consumed offsets
(exactly-once read-process-write). Invalid input never stops it: it is dead-lettered with
its reason and original bytes, and the owner goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from ares import metrics
from ares.commands.policy import IssuerPolicy
from ares.config import Settings
from ares.errors import AresError, FencedError
from ares.events.kafka.errors import translate
from ares.events.kafka.groups import describe_group, remove_member, runtime_group
from ares.events.kafka.internals import group_generation, heartbeat
from ares.events.kafka.partition_writer import PartitionWriter, TransactionScope
from ares.events.kafka.reader import PartitionScanner, new_consumer
from ares.runtime_manager import crash_points
from ares.runtime_manager.admission import Gate
from ares.runtime_manager.arena import Arena
from ares.runtime_manager.assignment import CommitHold, RebalanceListener
from ares.runtime_manager.command_handler import CommandHandler, Topics
from ares.runtime_manager.partition_host import PartitionHost, StreamsOnly
from ares.runtime_manager.schedules import ScheduleKeeper
from ares.runtime_manager.shutdown import ShutdownBudget, within
from ares.tasks import cancel_and_wait, stop_client
from ares.topics import COMMANDS, DLQ, EVENTS, REPLIES, TopicPlan

log = logging.getLogger(__name__)
HEARTBEAT_INTERVAL_MS = 1000
# A partition whose takeover failed (a hanging transaction, the broker away) is tried again
# this often while it stays assigned: an operator's fix brings it back without a restart.
TAKEOVER_RETRY_S = 10.0
# Scanners for concurrent takeovers: a scanner is one consumer that scans one partition at
# a time, so a survivor taking over a lost worker's partitions reads up to this many at
# once (the others queue). Opened at start: opening one in a failover costs a bootstrap.
TAKEOVER_SCANNERS = 3


class PartitionOwner:
    """A member of the runtime group; owns the event-log partitions it is assigned."""

    name = "runtime-manager"

    def __init__(self, settings: Settings, plan: TopicPlan,
                 host: PartitionHost | None = None, instance_id: str | None = None,
                 session_timeout_ms: int = 10_000, client_id: str | None = None,
                 arena: Arena | None = None, shutdown: ShutdownBudget | None = None,
                 group_heartbeat_ms: int = HEARTBEAT_INTERVAL_MS,
                 leave_group_on_stop: bool = False) -> None:
        self.settings = settings
        self.plan = plan
        self.host: PartitionHost = host or StreamsOnly(settings, plan)
        self.group_id = runtime_group(settings)
        self.events_topic = plan.name(EVENTS)
        self.commands_topic = plan.name(COMMANDS)
        self.replies_topic = plan.name(REPLIES)
        self.dlq_topic = plan.name(DLQ)
        self.writers: dict[int, PartitionWriter] = {}
        self.ready = asyncio.Event()
        self.issuers = IssuerPolicy.parse(settings.command_issuers)
        self.schedules = ScheduleKeeper(plan, client_id or instance_id or "ares-runtime",
                                        self.issuers)
        # worker.crash (ares.runtime_manager.arena): refused unless --arena / ARES_ARENA=1.
        self.arena = arena or Arena(client_id or instance_id or "ares-runtime", settings.arena)
        # ARES_CRASH_POINT (tests and chaos only): read once, here; never from a command.
        crash_points.arm_from_env()
        self.commands = CommandHandler(
            Gate(settings.max_record_bytes, plan.partitions, plan.topic(REPLIES).partitions,
                 plan.name(REPLIES), self.issuers),
            self.host, Topics(self.commands_topic, self.replies_topic, self.dlq_topic),
            self.schedules, self.arena)
        self._instance_id = instance_id
        # Our member's client id in the group: the worker id other members see.
        self.client_id = client_id or instance_id or "ares-runtime"
        self._admin: AIOKafkaAdminClient | None = None
        self._session_timeout_ms = session_timeout_ms
        # How soon this member hears of a rebalance (the coordinator answers a heartbeat
        # with REBALANCE_IN_PROGRESS): the floor of a failover's hand-over to survivors.
        self._group_heartbeat_ms = group_heartbeat_ms
        self.shutdown = shutdown or ShutdownBudget()
        self.leave_group_on_stop = leave_group_on_stop
        # Revoked partitions' writers, warm, until the assignment says whether they stay;
        # meanwhile their agents run and nothing of them commits (``assignment``).
        self._suspended: dict[int, PartitionWriter] = {}
        self._holds = CommitHold()
        self._handled: dict[int, int] = {}  # partition -> next command offset to handle
        self._lock = asyncio.Lock()  # processing and rebalancing never overlap
        self._consumer: AIOKafkaConsumer | None = None
        self._scanner: PartitionScanner | None = None
        self._spare_scanners: list[PartitionScanner] = []  # for concurrent takeovers
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # Assigned partitions whose takeover failed: their commands wait (paused), retried.
        self._unopened: set[int] = set()
        self._retry_at = 0.0

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._open_clients()
        except BaseException:
            await self._close_clients()  # a failed start leaves no client open behind it
            raise
        self._task = asyncio.create_task(self._consume(), name="owner-consume")

    async def _open_clients(self) -> None:
        self._scanner = await PartitionScanner.open(self.settings)
        opened = await asyncio.gather(
            *(PartitionScanner.open(self.settings) for _ in range(TAKEOVER_SCANNERS - 1)),
            return_exceptions=True)
        # Kept before a failure is raised, so that the failed start closes them.
        self._spare_scanners = [one for one in opened if isinstance(one, PartitionScanner)]
        for failure in opened:
            if isinstance(failure, BaseException):
                raise failure
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka_bootstrap,
                                          **self.settings.kafka_options())
        try:
            await self._admin.start()
        except KafkaError as exc:
            raise translate(exc, "starting the runtime group's admin client") from exc
        self._consumer = new_consumer(
            self.settings, group_id=self.group_id, group_instance_id=self._instance_id,
            client_id=self.client_id,
            partition_assignment_strategy=(StickyPartitionAssignor,),
            session_timeout_ms=self._session_timeout_ms,
            heartbeat_interval_ms=self._group_heartbeat_ms,
            max_poll_records=500,
        )
        try:
            await self._consumer.start()
        except KafkaError as exc:
            raise translate(exc, "joining the runtime group") from exc
        self._consumer.subscribe([self.commands_topic], listener=RebalanceListener(self))

    async def _close_clients(self) -> None:
        consumer, scanner, admin = self._consumer, self._scanner, self._admin
        spares, self._spare_scanners = self._spare_scanners, []
        self._consumer = self._scanner = self._admin = None
        with contextlib.suppress(Exception):
            if consumer is not None:
                await consumer.stop()
        for each in [*([scanner] if scanner is not None else []), *spares]:
            with contextlib.suppress(Exception):
                await each.close()
        with contextlib.suppress(Exception):
            if admin is not None:
                await admin.close()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            await self._task

    async def stop(self) -> None:
        """Graceful, in phases, each within its budget (``ares.runtime_manager.shutdown``):
        stop taking commands (the batch in flight finishes), stop the agents, record their
        hand-off with final snapshots, then leave the group and release the writers. A
        static member leaves only with ``leave_group_on_stop`` (``_leave_group``)."""
        if self._stopping:
            return
        self._stopping = True
        budget = self.shutdown
        if self._task is not None:
            await within(budget, "drain", self._stop_consuming(self._task))
            await cancel_and_wait(self._task)  # abandoned mid-batch: its transaction aborts
        await within(budget, "finish", self._finish())
        await within(budget, "snapshot", self.host.hand_off())
        await within(budget, "release", self._release())

    async def _stop_consuming(self, task: asyncio.Task[None]) -> None:
        async with self._lock:  # not in the middle of a batch
            task.cancel()

    async def _finish(self) -> None:
        await self.schedules.close()
        await self.host.stop_agents()
        # Stopped in the middle of a rebalance: the hand-off is written as before the hold
        # (a partition that moved meanwhile is fenced and refuses it).
        self._holds.lift_all()

    async def _release(self) -> None:
        if self._consumer is not None:
            await stop_client(self._consumer)  # commits nothing (offsets go with transactions)
        if self.leave_group_on_stop:
            await self._leave_group()
        await self.host.close()
        for writer in [*self.writers.values(), *self._suspended.values()]:
            await writer.stop()
        self.writers.clear()
        self._suspended.clear()
        if self._scanner is not None:
            await self._scanner.close()
        for spare in self._spare_scanners:
            await spare.close()
        if self._admin is not None:
            await self._admin.close()

    async def _leave_group(self) -> None:
        """Remove this static member from the group now, by its instance id.

        A static member's consumer sends no LeaveGroup when it stops: that is what lets a
        restarted pod, back within the session timeout, keep its partitions without a
        rebalance. A scale in is the other case: nobody comes back, and the partitions would
        wait out the whole session. Told the stop is for good, the member removes itself as
        KIP-345's admin call does (Kafka Streams' ``CloseOptions.leaveGroup`` is the same
        choice), so the survivors take its partitions over at once. A dynamic member left
        when its consumer stopped."""
        if self._instance_id is None or self._admin is None:
            return
        try:
            how = await remove_member(self._admin, self.group_id, self._instance_id)
        except KafkaError as exc:  # the partitions still move, after the session timeout
            log.warning("%s: could not leave the group %s (%s); its partitions move when "
                        "its session times out", self.client_id, self.group_id, exc)
            return
        log.info("%s: left the group %s (%s member): its partitions move now",
                 self.client_id, self.group_id, how)

    # -- rebalancing ---------------------------------------------------------------------

    async def on_revoked(self, partitions: set[int]) -> None:
        """Eager rebalance (every partition is revoked, ``assignment``): hold the
        partitions' commits but keep their agents running and the writers and state warm,
        until ``on_assigned`` says which ones stay. A hold waits for the writer's current
        transaction, which a slow broker can stretch: the session is kept meanwhile."""
        async with self._lock, _heartbeats_kept(self._consumer):
            self.ready.clear()
            # A member expelled from the group (session expired: paused, partitioned) rejoins
            # without a generation: meanwhile its partitions may have had another owner, who
            # fenced its writers and appended. None of its warm state can be trusted.
            if self._expelled():
                for partition in sorted(partitions | set(self._suspended)):
                    await self._drop_expelled(partition)
                return
            revoked = {p: w for p in partitions if (w := self.writers.pop(p, None)) is not None}
            for partition in revoked:
                await self.schedules.suspend(partition)
            self._suspended.update(revoked)
            await asyncio.gather(*(self._holds.hold(p, w) for p, w in revoked.items()))

    async def _drop_expelled(self, partition: int) -> None:
        writer = self.writers.pop(partition, None) or self._suspended.pop(partition, None)
        if writer is None:
            return
        log.warning("partition %d: expelled from the group, its warm state is dropped",
                    partition)
        await self.schedules.suspend(partition)
        await self.host.release_partition(partition)  # stops the agents, writes nothing
        await self._holds.drop(partition)
        await self.schedules.release(partition)
        await writer.stop()

    def _expelled(self) -> bool:
        # aiokafka resets the generation when the coordinator no longer knows the member.
        generation = None if self._consumer is None else group_generation(self._consumer)
        return generation is not None and generation < 0

    async def on_assigned(self, partitions: set[int]) -> None:
        async with self._lock, _heartbeats_kept(self._consumer):
            self._unopened &= partitions
            for partition in list(self._suspended):
                if partition not in partitions:  # moved: stop its agents, then the writer
                    await self.host.release_partition(partition)
                    await self.schedules.release(partition)
                    await self._holds.drop(partition)
                    await self._suspended.pop(partition).stop()
            # The partitions that stayed go on first: they must not wait for the takeovers
            # (scans) of the ones that arrived.
            arrived = sorted(partitions - set(self._suspended) - set(self.writers))
            retaken = []
            for partition in sorted(partitions & set(self._suspended)):
                warm = self._suspended.pop(partition)
                if not warm.fenced:
                    self.writers[partition] = warm  # stayed: no rescan, agents kept
                    self._holds.lift(partition)
                    await self.host.resume_partition(partition)  # any that stopped meanwhile
                    await self.schedules.resume(partition)
                    continue
                await self.host.release_partition(partition)
                await self.schedules.release(partition)
                await self._holds.drop(partition)
                await warm.stop()
                retaken.append(partition)
            await self._take_over_all([*retaken, *arrived])
            log.info("owning partitions %s of %s", sorted(set(partitions) - self._unopened),
                     self.events_topic)
            self._count_partitions()
            self.ready.set()

    @property
    def waiting_partitions(self) -> frozenset[int]:
        """Assigned partitions not taken over (yet): their commands wait."""
        return frozenset(self._unopened)

    def _count_partitions(self) -> None:
        metrics.OWNED_PARTITIONS.set(len(self.writers))
        metrics.WAITING_PARTITIONS.set(len(self._unopened))

    async def _take_over_all(self, partitions: list[int]) -> None:
        """Take ``partitions`` over at once, each on its own: most of a takeover waits on
        the broker (the fence's init_transactions, the snapshots, the scan, the agents'
        resume appends), so a survivor of a lost worker takes its partitions in about the
        time of one instead of one after another. Each reads through one of the
        ``TAKEOVER_SCANNERS`` (those that share one queue behind its lock); each partition's
        agents resume as soon as its own recovery is done; one that fails is paused and
        retried without holding its siblings (``_take_over``). The group's members are
        described once, for all of them."""
        if not partitions:
            return
        assert self._scanner is not None
        scanners = [self._scanner, *self._spare_scanners]
        live = await self.live_workers()
        await asyncio.gather(*(self._take_over(partition, live, scanners[i % len(scanners)])
                               for i, partition in enumerate(partitions)))

    async def _take_over(self, partition: int, live: frozenset[str] | None = None,
                         scanner: PartitionScanner | None = None) -> None:
        """Open ``partition``'s writer; on failure its commands wait (the partition is
        paused) and it is tried again every ``TAKEOVER_RETRY_S``. One partition that cannot
        be taken over (a hanging transaction it cannot complete waits for an operator) must
        not keep its siblings on this member from being served. ``live``: the group's
        members, described by the caller (None: described here); ``scanner``: the one it
        reads through (None: the owner's)."""
        scanner = scanner or self._scanner
        assert scanner is not None
        assert self._consumer is not None
        tp = TopicPartition(self.commands_topic, partition)
        if live is None:
            live = await self.live_workers()
        try:
            self.writers[partition] = await self.host.open_partition(
                partition, scanner, live)
            crash_points.watch_commits(self.writers[partition].producer, partition)
            await self.schedules.take_over(partition, self.writers[partition], scanner)
        except Exception as exc:
            if (opened := self.writers.pop(partition, None)) is not None:  # schedules failed
                await self.host.release_partition(partition)
                await opened.stop()
            if isinstance(exc, AresError):
                log.error("partition %d: taking it over failed, its commands wait and it is "
                          "tried again every %.0fs: %s", partition, TAKEOVER_RETRY_S, exc)
            else:  # a bug: the traceback says where
                log.exception("partition %d: taking it over failed, its commands wait and "
                              "it is tried again every %.0fs", partition, TAKEOVER_RETRY_S)
            self._unopened.add(partition)
            self._retry_at = time.monotonic() + TAKEOVER_RETRY_S
            self._consumer.pause(tp)
            return
        if partition in self._unopened:
            self._unopened.discard(partition)
            self._consumer.resume(tp)
            log.info("partition %d: taken over on retry", partition)

    async def _retry_takeovers(self) -> None:
        if not self._unopened or time.monotonic() < self._retry_at:
            return
        async with self._lock:
            assert self._consumer is not None
            assigned = {tp.partition for tp in self._consumer.assignment()}
            self._unopened &= assigned
            await self._take_over_all([partition for partition in sorted(self._unopened)
                                       if not await self._still_undecided(partition)])
            self._retry_at = time.monotonic() + TAKEOVER_RETRY_S
            self._count_partitions()

    async def _still_undecided(self, partition: int) -> bool:
        """Whether records still hold the partition's LSO below its high watermark: a cheap
        look, so a retry neither fences again nor holds the command loop for the takeover's
        whole hanging-transaction wait while an operator has not acted yet."""
        assert self._scanner is not None
        try:
            held = await self._scanner.undecided(TopicPartition(self.events_topic, partition))
        except (AresError, KafkaError):
            return False  # the takeover itself will say what is wrong
        if held is not None:
            log.info("partition %d: still held by undecided records (LSO %d < high "
                     "watermark %d); waiting for them to be aborted", partition, *held)
        return held is not None

    async def live_workers(self) -> frozenset[str]:
        """Client ids of the group's members now: a previous owner among them handed its
        partitions over in a rebalance; one that is missing died."""
        if self._admin is None:
            return frozenset()
        try:
            view = await describe_group(self._admin, self.group_id, settings=self.settings,
                                        timeout_s=self.settings.request_timeout_s)
        except (AresError, KafkaError) as exc:
            log.warning("could not list the group's members (%s): previous owners count as "
                        "lost", exc)
            return frozenset()
        return view.client_ids

    # -- the command loop ----------------------------------------------------------------

    async def _consume(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=200)
            self._record_lag()
            await self._retry_takeovers()
            await self._renew_writers()
            if not batches:
                continue
            async with self._lock:
                await asyncio.gather(*(self._process(tp, records)
                                       for tp, records in batches.items()))

    def _record_lag(self) -> None:
        assert self._consumer is not None
        for tp in self._consumer.assignment():
            high, done = self._consumer.highwater(tp), self._handled.get(tp.partition)
            if high is not None and done is not None:
                metrics.CONSUMER_LAG.labels(str(tp.partition)).set(max(high - done, 0))

    async def _renew_writers(self) -> None:
        """Take over again every owned partition whose writer's producer broke although no
        command has found out yet: one retired while an agent appended (a resurrection, a
        step) would otherwise leave its partition dead until a command came. A writer
        fenced by another owner is left to the rebalance (or the next command): taking its
        partition back now would fence the new owner while the group reassigns."""
        if not any(writer.retired for writer in self.writers.values()):
            return
        async with self._lock:
            for partition, writer in list(self.writers.items()):
                if writer.retired:
                    log.warning("partition %d: its writer's producer broke; taking the "
                                "partition over again with a new one", partition)
                    await self._renew_writer(
                        TopicPartition(self.commands_topic, partition), None)
            self._count_partitions()

    async def _renew_writer(self, tp: TopicPartition, redo_from: int | None) -> None:
        """Drop ``tp``'s writer that can no longer write (fenced, or its producer retired)
        and, while the partition is still ours, take it over again, which fences whoever
        wrote meanwhile and starts a new producer; ``redo_from``: the command offset the
        failed batch began at, read again."""
        if (writer := self.writers.pop(tp.partition, None)) is not None:
            await self.host.release_partition(tp.partition)
            await self.schedules.release(tp.partition)
            await writer.stop()
        assert self._consumer is not None
        if tp in self._consumer.assignment() and self._scanner is not None:
            # Still ours (we were expelled and came back with a stale warm writer, or our
            # producer broke): take it over again, and redo the batch.
            if redo_from is not None:
                self._consumer.seek(tp, redo_from)
            await self._take_over(tp.partition)

    async def _process(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        writer = self.writers.get(tp.partition)
        if writer is None:  # revoked since the fetch: the next owner handles these
            return

        async def work(tx: TransactionScope) -> None:
            crash_points.carrying(tp.partition)
            for record in records:
                crash_points.reached("consumed")
                await self.commands.handle(tx, tp, record)
            await tx.commit_offsets({tp: records[-1].offset + 1}, self.group_id)
            crash_points.reached("before_commit")

        try:
            await writer.submit(work)
            crash_points.reached("after_commit")
            self._handled[tp.partition] = records[-1].offset + 1
            self.arena.committed(tp.partition)  # exits here if the batch held a worker.crash
        except FencedError as exc:
            log.warning("partition %d: its writer can no longer write (%s)", tp.partition, exc)
            await self._renew_writer(tp, records[0].offset)
        except AresError as exc:
            # Nothing of the transaction is visible and no offset was committed: redo it.
            log.warning("transaction on partition %d failed (%s); retrying the batch",
                        tp.partition, exc)
            assert self._consumer is not None
            self._consumer.seek(tp, records[0].offset)
            await asyncio.sleep(0.2)
        finally:
            self.arena.forget(tp.partition)  # not committed: a crash is redone with its batch
            crash_points.carrying(tp.partition, False)


@contextlib.asynccontextmanager
async def _heartbeats_kept(consumer: AIOKafkaConsumer | None) -> AsyncIterator[None]:
    """Keep the member's session alive while a rebalance callback runs.

    aiokafka stops heartbeating from the start of a rejoin until the assignment callback
    returns, so a takeover longer than ``session_timeout_ms`` (a long scan, a hanging
    transaction's wait) got the member expelled mid-takeover: the group rebalanced, the
    next member started the same takeover and was expelled in turn, forever, and no error
    was ever logged. The Java client heartbeats from a thread during callbacks (KIP-62);
    this does the same with aiokafka 0.14's own heartbeat request (``internals.heartbeat``;
    ``ares run`` refuses to start with an aiokafka that lacks it, rather than running
    without). A heartbeat that finds the group rebalancing asks for a rejoin, which
    happens once the callback returns.
    """
    if consumer is None:  # not started yet: no member to keep alive
        yield
        return
    member = consumer

    async def loop() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)
            generation = group_generation(member)
            if generation is None or generation < 0:
                return  # no longer a member: nothing to keep alive
            try:
                await heartbeat(member)
            except KafkaError as exc:
                log.debug("heartbeat during a rebalance callback failed: %s", exc)

    task = asyncio.create_task(loop(), name="owner-callback-heartbeat")
    try:
        yield
    finally:
        await cancel_and_wait(task)
