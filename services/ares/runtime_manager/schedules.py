"""The schedules of the owned partitions: owned and fenced like agents.

The schedule keyed ``schedule:<name>`` belongs to the owner of that key's partition *p* of
``ares.commands``. Its state is its latest record on the compacted ``ares.schedules`` (same
partition *p*), and only *p*'s partition writer writes there, inside its transactions, so a
fenced zombie cannot:

* **takeover**: after the writer's fence, read ``ares.schedules``/*p* (read_committed) to its
  end: the latest record of each key, tombstones deleting;
* **a tick**: ONE transaction of *p*'s writer carries the schedule's record with the new
  ``last_tick`` and the ``task.assign`` command of the tick, on the target agent's partition
  of ``ares.commands``. The task id is derived from the name and the tick's time, so the
  agent's owner applies a tick once even if it were sent twice. Committed: the next owner
  reads the tick as fired. Aborted or never committed (a SIGKILL mid-transaction): neither
  is visible, the next owner finds the tick due and fires it (the catch-up policy);
* **commands** (``schedule.create|pause|resume|delete``) are handled in the owner's command
  transaction: the record (or a tombstone) goes with the consumed offset and the reply.

Memory follows what the transactions write, as they write it: a tick's transaction that
fails puts the schedule back (and the tick stays planned, retried); a command batch that
fails is redone by the owner from its first record, and a command seen again (same id) is
answered as the first time and its schedule's record written again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from ares import metrics
from ares.commands.model import Command, InvalidCommandError, Reply, ReplyStatus
from ares.commands.policy import SETTING as ISSUERS_SETTING
from ares.commands.policy import IssuerPolicy
from ares.errors import AresError, FencedError, SchemaError
from ares.events.kafka.dlq import DeadLetters, reason_of
from ares.events.kafka.errors import translate
from ares.events.kafka.partition_writer import PartitionWriter, TransactionScope
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.routing import partition_for
from ares.events.model import utc_now
from ares.schedules import model as sm
from ares.schedules.model import Schedule, ScheduleError, decide, plan_after
from ares.tasks import cancel_and_wait, wait_for
from ares.topics import COMMANDS, SCHEDULES, TopicPlan

log = logging.getLogger(__name__)

TICKS_PER_TRANSACTION = 200  # ticks due at once go out in transactions of at most this many
MAX_SLEEP_S = 30.0  # the ticker looks at the clock at least this often (clock changes)
RETRY_S = 0.5  # after a failed tick transaction
APPLIED_KEPT = 4096  # command ids remembered per partition, to answer a redone batch alike
STABLE_WAIT_S = 30.0  # a takeover waits this long for ares.schedules/p to be decided
SETTLE_WAIT_S = 10.0  # a stopping ticker waits this long for its tick transactions
ISSUER = "scheduler"  # the issuer of a tick whose schedule has none
# Deterministic ids of tick commands: the same tick is the same command, whoever fires it.
_TICK_NAMESPACE = uuid.UUID("1b0c1c52-5b8f-4c36-9a43-7f1f2f1e9a10")

_Handler = Callable[["_Partition", str, str, TransactionScope, Command], Awaitable[Reply]]


@dataclass(slots=True)
class _Partition:
    """The schedules of one owned partition and its ticker."""

    number: int
    writer: PartitionWriter
    schedules: dict[str, Schedule] = field(default_factory=dict)  # by key
    planned: dict[str, datetime] = field(default_factory=dict)  # the tick each waits for
    planned_catchup: set[str] = field(default_factory=set)  # planned ticks that catch up
    dirty: set[str] = field(default_factory=set)  # to decide again (changed, taken over)
    broken: set[str] = field(default_factory=set)  # said once: a schedule that cannot tick
    applied: OrderedDict[str, tuple[Reply, bool]] = field(default_factory=OrderedDict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Tick transactions in flight: they settle (commit or put back) even if the ticker stops.
    firing: set[asyncio.Task[None]] = field(default_factory=set)


class ScheduleKeeper:
    """Every schedule of the owner's partitions: loaded at takeover, fired on time."""

    def __init__(self, plan: TopicPlan, worker_id: str,
                 issuers: IssuerPolicy | None = None) -> None:
        self.topic = plan.name(SCHEDULES)
        self.commands_topic = plan.name(COMMANDS)
        self.partition_count = plan.partitions
        self.worker_id = worker_id
        self.issuers = issuers
        self.partitions: dict[int, _Partition] = {}
        self._topic_seen = False
        # Unreadable schedule records go to ares.dlq (set by the runtime manager service).
        self.letters: DeadLetters | None = None
        self._handlers: dict[str, _Handler] = {
            sm.CREATE: self._create, sm.PAUSE: self._pause, sm.RESUME: self._resume,
            sm.DELETE: self._delete}

    # -- ownership (called by the partition owner) --------------------------------------

    async def take_over(self, partition: int, writer: PartitionWriter,
                        scanner: PartitionScanner) -> None:
        """After ``writer`` fenced the previous owner: load the partition's schedules and
        start firing them. Raises when they cannot be read (the takeover is retried)."""
        await self.release(partition)
        schedules = await self._load(partition, scanner)
        state = _Partition(partition, writer, schedules, dirty=set(schedules))
        self.partitions[partition] = state
        self._start(state)
        self._count()
        if schedules:
            log.info("partition %d: %d schedule(s) taken over", partition, len(schedules))

    async def suspend(self, partition: int) -> None:
        """A rebalance started: stop firing, keep the state (the partition may come back)."""
        state = self.partitions.get(partition)
        if state is not None:
            await self._stop(state)

    async def resume(self, partition: int) -> None:
        """The partition came back: fire again; ticks that came due meanwhile are missed."""
        state = self.partitions.get(partition)
        if state is None:
            return
        state.planned.clear()
        state.planned_catchup.clear()
        state.dirty.update(state.schedules)
        self._start(state)

    async def release(self, partition: int) -> None:
        """Ownership moved away (or the writer was fenced): stop, forget."""
        state = self.partitions.pop(partition, None)
        if state is not None:
            await self._stop(state)
            self._count()

    async def close(self) -> None:
        for partition in list(self.partitions):
            await self.release(partition)

    def schedules(self) -> list[Schedule]:
        return [s for p in self.partitions.values() for s in p.schedules.values()]

    # -- commands (inside the owner's transaction) -------------------------------------

    def handles(self, command_type: str) -> bool:
        return command_type in sm.COMMAND_TYPES

    async def handle(self, tx: TransactionScope, command: Command) -> Reply:
        """A schedule command: its record (or tombstone) in ``tx``, and the reply."""
        key = command.stream_id
        try:
            name = sm.name_of(key)
        except ScheduleError as exc:
            raise InvalidCommandError("invalid_schedule", str(exc)) from exc
        state = self.partitions.get(partition_for(key, self.partition_count))
        if state is None:
            return _reply(command, ReplyStatus.REJECTED, "partition not recovered yet")
        seen = state.applied.get(command.id)
        if seen is not None:  # the owner redoes a batch whose transaction failed
            answer, wrote = seen
            if wrote:
                await self._write_current(tx, state, key)
            return answer
        before = state.schedules.get(key)
        answer = await self._handlers[command.type](state, key, name, tx, command)
        state.applied[command.id] = (answer, answer.status is ReplyStatus.OK)
        while len(state.applied) > APPLIED_KEPT:
            state.applied.popitem(last=False)
        if state.schedules.get(key) is not before:  # changed: decide again, now
            state.dirty.add(key)
            state.planned.pop(key, None)
            state.planned_catchup.discard(key)
            state.broken.discard(key)
            state.wake.set()
            self._count()
        return answer

    async def _create(self, state: _Partition, key: str, name: str, tx: TransactionScope,
                      command: Command) -> Reply:
        payload = command.payload
        now = utc_now()
        try:
            fresh = Schedule.create(
                name, str(payload.get("agent_id") or ""), str(payload.get("cron") or ""),
                input_json=str(payload.get("input_json") or "null"),
                catchup=str(payload.get("catchup") or sm.ONCE),
                timezone=str(payload.get("timezone") or sm.DEFAULT_TIMEZONE),
                issuer=command.issuer, now=now)
        except ScheduleError as exc:
            raise InvalidCommandError("invalid_schedule", str(exc)) from exc
        if self.issuers is not None and not self.issuers.allows(
                fresh.issuer, fresh.agent_id, "task.assign"):
            raise InvalidCommandError(
                "unauthorised_issuer", f"issuer {fresh.issuer!r} may not send task.assign to "
                f"{fresh.agent_id!r} ({ISSUERS_SETTING}): its schedule's ticks would be refused")
        current = state.schedules.get(key)
        if current is not None:
            if current.definition != fresh.definition:
                return _reply(command, ReplyStatus.REJECTED,
                              f"schedule {name!r} exists with another definition (agent "
                              f"{current.agent_id}, cron {current.cron!r}, time zone "
                              f"{current.timezone}); delete it first")
            await self._write(tx, state, current)
            return _reply(command, ReplyStatus.OK, "already exists")
        await self._write(tx, state, fresh)
        state.schedules[key] = fresh
        log.info("schedule %s created: agent %s, cron %r (%s), catch-up %s", name,
                 fresh.agent_id, fresh.cron, fresh.timezone, fresh.catchup)
        return _reply(command, ReplyStatus.OK,
                      f"created; next tick {sm.tick_text(fresh.schedule.next_after(now))}")

    async def _pause(self, state: _Partition, key: str, name: str, tx: TransactionScope,
                     command: Command) -> Reply:
        current = state.schedules.get(key)
        if current is None:
            return _unknown(command, name)
        if current.paused:
            await self._write(tx, state, current)
            return _reply(command, ReplyStatus.OK, "already paused")
        updated = current.paused_at(utc_now())
        await self._write(tx, state, updated)
        state.schedules[key] = updated
        log.info("schedule %s paused", name)
        return _reply(command, ReplyStatus.OK, "paused")

    async def _resume(self, state: _Partition, key: str, name: str, tx: TransactionScope,
                      command: Command) -> Reply:
        current = state.schedules.get(key)
        if current is None:
            return _unknown(command, name)
        if not current.paused:
            await self._write(tx, state, current)
            return _reply(command, ReplyStatus.OK, "not paused")
        now = utc_now()
        updated = current.resumed_at(now)
        await self._write(tx, state, updated)
        state.schedules[key] = updated
        log.info("schedule %s resumed", name)
        return _reply(command, ReplyStatus.OK,
                      f"resumed; next tick {sm.tick_text(updated.schedule.next_after(now))}")

    async def _delete(self, state: _Partition, key: str, name: str, tx: TransactionScope,
                      command: Command) -> Reply:
        if key not in state.schedules:
            return _unknown(command, name)
        await self._tombstone(state, key)
        del state.schedules[key]
        log.info("schedule %s deleted", name)
        return _reply(command, ReplyStatus.OK, "deleted")

    async def _write_current(self, tx: TransactionScope, state: _Partition, key: str) -> None:
        current = state.schedules.get(key)
        if current is None:
            await self._tombstone(state, key)
        else:
            await self._write(tx, state, current)

    async def _write(self, tx: TransactionScope, state: _Partition, schedule: Schedule) -> None:
        await tx.send(self.topic, schedule.encode(), key=schedule.key.encode(),
                      partition=state.number)

    async def _tombstone(self, state: _Partition, key: str) -> None:
        # Straight to the writer's producer, inside its open transaction: a tombstone's value
        # is None, which TransactionScope.send (bytes, compiled and checked) does not take.
        await state.writer.producer.send(self.topic, None, key=key.encode(),
                                         partition=state.number)

    # -- takeover ------------------------------------------------------------------------

    async def _load(self, partition: int, scanner: PartitionScanner) -> dict[str, Schedule]:
        """The latest readable record of every schedule of the partition, after the fence
        (the previous owner's open transaction is aborted: nothing of it may be read)."""
        tp = TopicPartition(self.topic, partition)
        try:
            if not self._topic_seen:
                await scanner.partitions(self.topic)  # says how to create it when missing
                self._topic_seen = True
            await scanner.wait_until_stable(tp, await scanner.high_watermark(tp),
                                            timeout_s=STABLE_WAIT_S)
            latest: dict[str, Schedule] = {}
            async for record in scanner.scan_records(tp):
                key = record.key.decode(errors="replace") if record.key is not None else ""
                if record.value is None:  # deleted
                    latest.pop(key, None)
                    continue
                try:
                    schedule = Schedule.decode(record.value)
                    if schedule.key != key:
                        raise SchemaError(f"key_mismatch: record of {schedule.key!r} under "
                                          f"key {key!r}")
                except SchemaError as exc:
                    # Never trusted, never replaced by an older record of the same key.
                    log.error("schedule record at %s/%d@%d is unreadable, %r is not fired "
                              "until it is written again: %s", self.topic, partition,
                              record.offset, key, exc)
                    latest.pop(key, None)
                    if self.letters is not None:
                        self.letters.reject(record, reason_of(exc, "invalid_schedule"),
                                            str(exc))
                    continue
                latest[key] = schedule
        except KafkaError as exc:
            raise translate(exc, f"reading the schedules of {self.topic}/{partition}") from exc
        if self.letters is not None and self.letters.pending:
            await self.letters.flush()  # kept queued on failure; re-read at the next takeover
        return latest

    # -- the ticker ----------------------------------------------------------------------

    def _start(self, state: _Partition) -> None:
        if state.task is None or state.task.done():
            state.wake.set()
            state.task = asyncio.create_task(self._run(state),
                                             name=f"schedules-{state.number}")

    async def _stop(self, state: _Partition) -> None:
        task, state.task = state.task, None
        if task is not None:
            await cancel_and_wait(task, ignore_errors=True)
        if state.firing:  # queued ticks still commit or fail: let memory follow them
            await asyncio.wait(set(state.firing), timeout=SETTLE_WAIT_S)

    async def _run(self, state: _Partition) -> None:
        while True:
            state.wake.clear()  # a change from now on wakes the wait below
            try:
                due, wake_at = self._due(state, utc_now())
                if due:
                    await self._fire(state, due)
                    continue
            except FencedError:
                log.warning("partition %d: fenced, another owner fires its schedules now",
                            state.number)
                return
            except Exception:  # a bug must not stop every schedule of the partition
                log.exception("partition %d: the schedule ticker failed; going on",
                              state.number)
                await asyncio.sleep(RETRY_S)
                continue
            delay = MAX_SLEEP_S if wake_at is None else (wake_at - utc_now()).total_seconds()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await wait_for(state.wake.wait(), min(delay, MAX_SLEEP_S))

    def _due(self, state: _Partition,
             now: datetime) -> tuple[list[tuple[str, datetime, bool]], datetime | None]:
        """The ticks to fire now, and when to look again."""
        due: list[tuple[str, datetime, bool]] = []
        wake_at: datetime | None = None
        for key, schedule in list(state.schedules.items()):
            planned = state.planned.get(key)
            if planned is not None and planned > now and key not in state.dirty:
                wake_at = planned if wake_at is None else min(wake_at, planned)
                continue
            state.dirty.discard(key)
            try:
                decision = decide(schedule, now, planned)
            except ScheduleError as exc:
                if key not in state.broken:
                    state.broken.add(key)
                    log.error("schedule %s cannot tick: %s", schedule.name, exc)
                continue
            if decision.fire is not None:
                catchup = decision.catchup or key in state.planned_catchup
                due.append((key, decision.fire, catchup))
                if decision.catchup:
                    log.info("schedule %s: ticks since %s were missed (no owner fired "
                             "them); catch-up once fires the latest, %s", schedule.name,
                             sm.tick_text(decision.missed_since or decision.fire),
                             sm.tick_text(decision.fire))
                continue
            if decision.missed_since is not None:  # catch-up skip
                metrics.SCHEDULE_TICKS.labels("skipped").inc()
                log.info("schedule %s: ticks since %s were missed (no owner fired them); "
                         "catch-up skip fires none", schedule.name,
                         sm.tick_text(decision.missed_since))
            if decision.wait is None:
                state.planned.pop(key, None)
            else:
                state.planned[key] = decision.wait
                wake_at = decision.wait if wake_at is None else min(wake_at, decision.wait)
        return due, wake_at

    async def _fire(self, state: _Partition, due: list[tuple[str, datetime, bool]]) -> None:
        """Fire ``due`` in transactions of ``state``'s writer; FencedError when fenced."""
        chunks = [due[i:i + TICKS_PER_TRANSACTION]
                  for i in range(0, len(due), TICKS_PER_TRANSACTION)]
        # Tasks of their own, shielded: a queued work item commits even if its submitter is
        # cancelled (a rebalance stops the ticker), and the memory must follow its outcome.
        tasks = [asyncio.create_task(self._fire_chunk(state, chunk)) for chunk in chunks]
        state.firing.update(tasks)
        for task in tasks:
            task.add_done_callback(state.firing.discard)
        outcomes = await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        fenced = next((o for o in outcomes if isinstance(o, FencedError)), None)
        if fenced is not None:
            raise fenced
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, AresError):
                raise outcome  # a bug: the task ends with it (logged by the owner's loop)
        if any(isinstance(o, AresError) for o in outcomes):
            await asyncio.sleep(RETRY_S)

    async def _fire_chunk(self, state: _Partition,
                          chunk: list[tuple[str, datetime, bool]]) -> None:
        fired: list[tuple[str, datetime, bool, Schedule]] = []  # with the schedule before

        async def work(tx: TransactionScope) -> None:
            now = utc_now()
            for key, tick, catchup in chunk:
                schedule = state.schedules.get(key)
                if schedule is None or schedule.paused or tick <= schedule.base:
                    continue  # changed since the decision
                updated = schedule.fired(tick, self.worker_id, now)
                await self._write(tx, state, updated)
                agent = schedule.agent_id
                await tx.send(self.commands_topic,
                              self._tick_command(updated, tick, catchup, now).encode(),
                              key=agent.encode(),
                              partition=partition_for(agent, self.partition_count))
                state.schedules[key] = updated  # what this transaction writes
                fired.append((key, tick, catchup, schedule))

        try:
            await state.writer.submit(work)
        except AresError as exc:
            for key, tick, catchup, before in fired:
                current = state.schedules.get(key)
                if current is not None and current.last_tick == tick:  # put it back
                    state.schedules[key] = replace(current, last_tick=before.last_tick,
                                                   ticks=before.ticks,
                                                   fired_by=before.fired_by)
                state.planned[key] = tick  # retried as planned, not as missed
                if catchup:
                    state.planned_catchup.add(key)
            if fired:
                metrics.SCHEDULE_TICKS.labels("failed").inc(len(fired))
            if not isinstance(exc, FencedError):
                log.warning("partition %d: the transaction of %d tick(s) failed (%s); "
                            "retrying", state.number, len(fired), exc)
            raise
        committed = utc_now()
        for key, tick, catchup, before in fired:
            state.planned_catchup.discard(key)
            current = state.schedules.get(key)
            following = None if current is None else plan_after(current, tick, committed)
            if following is None:
                state.planned.pop(key, None)
            else:
                state.planned[key] = following
            if catchup:
                metrics.SCHEDULE_TICKS.labels("caught_up").inc()
            else:
                metrics.SCHEDULE_TICKS.labels("fired").inc()
                metrics.SCHEDULE_TICK_LATENESS.observe(max((committed - tick).total_seconds(),
                                                           0.0))
            name = key.removeprefix(sm.KEY_PREFIX)
            log.info("schedule %s: tick %s fired%s: task %s for agent %s", name,
                     sm.tick_text(tick), " (catch-up)" if catchup else "",
                     sm.task_id_for(name, tick), before.agent_id)

    def _tick_command(self, schedule: Schedule, tick: datetime, catchup: bool,
                      now: datetime) -> Command:
        stamp = sm.tick_text(tick)
        return Command(
            type="task.assign", stream_id=schedule.agent_id,
            payload={"task_id": sm.task_id_for(schedule.name, tick),
                     "input_json": schedule.input_json},
            issuer=schedule.issuer or ISSUER,
            id=str(uuid.uuid5(_TICK_NAMESPACE, f"{schedule.key}@{stamp}")), timestamp=now,
            metadata={sm.META_SCHEDULE: schedule.name, sm.META_TICK: stamp,
                      sm.META_WORKER: self.worker_id,
                      sm.META_CATCHUP: "true" if catchup else "false"})

    def _count(self) -> None:
        paused = sum(1 for s in self.schedules() if s.paused)
        metrics.SCHEDULES.labels("active").set(len(self.schedules()) - paused)
        metrics.SCHEDULES.labels("paused").set(paused)


def _reply(command: Command, status: ReplyStatus, message: str) -> Reply:
    return Reply(command.id, status, command.stream_id, message=message)


def _unknown(command: Command, name: str) -> Reply:
    return _reply(command, ReplyStatus.REJECTED,
                  f"no schedule {name!r} (create it with `ares schedules create`)")
