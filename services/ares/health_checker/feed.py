"""The checker's input: its partitions of ``ares.heartbeats`` and ``ares.events``.

Checker instances share the consumer group ``<prefix>ares-health-checker``; both topics
are co-partitioned and the range assignor gives a member the same partition numbers of
both, so partition p's heartbeats and lifecycle events meet in one checker.

**State is rebuilt from the topics, not from committed offsets.** On every assignment the
feed seeks both topics of each new partition to ``now - lookback`` (offsets by time) and
the core folds everything from there as it would live; the partition becomes *live* (the
core may act on it) once both positions reach the ends they had at assignment. A checker
killed at any moment therefore comes back with the deaths, loops, open resurrections and
silences it had, and nothing is committed. The alert ids already on ``ares.alerts`` in
the same lookback are loaded first, so a rebuilt loop is not alerted twice.

Events are read ``read_committed``: an aborted append (a fenced zombie's) never counts as a
death. This is the reason the checker is built on aiokafka and not on Faust (see
docs/health.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.dlq import DeadLetters, reason_of
from ares.events.kafka.reader import new_consumer
from ares.events.wire.codec import decode, decode_event
from ares.events.wire.schemas import HEARTBEAT
from ares.health_checker.alerts import SOURCE, read_alerts, seek_to_time
from ares.health_checker.detector import HealthState
from ares.tasks import stop_client
from ares.topics import ALERTS, EVENTS, HEARTBEATS, TopicPlan

log = logging.getLogger(__name__)


class Feed(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, settings: Settings, plan: TopicPlan, state: HealthState,
                 lookback_s: float, letters: DeadLetters | None = None) -> None:
        self.settings = settings
        # The checker dead-letters ares.heartbeats (its only reader); an unreadable event is
        # counted here and dead-lettered by the replay reader.
        self.letters = letters
        self.plan = plan
        self.state = state
        self.lookback_s = lookback_s
        self.group_id = f"{settings.topic_prefix}ares-health-checker"
        self.heartbeats = plan.name(HEARTBEATS)
        self.events = plan.name(EVENTS)
        self.consumer: AIOKafkaConsumer | None = None
        self._alerts_reader: AIOKafkaConsumer | None = None
        self._targets: dict[int, dict[TopicPartition, int]] = {}
        self.assigned: set[int] = set()
        self.assignments = 0
        self.undecodable = 0

    async def start(self) -> None:
        # new_consumer does not apply the security settings (yet): passed here.
        security = self.settings.kafka_options()
        self.consumer = new_consumer(self.settings, group_id=self.group_id,
                                     fetch_max_wait_ms=100, session_timeout_ms=10_000,
                                     heartbeat_interval_ms=1000, **security)
        self._alerts_reader = new_consumer(self.settings, fetch_max_wait_ms=50, **security)
        await self.consumer.start()
        await self._alerts_reader.start()
        self.consumer.subscribe([self.heartbeats, self.events], listener=self)

    async def stop(self) -> None:
        for consumer in (self.consumer, self._alerts_reader):
            if consumer is not None:
                await stop_client(consumer)
        self.consumer = self._alerts_reader = None

    @property
    def live(self) -> bool:
        """Assigned at least once and every assigned partition rebuilt."""
        return self.assignments > 0 and all(self.state.is_live(p) for p in self.assigned)

    # -- ConsumerRebalanceListener -------------------------------------------------------

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        gone = {tp.partition for tp in revoked}
        self.state.revoke(gone)
        self.assigned -= gone
        for p in gone:
            self._targets.pop(p, None)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        started = time.monotonic()
        tps = list(assigned)
        partitions = {tp.partition for tp in tps}
        if not tps:  # more checkers than partitions: this one stands by
            self.assignments += 1
            return
        since = time.time() - self.lookback_s
        await self._load_emitted(since)
        assert self.consumer is not None
        ends = await seek_to_time(self.consumer, tps, since)
        self.state.revoke(partitions)  # a partition that came back: rebuilt from scratch
        self.state.assign(partitions)
        for tp in tps:
            self._targets.setdefault(tp.partition, {})[tp] = ends[tp]
        self.assigned |= partitions
        self.assignments += 1
        log.info("assigned partitions %s; rebuilding from the last %.0fs (%.2fs to seek)",
                 sorted(partitions), self.lookback_s, time.monotonic() - started)

    async def _load_emitted(self, since: float) -> None:
        assert self._alerts_reader is not None
        topic = self.plan.name(ALERTS)
        count = 0
        async for alert in read_alerts(self._alerts_reader, topic,
                                       self.plan.topic(ALERTS).partitions, since):
            if alert.get("source") == SOURCE:
                self.state.emitted.add(str(alert["id"]))
                count += 1
        log.info("%d alert(s) of ours found on %s since the lookback", count, topic)

    # -- records -------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 200) -> int:
        """Fold one batch into the state; the number of records. Records that cannot be
        read are dead-lettered (flushed here, before the next batch)."""
        assert self.consumer is not None
        batch = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=5000)
        count = 0
        for tp, records in batch.items():
            for record in records:
                self._fold(tp, record)
            count += len(records)
        if self.letters is not None and self.letters.pending:
            await self.letters.flush()  # kept queued on failure: flushed after the next poll
        await self._check_caught_up()
        return count

    def _fold(self, tp: TopicPartition, record: ConsumerRecord) -> None:
        try:
            if record.value is None:
                raise SchemaError("empty: a record without a value (a tombstone)")
            if tp.topic == self.events:
                self.state.observe_event(tp.partition, decode_event(record.value))
                return
            name, beat = decode(record.value)
            if name != HEARTBEAT:
                raise SchemaError(f"schema_mismatch: a {name} on the heartbeats topic")
            ts = min(beat["timestamp"].timestamp(), time.time())  # a clock ahead of ours
            interval_ms = int(beat.get("interval_ms") or 0)
            if not beat["worker_id"] or interval_ms < 0:
                raise SchemaError(f"invalid_heartbeat: worker {beat['worker_id']!r}, "
                                  f"interval {interval_ms} ms")
        except (SchemaError, OverflowError, ValueError) as exc:
            self.undecodable += 1
            log.warning("unusable record at %s/%d@%d: %s", tp.topic, tp.partition,
                        record.offset, exc)
            if self.letters is not None:
                self.letters.reject(record, reason_of(exc, "invalid_heartbeat"), str(exc))
            return
        self.state.observe_heartbeat(tp.partition, beat["worker_id"], ts, interval_ms,
                                     beat["agents"])

    async def _check_caught_up(self) -> None:
        assert self.consumer is not None
        for partition, targets in list(self._targets.items()):
            positions = [await self.consumer.position(tp) for tp in targets]
            if all(pos >= end for pos, end in zip(positions, targets.values(), strict=True)):
                del self._targets[partition]
                self.state.set_live(partition)
                log.info("partition %d rebuilt: live", partition)
