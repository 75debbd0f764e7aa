"""THE ACCEPTANCE TEST (a): `ares run budget-keeper` SIGKILLed while usage flows, then
restarted: the published totals equal the sum of every usage record produced, none lost,
none counted twice (the re-read of the day, deduplicated by usage_id: every 50th record
is published twice, as a retrying producer would); a record that is not usage, produced
before the kill, is dead-lettered exactly once."""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaProducer

from ares.budgets.model import minute_start, utc_day
from ares.config import Settings
from ares.events.kafka import dlq
from ares.llm.telemetry import UsageRecord
from ares.topics import DLQ, USAGE
from tests.integration.budgets.support import StateFollower, producer, send_usage, usage
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares_env, service

PARTITIONS = 4
TENANTS = ("acme", "beta", "gamma", "delta", "omega")
RATE_PER_S = 400


@dataclass
class Flow:
    """Usage records at ``RATE_PER_S`` until stopped; what was sent."""

    out: AIOKafkaProducer
    topic: str
    sent: list[UsageRecord] = field(default_factory=list)
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        rng = random.Random(7)
        # Costs in 1/256 USD: their sums are exact in binary floating point, so the totals
        # compare with ==, and one record counted twice shows.
        while not self.stop.is_set():
            for _ in range(RATE_PER_S // 20):
                record = usage(rng.choice(TENANTS), rng.randint(1, 400),
                               rng.randint(1, 64) / 256)
                await send_usage(self.out, self.topic, record)
                self.sent.append(record)
                if len(self.sent) % 50 == 0:  # published again (a retry): counted once
                    await send_usage(self.out, self.topic, record)
            self.flowing.set()
            await asyncio.sleep(0.05)

    def sent_between(self, start: float, end: float) -> int:
        return sum(1 for record in self.sent if start < record.at < end)

    def totals(self, now: float) -> tuple[dict[str, float], dict[str, int]]:
        """USD of today and tokens of the current minute, by tenant."""
        day, window = utc_day(now), minute_start(now)
        usd: dict[str, float] = defaultdict(float)
        tokens: dict[str, int] = defaultdict(int)
        for record in self.sent:
            if utc_day(record.at) == day:
                usd[record.tenant] += record.cost_usd
            if minute_start(record.at) == window:
                tokens[record.tenant] += record.tokens
        return usd, tokens


async def test_a_killed_keeper_loses_no_usage_and_counts_none_twice(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    into = time.time() % 86_400
    if into > 86_400 - 90:  # the day's totals must not roll over midway
        await asyncio.sleep(86_400 - into + 1)
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"budk-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        env = ares_env(settings, PARTITIONS, ARES_LOG_LEVEL="info")
        follower = StateFollower(settings, plan)
        await follower.start()
        flow = Flow(await producer(settings), plan.name(USAGE))
        try:
            with service("budget-keeper", env, tmp_path / "logs") as first:
                producing = asyncio.create_task(flow.run())
                await flow.flowing.wait()
                await flow.out.send(plan.name(USAGE), b"{broken", key=b"acme")
                # Alive and working: it has published totals of the flow before the kill.
                for tenant in TENANTS:
                    await follower.wait(tenant, lambda s: s.day_usd > 0, timeout_s=60)
                await asyncio.sleep(1.5)
                assert first.poll() is None, "the keeper died on its own"
                seen_before = sum(len(states) for states in follower.states.values())
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(timeout=30)
                killed_at = time.time()
            await asyncio.sleep(2.0)  # usage flows on while no keeper runs
            restarted_at = time.time()
            with service("budget-keeper", env, tmp_path / "logs") as second:
                # Usage flows on while the new one waits for its partitions (the dead
                # member's session expires) and re-reads the day, and after it caught up.
                await follower.wait(TENANTS[0], lambda s: s.updated_at > killed_at,
                                    timeout_s=60)
                await asyncio.sleep(2.0)
                flow.stop.set()
                await producing
                await flow.out.flush()
                now = time.time()
                usd, tokens = flow.totals(now)
                for tenant in TENANTS:
                    final = await follower.wait(
                        tenant, lambda s, t=tenant: s.updated_at > killed_at
                        and s.day_usd == usd[t] and s.day == utc_day(now), timeout_s=90)
                    if final.minute_start == minute_start(now):
                        assert final.minute_tokens == tokens[tenant]
                assert second.poll() is None
                await asyncio.sleep(1.0)  # settled: later states keep the totals
                for tenant in TENANTS:
                    latest = follower.latest(tenant)
                    assert latest is not None
                    assert (latest.day, latest.day_usd) == (utc_day(now), usd[tenant])
        finally:
            flow.stop.set()
            await flow.out.stop()
            await follower.stop()
        assert seen_before > 0
        # Usage flowed before the kill, while no keeper ran, and after the restart (how
        # much of it is the flow's rate, not a question for this test).
        assert all(flow.sent_between(start, end) for start, end in (
            (0, killed_at), (killed_at, restarted_at), (restarted_at, math.inf)))
        letters = await drain_records(kafka_bootstrap, plan.name(DLQ),
                                      partitions=plan.topic(DLQ).partitions)
    found = [dlq.DeadLetter.from_record(r.key, r.value, r.headers) for r in letters]
    assert [(f.reason, f.value) for f in found] == [("undecodable", b"{broken")]
