"""Reading the compacted budget topics whole: every partition from its start to its end
at the time of the call, no consumer group (the CLI, and the keeper's first load)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from ares.budgets.model import BudgetLimits, BudgetState, check_tenant
from ares.events.kafka.dlq import Reject, reason_of
from ares.events.kafka.reader import topic_partitions

log = logging.getLogger(__name__)
T = TypeVar("T")


async def assign_all(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Assign every partition of ``topic`` from its beginning; the partitions."""
    tps = [TopicPartition(topic, p) for p in sorted(await topic_partitions(consumer, topic))]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return tps


async def read_to_end(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                      on_record: Callable[[ConsumerRecord], None],
                      timeout_s: float = 30.0) -> None:
    """Feed every record up to the partitions' ends (as of now) to ``on_record``."""
    ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    deadline = time.monotonic() + timeout_s
    while (open_tps := [tp for tp in tps if await consumer.position(tp) < ends[tp]]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {tps[0].topic} to its end took over "
                                       f"{timeout_s:g}s")
        batch = await consumer.getmany(*open_tps, timeout_ms=500)
        for records in batch.values():
            for record in records:
                on_record(record)


def apply_limits(limits: dict[str, BudgetLimits], record: ConsumerRecord,
                 reject: Reject | None = None) -> str | None:
    """Fold one ``ares.budget-limits`` record into ``limits``; the tenant it changed, or
    None (a record that does not decode is logged, handed to ``reject`` (dead letters)
    when given, and skipped: ``ares budgets set`` validates what it writes, so this is a
    foreign writer's)."""
    try:
        tenant = check_tenant((record.key or b"").decode())
        if record.value is None:  # --clear: a tombstone
            limits.pop(tenant, None)
            return tenant
        value = BudgetLimits.decode(record.value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        log.warning("skipping budget limits at %s/%d@%d: %s", record.topic, record.partition,
                    record.offset, exc)
        if reject is not None:
            reject(record, reason_of(exc, "invalid_limits"), str(exc))
        return None
    if value.unlimited:
        limits.pop(tenant, None)
    else:
        limits[tenant] = value
    return tenant


def apply_state(states: dict[str, BudgetState], record: ConsumerRecord,
                reject: Reject | None = None) -> str | None:
    """Fold one ``ares.budgets`` record into ``states``; the tenant, or None if skipped
    (and handed to ``reject``, dead letters, when given)."""
    try:
        tenant = check_tenant((record.key or b"").decode())
        if record.value is None:
            states.pop(tenant, None)
            return tenant
        states[tenant] = BudgetState.decode(record.value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        log.warning("skipping a budget state at %s/%d@%d: %s", record.topic, record.partition,
                    record.offset, exc)
        if reject is not None:
            reject(record, reason_of(exc, "invalid_budget_state"), str(exc))
        return None
    return tenant
