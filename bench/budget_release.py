"""The ``budgets.release`` part of bench/budgets.py: how soon calls held by an exhausted
budget go once the tenant's limit is raised.

A ``BudgetKeeper`` and the runtime's ``KafkaBudgetView`` (both in this process, as in
``ares run budget-keeper`` and a runtime manager) on the run's own topics. Per round, a
tenant of its own is set to 100 tokens a minute and spends 150; once the view sees it over,
``waiters`` calls ``admit(tenant, WAIT)`` are held; its limit is then raised (the record
``ares budgets set`` writes). Ours: the raised limit written -> each held call let through
(the keeper folds the limit, publishes the state, the view wakes its waiters). Ceiling: the
same limits record produced -> read by a raw aiokafka consumer of the topic. A round whose
minute window ended meanwhile is run again (its waiters may have gone with the window).

tests/integration/budgets/test_keeper.py checks that the waiter goes with the raised limit
(the same window, the same spend); this measures how soon.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from ares.budgets.keeper import BudgetKeeper
from ares.budgets.model import BudgetLimits, minute_start
from ares.budgets.view import KafkaBudgetView
from ares.config import Settings
from ares.llm.telemetry import WAIT, UsageRecord
from ares.topics import BUDGET_LIMITS, USAGE, TopicPlan
from bench.harness import latency_summary, start_producer

LOW, SPENT, RAISED = 100, 150, 1_000_000  # tokens a minute; spent; the raised limit
WAIT_S = 60.0  # a hang guard for each step


async def release(settings: Settings, plan: TopicPlan, *, rounds: int,
                  waiters: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ours and the ceiling, as latency summaries (ms) of every held call and record."""
    keeper = BudgetKeeper(settings, plan)
    view = KafkaBudgetView(settings, plan)
    producer = await start_producer(settings)
    raw = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                           enable_auto_commit=False)
    await keeper.start()
    await view.start()
    await raw.start()
    released: list[float] = []
    trips: list[float] = []
    try:
        await _until(lambda: keeper.ready, "the keeper ready")
        done = 0
        while done < rounds:
            tenant = f"release-{uuid.uuid4().hex[:8]}"
            late = await _held_round(producer, plan, view, tenant, waiters)
            if late is None:
                continue  # the minute window ended under the round: run it again
            released.extend(late)
            trips.append(await _raw_trip(producer, raw, plan, tenant))
            done += 1
    finally:
        await raw.stop()
        await producer.stop()
        await view.stop()
        await keeper.stop()
    return ({**latency_summary(released), "waiters": waiters, "rounds": rounds},
            latency_summary(trips))


async def _held_round(producer: AIOKafkaProducer, plan: TopicPlan, view: KafkaBudgetView,
                      tenant: str, waiters: int) -> list[float] | None:
    """Seconds from the raised limit's write to each held call let through; None when the
    minute window ended during the round."""
    window = minute_start(time.time())
    await _set_limit(producer, plan, tenant, LOW)
    usage = UsageRecord(tenant=tenant, agent_id="bench", kind="bench", task_id="t",
                        name="call", provider="offline", model="offline-1",
                        prompt_tokens=SPENT // 2, completion_tokens=SPENT - SPENT // 2,
                        cost_usd=0.0, at=time.time(), usage_id=uuid.uuid4().hex)
    await producer.send_and_wait(plan.name(USAGE), json.dumps(usage.to_json()).encode(),
                                 key=tenant.encode())
    await _until(lambda: (s := view.state(tenant)) is not None and s.over, f"{tenant} over")

    async def held() -> float:
        await view.admit(tenant, WAIT)
        return time.perf_counter()

    calls = [asyncio.create_task(held()) for _ in range(waiters)]
    await asyncio.sleep(0.1)  # every call parked on the view
    if any(c.done() for c in calls):
        raise RuntimeError(f"a call of {tenant} went through while it was over its budget")
    raised_at = time.perf_counter()
    await _set_limit(producer, plan, tenant, RAISED)
    let_through = await asyncio.gather(*calls)
    if minute_start(time.time()) != window:
        return None
    return [at - raised_at for at in let_through]


async def _raw_trip(producer: AIOKafkaProducer, raw: AIOKafkaConsumer, plan: TopicPlan,
                    tenant: str) -> float:
    """The tenant's limits record again, produced and read back by a raw consumer."""
    topic = plan.name(BUDGET_LIMITS)
    tps = [TopicPartition(topic, p) for p in sorted(await producer.partitions_for(topic))]
    raw.assign(tps)
    await raw.seek_to_end(*tps)
    for tp in tps:
        await raw.position(tp)  # resolve the end before the record goes out
    sent_at = time.perf_counter()
    await producer.send_and_wait(topic, BudgetLimits(tokens_per_minute=RAISED).encode(),
                                 key=tenant.encode())
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        batch = await raw.getmany(*tps, timeout_ms=100)
        if any(r.key == tenant.encode() for records in batch.values() for r in records):
            return time.perf_counter() - sent_at
    raise TimeoutError(f"the raw consumer never read {tenant}'s limits record")


async def _set_limit(producer: AIOKafkaProducer, plan: TopicPlan, tenant: str,
                     tokens_per_minute: int) -> None:
    """What ``ares budgets set TENANT --tokens-per-minute N`` writes."""
    await producer.send_and_wait(plan.name(BUDGET_LIMITS),
                                 BudgetLimits(tokens_per_minute=tokens_per_minute).encode(),
                                 key=tenant.encode())


async def _until(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} after {WAIT_S:g} s")
        await asyncio.sleep(0.005)
