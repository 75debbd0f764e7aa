"""``ares run budget-keeper``: ares.usage folded into a budget state per tenant.

* **Input.** Keepers share the consumer group ``<prefix>ares-budget-keeper`` on
  ``ares.usage`` (key tenant, so one tenant's usage is on one partition and one keeper).
  ``read_uncommitted`` is right: the usage producers are not transactional (a provider's
  answer is paid whether or not the step's transaction commits). Every keeper also reads
  all of the compacted ``ares.budget-limits`` (no group) and keeps following it.
* **State without a changelog.** The state is a pure function of the day's usage, so on
  every assignment a partition is re-read from the first record stamped at or after
  00:00 UTC minus one minute and folded afresh (``UsageFold``: usage ids count once);
  its tenants are published only once it has caught up with the end it had at the
  assignment, so a restart never publishes a partial total.
* **Output.** A ``BudgetState`` per tenant on the compacted ``ares.budgets``, published
  when it changed: at once when ``over`` flips (that is what the runtimes act on),
  otherwise at most every ``publish_interval_s``, and again at each minute boundary
  (the minute's tokens start from zero). Only the keeper owning the tenant's partition
  publishes it, limits-only tenants included.
* **Dead letters.** A record of ``ares.usage`` or ``ares.budget-limits`` that cannot be
  used goes to ``ares.dlq`` with the reason and its original bytes, once
  (``ares.events.kafka.dlq.DeadLetters``: the keepers share one fenced dead-letter
  writer, which knows what ``ares.dlq`` holds), however often the day is re-read; the
  consumed offsets are committed only once the batch's letters are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from ares.budgets.limits import apply_limits, assign_all, read_to_end
from ares.budgets.model import BudgetLimits, BudgetState, day_start, minute_start
from ares.budgets.windows import UsageFold, state_at
from ares.config import Settings
from ares.events.kafka.dlq import BUDGET_KEEPER, DeadLetters
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.events.kafka.routing import partition_for
from ares.llm.telemetry import UsageRecord
from ares.service import Service
from ares.tasks import wait_for
from ares.topics import BUDGET_LIMITS, BUDGETS, DLQ, USAGE, TopicPlan

log = logging.getLogger(__name__)
GROUP = "ares-budget-keeper"
PUBLISH_INTERVAL_S = 0.1
# Records stamped up to this long before 00:00 UTC are re-read (a clock a little behind,
# a record of yesterday's last minute still in its minute window).
REPLAY_MARGIN_S = 60.0
COMMIT_EVERY_S = 5.0
UNDECODABLE = "undecodable"
INVALID_USAGE = "invalid_usage"
MAX_AT = 1e11  # seconds since the epoch: the year 5138


class BudgetKeeper(Service):
    name = "budget-keeper"

    def __init__(self, settings: Settings, plan: TopicPlan, *,
                 publish_interval_s: float = PUBLISH_INTERVAL_S,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.settings = settings
        self.group_id = f"{settings.topic_prefix}{GROUP}"
        self.usage_topic = plan.name(USAGE)
        self.limits_topic = plan.name(BUDGET_LIMITS)
        self.budgets_topic = plan.name(BUDGETS)
        self.dlq_topic = plan.name(DLQ)
        self.publish_interval_s = publish_interval_s
        self.clock = clock
        self.limits: dict[str, BudgetLimits] = {}
        self.folds: dict[int, UsageFold] = {}  # by partition of ares.usage
        self.live: set[int] = set()  # partitions caught up with their end at assignment
        self.usage_partitions = 0
        self.assignments = 0
        self.limits_loaded = False
        # Counters (tests, logs): records folded, dead letters, states published.
        self.folded = 0
        self.published = 0
        self.letters = DeadLetters(settings, plan.name, BUDGET_KEEPER)
        self._targets: dict[int, int] = {}  # partition -> end offset to reach to be live
        self._handled: dict[int, int] = {}  # partition -> committed offset
        self._dirty: set[str] = set()
        self._last: dict[str, tuple[float, tuple[Any, ...], bool]] = {}
        self._minute = 0
        self._wake = asyncio.Event()
        self._usage: AIOKafkaConsumer | None = None
        self._limits_reader: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None

    @property
    def dead_letters(self) -> int:
        """Records this keeper dead-lettered (not those already on ares.dlq)."""
        return self.letters.queued

    @property
    def ready(self) -> bool:
        return (self.running and self.limits_loaded and self.assignments > 0
                and not self._targets)

    async def on_start(self) -> None:
        options = self.settings.kafka_options()
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap, enable_idempotence=True,
            acks="all", linger_ms=5, **options)
        self._limits_reader = new_consumer(self.settings, fetch_max_wait_ms=200)
        self._usage = new_consumer(
            self.settings, group_id=self.group_id, isolation_level="read_uncommitted",
            session_timeout_ms=10_000, heartbeat_interval_ms=1000, max_poll_records=5000)
        try:
            await self._producer.start()
            await self.letters.start()
            await self._limits_reader.start()
            await self._usage.start()
            self.usage_partitions = len(await topic_partitions(self._usage, self.usage_topic))
            tps = await assign_all(self._limits_reader, self.limits_topic)
            await read_to_end(self._limits_reader, tps, lambda r: self._limit_changed(
                apply_limits(self.limits, r, self.letters.reject)))
            await self.letters.flush()
            self.limits_loaded = True
            log.info("budget keeper: limits of %d tenant(s) loaded from %s",
                     len(self.limits), self.limits_topic)
            self._usage.subscribe([self.usage_topic], listener=_Listener(self))
        except KafkaError as exc:
            await self.on_shutdown()
            raise translate(exc, "starting the budget keeper") from exc
        except BaseException:
            await self.on_shutdown()
            raise

    def background(self) -> dict[str, Coroutine[Any, Any, None]]:
        return {"budget-usage": self._consume_usage(), "budget-limits": self._follow_limits(),
                "budget-publisher": self._publish_loop()}

    async def on_shutdown(self) -> None:
        if self._usage is not None:
            with contextlib.suppress(KafkaError):
                await self._commit_progress()
        for client in (self._usage, self._limits_reader):
            if client is not None:
                await client.stop()
        if self._producer is not None:
            await self._producer.stop()
        await self.letters.stop()
        self._usage = self._limits_reader = None
        self._producer = None

    # -- assignment (called by the consumer, inside getmany) ------------------------------

    async def assigned(self, tps: Iterable[TopicPartition]) -> None:
        assert self._usage is not None
        tps = list(tps)
        now = self.clock()
        since = day_start(now) - REPLAY_MARGIN_S
        if tps:
            # Every await first: the usage loop fetches while this listener waits, and a
            # record fetched between a partition's seek and its new fold would be skipped
            # (position moved, nothing folded), so the re-read would undercount.
            ends = await self._usage.end_offsets(tps)
            found = await self._usage.offsets_for_times({tp: int(since * 1000) for tp in tps})
            committed = {tp: await self._usage.committed(tp) for tp in tps}
            for tp in tps:
                hit = found.get(tp)
                start = hit.offset if hit is not None else ends[tp]
                self._usage.seek(tp, start)
                self._handled[tp.partition] = committed[tp] or 0
                self.folds[tp.partition] = UsageFold()  # rebuilt from scratch
                self.live.discard(tp.partition)
                if start >= ends[tp]:
                    self._set_live(tp.partition)
                else:
                    self._targets[tp.partition] = ends[tp]
        self.assignments += 1
        log.info("budget keeper: assigned %s of %s; re-reading from %s (the day's usage)",
                 sorted(tp.partition for tp in tps), self.usage_topic,
                 time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)))

    async def revoked(self, tps: Iterable[TopicPartition]) -> None:
        with contextlib.suppress(KafkaError):
            await self._commit_progress()
        for tp in tps:
            self.folds.pop(tp.partition, None)
            self._targets.pop(tp.partition, None)
            self._handled.pop(tp.partition, None)
            self.live.discard(tp.partition)

    # -- the loops ------------------------------------------------------------------------

    async def _consume_usage(self) -> None:
        assert self._usage is not None
        last_commit = time.monotonic()
        while True:
            batch: dict[TopicPartition, list[ConsumerRecord]] = {}
            try:
                batch = await self._usage.getmany(timeout_ms=200, max_records=5000)
                now = self.clock()
                for tp, records in batch.items():
                    for record in records:
                        self._fold(tp, record, now)
                # Nothing is committed past a record whose dead letter is not written.
                flushed = await self.letters.flush()
                await self._check_live()
                if flushed and time.monotonic() - last_commit > COMMIT_EVERY_S:
                    last_commit = time.monotonic()
                    await self._commit_progress()
            except KafkaError as exc:  # the broker went away: aiokafka reconnects
                log.warning("budget keeper: reading %s failed: %s", self.usage_topic, exc)
                await asyncio.sleep(1.0)
            if batch:
                self._wake.set()

    async def _follow_limits(self) -> None:
        assert self._limits_reader is not None
        while True:
            try:
                batch = await self._limits_reader.getmany(timeout_ms=500)
            except KafkaError as exc:
                log.warning("budget keeper: reading %s failed: %s", self.limits_topic, exc)
                await asyncio.sleep(1.0)
                continue
            for records in batch.values():
                for record in records:
                    self._limit_changed(apply_limits(self.limits, record,
                                                     self.letters.reject))
            if self.letters.pending:
                await self.letters.flush()

    async def _publish_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_for(self._wake.wait(), self.publish_interval_s / 2)
            self._wake.clear()
            try:
                await self.publish_due(self.clock())
            except KafkaError as exc:
                log.warning("budget keeper: publishing to %s failed: %s", self.budgets_topic,
                            exc)
                await asyncio.sleep(1.0)

    # -- folding --------------------------------------------------------------------------

    def _fold(self, tp: TopicPartition, record: ConsumerRecord, now: float) -> None:
        fold = self.folds.get(tp.partition)
        if fold is None:  # revoked meanwhile
            return
        try:
            if record.value is None:
                raise _Rejected(UNDECODABLE, "a usage record with no value (a tombstone)")
            try:
                data = json.loads(record.value)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                raise _Rejected(UNDECODABLE, f"not JSON: {exc}") from None
            if not isinstance(data, dict):
                raise _Rejected(INVALID_USAGE, f"not a JSON object: {type(data).__name__}")
            try:
                usage = UsageRecord.from_json(data)
            except ValueError as exc:
                raise _Rejected(INVALID_USAGE, str(exc)) from None
            if usage.cost_usd < 0 or usage.cost_usd != usage.cost_usd or not usage.usage_id:
                raise _Rejected(INVALID_USAGE, "cost_usd must be >= 0 and usage_id set")
            if not (0 < usage.at < MAX_AT) or not math.isfinite(usage.cost_usd):
                raise _Rejected(INVALID_USAGE, f"at {usage.at!r} / cost_usd "
                                f"{usage.cost_usd!r} out of range")
        except _Rejected as rejected:
            self.letters.reject(record, rejected.reason, rejected.detail)
            return
        if fold.add(usage, now):
            self.folded += 1
            self._dirty.add(usage.tenant)

    def _limit_changed(self, tenant: str | None) -> None:
        if tenant is not None:
            self._dirty.add(tenant)
            self._wake.set()

    async def _check_live(self) -> None:
        assert self._usage is not None
        for partition, end in list(self._targets.items()):
            if await self._usage.position(TopicPartition(self.usage_topic, partition)) >= end:
                del self._targets[partition]
                self._set_live(partition)

    def _set_live(self, partition: int) -> None:
        self.live.add(partition)
        fold = self.folds.get(partition)
        if fold is not None:
            self._dirty |= set(fold.tenants)
        self._dirty |= {t for t in self.limits if self._owns(t)}
        log.info("budget keeper: partition %d of %s caught up (%d tenant(s)): live",
                 partition, self.usage_topic, len(fold.tenants) if fold else 0)
        self._wake.set()

    async def _commit_progress(self) -> None:
        """Commit the positions of the live partitions: everything before them is handled
        (folded or dead-lettered)."""
        if self._usage is None:
            return
        offsets: dict[TopicPartition, int] = {}
        for partition in self.live:
            tp = TopicPartition(self.usage_topic, partition)
            position = await self._usage.position(tp)
            if position > self._handled.get(partition, 0):
                offsets[tp] = position
        if offsets:
            await self._usage.commit(offsets)
            for tp, offset in offsets.items():
                self._handled[tp.partition] = offset

    # -- publishing -----------------------------------------------------------------------

    def _owns(self, tenant: str) -> bool:
        return (self.usage_partitions > 0
                and partition_for(tenant, self.usage_partitions) in self.live)

    async def publish_due(self, now: float) -> list[BudgetState]:
        """Publish the states that changed and are due; the published states."""
        window = minute_start(now)
        if window != self._minute:  # a new minute: every tenant's minute total restarts
            self._minute = window
            live = [self.folds[p] for p in self.live if p in self.folds]
            for fold in live:
                fold.prune(now)
            self._dirty |= {t for fold in live for t in fold.tenants}
            self._dirty |= set(self._last)
        if not self._dirty or self._producer is None:
            return []
        live_folds = [self.folds[p] for p in self.live if p in self.folds]
        due: list[BudgetState] = []
        for tenant in list(self._dirty):
            if not self._owns(tenant):
                self._dirty.discard(tenant)  # not ours (or not caught up: done when live)
                continue
            state = state_at(tenant, self.limits.get(tenant, BudgetLimits()), live_folds, now)
            content = (state.limits, state.minute_start, state.minute_tokens, state.day,
                       state.day_usd, state.over)
            last = self._last.get(tenant)
            if last is not None and last[1] == content:
                self._dirty.discard(tenant)
                continue
            # "over" flipping is what the runtimes act on: never held back by the throttle.
            if (last is not None and last[2] == state.over
                    and now - last[0] < self.publish_interval_s):
                continue  # stays dirty: published on a later tick
            self._dirty.discard(tenant)
            self._last[tenant] = (now, content, state.over)
            due.append(state)
        if due:
            sent = [await self._producer.send(self.budgets_topic, s.encode(),
                                              key=s.tenant.encode()) for s in due]
            await asyncio.gather(*sent)
            self.published += len(due)
            for state in due:
                if state.over:
                    log.info("budget keeper: %s over budget: %s", state.tenant, state.reason)
        return due


class _Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, keeper: BudgetKeeper) -> None:
        self.keeper = keeper

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.keeper.revoked(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self.keeper.assigned(assigned)
