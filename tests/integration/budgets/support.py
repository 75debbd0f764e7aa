"""Helpers of the budget tests: usage records in, budget states and dead letters out."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from ares.budgets.model import BudgetState
from ares.config import Settings
from ares.llm.telemetry import UsageRecord
from ares.topics import BUDGETS, TopicPlan


def usage(tenant: str, tokens: int, cost_usd: float, at: float | None = None) -> UsageRecord:
    return UsageRecord(tenant=tenant, agent_id=f"agent-{tenant}", kind="test", task_id="t1",
                       name="call", provider="offline", model="offline-1",
                       prompt_tokens=tokens // 2, completion_tokens=tokens - tokens // 2,
                       cost_usd=cost_usd, at=at or time.time(), usage_id=uuid.uuid4().hex)


async def producer(settings: Settings) -> AIOKafkaProducer:
    started = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all",
                               enable_idempotence=True, linger_ms=2)
    await started.start()
    return started


async def send_usage(out: AIOKafkaProducer, topic: str, record: UsageRecord) -> None:
    await out.send(topic, json.dumps(record.to_json()).encode(), key=record.tenant.encode())


@dataclass
class StateFollower:
    """Follows ares.budgets from the beginning: every state, in order, by tenant."""

    settings: Settings
    plan: TopicPlan
    states: dict[str, list[BudgetState]] = field(default_factory=dict)
    _consumer: AIOKafkaConsumer | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        topic = self.plan.name(BUDGETS)
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka_bootstrap,
                                          enable_auto_commit=False, fetch_max_wait_ms=100)
        await self._consumer.start()
        tps = [TopicPartition(topic, p) for p in range(self.plan.topic(BUDGETS).partitions)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._consumer is not None:
            await self._consumer.stop()

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    state = BudgetState.decode(record.value)
                    self.states.setdefault(state.tenant, []).append(state)

    def latest(self, tenant: str) -> BudgetState | None:
        found = self.states.get(tenant)
        return found[-1] if found else None

    async def wait(self, tenant: str, done: Callable[[BudgetState], bool],
                   timeout_s: float = 30.0) -> BudgetState:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.latest(tenant)
            if state is not None and done(state):
                return state
            await asyncio.sleep(0.05)
        raise AssertionError(f"no state of {tenant!r} got there in {timeout_s}s; "
                             f"the latest: {self.latest(tenant)}")
