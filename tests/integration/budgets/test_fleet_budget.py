"""THE ACCEPTANCE TEST (b): a fleet held to a tenant's tokens-per-minute budget.

Two runtime managers (`ares run runtime-manager`, processes) host 20 agents of one tenant
that call ctx.llm in a loop (the offline provider, 0.8 s a call, one call in flight per
agent); the tenant may spend N tokens a minute and the keeper (`ares run budget-keeper`)
runs beside them. Measured from ares.usage, per minute window of the records' ``at``: the
tokens spent stay within N + 20 x (the most tokens one call spent) — each agent may have
one call in flight when the budget is reached. The fleet runs until the records show a whole
minute window spent (a record stamped in the window after it), and the budget was reached
in some window: the bound held under pressure. How many calls the fleet makes is no
concern of this test.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from pathlib import Path

from ares.budgets.model import MINUTE_S, minute_start
from ares.client import Client
from ares.config import Settings
from ares.llm.telemetry import UsageRecord
from ares.topics import USAGE, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env, service
from tests.support.workers import wait_group, workers

PARTITIONS = 4
AGENTS = 20
TENANT = "budget-fleet"
TOKENS_PER_MINUTE = 3000
WAIT_S = 300.0  # a hang guard: a whole minute window takes at most two minutes to pass
KIND_MODULE = "tests.integration.budgets.agents:REGISTRY"


async def spent_by(settings: Settings, plan: TopicPlan) -> list[UsageRecord]:
    """The tenant's usage records so far (read_uncommitted: what was paid is paid)."""
    records = await drain_records(settings.kafka_bootstrap, plan.name(USAGE),
                                  partitions=plan.topic(USAGE).partitions,
                                  isolation_level="read_uncommitted")
    usages = [UsageRecord.from_json(json.loads(r.value)) for r in records]
    return [u for u in usages if u.tenant == TENANT]


async def test_a_fleet_stays_within_its_tokens_per_minute(kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"budf-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        env = ares_env(settings, PARTITIONS, ARES_LLM_PROVIDER="offline")
        done = ares("budgets", "set", TENANT, "--tokens-per-minute", str(TOKENS_PER_MINUTE),
                    env=env)
        assert done.returncode == 0, done.stderr
        with (service("budget-keeper", env, tmp_path / "logs") as keeper,
              workers(settings, PARTITIONS, tmp_path / "logs", ["budget-rm-1", "budget-rm-2"],
                      session_timeout_ms=10_000, extra_args=["--agents", KIND_MODULE],
                      ARES_LLM_PROVIDER="offline") as fleet):
            await wait_group(settings, plan, members=2)
            agents = [f"spender-{i:02d}" for i in range(AGENTS)]
            async with Client(settings, plan) as client:
                for agent in agents:
                    await client.start_agent(agent, "test.spender", {"tenant": TENANT})
                started = time.time()
                for agent in agents:
                    await client.assign_task(agent, "spend", {
                        "calls": 10_000, "latency_ms": 800, "max_tokens": 40})
            # The first minute window wholly after the start is spent once a record is
            # stamped in the window after it.
            whole = minute_start(started) + MINUTE_S
            deadline = time.monotonic() + WAIT_S
            while not any(u.at >= whole + MINUTE_S for u in await spent_by(settings, plan)):
                assert time.monotonic() < deadline, "no usage after a whole minute window"
                assert keeper.poll() is None, "the keeper died"
                await asyncio.sleep(2)
            assert keeper.poll() is None, "the keeper died"
            for worker in fleet.values():
                assert worker.proc.poll() is None, worker.log_text()[-3000:]
        ours = [u for u in await spent_by(settings, plan) if u.at >= started]
    assert {u.agent_id for u in ours} == set(agents)
    largest = max(u.tokens for u in ours)
    bound = TOKENS_PER_MINUTE + AGENTS * largest
    spent: dict[int, int] = defaultdict(int)
    for u in ours:
        spent[minute_start(u.at)] += u.tokens
    report = {time.strftime("%H:%M", time.gmtime(m)): t for m, t in sorted(spent.items())}
    print(f"tokens per minute window: {report}; budget {TOKENS_PER_MINUTE}, "
          f"largest call {largest}, bound {bound}")
    assert all(tokens <= bound for tokens in spent.values()), (report, bound)
    # Not vacuous: unthrottled, the fleet would spend ~25 calls/s; the budget was reached.
    assert max(spent.values()) >= TOKENS_PER_MINUTE, report
