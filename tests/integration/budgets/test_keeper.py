"""The budget keeper on the real broker: usage in, limits from `ares budgets set`, states
out on ares.budgets; records that are not usage go to ares.dlq and the keeper goes on."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from ares.budgets.keeper import BudgetKeeper
from ares.budgets.model import minute_start
from ares.budgets.view import KafkaBudgetView
from ares.config import Settings
from ares.events.kafka import dlq
from ares.llm.telemetry import FAIL, WAIT, BudgetExceeded
from ares.tasks import wait_for
from ares.topics import DLQ, USAGE, TopicPlan
from tests.integration.budgets.support import StateFollower, producer, send_usage, usage
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env

PARTITIONS = 2


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[TopicPlan]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"bud-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=PARTITIONS) as applied:
        yield applied


def settings_of(plan: TopicPlan, kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=plan.prefix)


async def early_in_a_minute() -> None:
    """The totals of one test stay in one minute window."""
    into = time.time() % 60
    if into > 35:
        await asyncio.sleep(61 - into)


async def started_keeper(settings: Settings, plan: TopicPlan) -> BudgetKeeper:
    keeper = BudgetKeeper(settings, plan)
    await keeper.start()
    deadline = time.monotonic() + 30
    while not keeper.ready:
        assert time.monotonic() < deadline, "the keeper did not become ready"
        await asyncio.sleep(0.05)
    return keeper


async def test_states_show_the_minute_and_day_totals_and_over(plan: TopicPlan,
                                                              kafka_bootstrap: str) -> None:
    settings = settings_of(plan, kafka_bootstrap)
    env = ares_env(settings, PARTITIONS)
    done = ares("budgets", "set", "acme", "--tokens-per-minute", "500", "--usd-per-day", "1",
                env=env)
    assert done.returncode == 0, done.stderr
    assert "acme: 500 tokens/minute, $1 USD/day" in done.stdout
    await early_in_a_minute()
    follower = StateFollower(settings, plan)
    await follower.start()
    keeper = await started_keeper(settings, plan)
    out = await producer(settings)
    try:
        # Limits alone: the tenant is published (its owner caught up) with nothing spent.
        first = await follower.wait("acme", lambda s: s.limits.tokens_per_minute == 500)
        assert (first.minute_tokens, first.day_usd, first.over) == (0, 0.0, False)
        for tokens in (100, 150, 200):
            await send_usage(out, plan.name(USAGE), usage("acme", tokens, 0.125))
        await send_usage(out, plan.name(USAGE), usage("beta", 70, 0.5))  # no limits
        await out.flush()
        state = await follower.wait("acme", lambda s: s.minute_tokens == 450)
        assert (state.day_usd, state.over) == (0.375, False)
        assert state.minute_start == minute_start(time.time())
        beta = await follower.wait("beta", lambda s: s.minute_tokens == 70)
        assert (beta.day_usd, beta.over, beta.limits.unlimited) == (0.5, False, True)

        await send_usage(out, plan.name(USAGE), usage("acme", 60, 0.125))
        await out.flush()
        over = await follower.wait("acme", lambda s: s.over)
        assert over.minute_tokens == 510
        assert "510 tokens spent" in over.reason
        assert "limit 500 tokens/minute" in over.reason
        check_status(env)

        # A raised limit clears "over" at once; the day's USD then trips it.
        done = ares("budgets", "set", "acme", "--tokens-per-minute", "5000", env=env)
        assert done.returncode == 0, done.stderr
        assert "5000 tokens/minute, $1 USD/day" in done.stdout  # the USD limit is kept
        # (the state with the new limit: on a loaded machine the minute window may have
        # ended first, clearing "over" under the old limit)
        cleared = await follower.wait("acme", lambda s: s.limits.tokens_per_minute == 5000)
        assert not cleared.over
        await send_usage(out, plan.name(USAGE), usage("acme", 10, 0.5))
        await out.flush()
        day_over = await follower.wait("acme", lambda s: s.over)
        assert day_over.day_usd == 1.0
        assert "limit $1/day" in day_over.reason

        done = ares("budgets", "set", "acme", "--clear", env=env)
        assert done.returncode == 0, done.stderr
        free = await follower.wait("acme", lambda s: s.limits.unlimited)
        assert not free.over
        assert ares("budgets", "status", "nobody", env=env).returncode == 1
    finally:
        await out.stop()
        await keeper.stop()
        await follower.stop()


def check_status(env: dict[str, str]) -> None:
    """`ares budgets status`, as JSON and as a table, shows acme over its minute budget."""
    status = ares("budgets", "status", "--json", "acme", env=env)
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)
    assert (row["tenant"], row["tokens_per_minute"], row["usd_per_day"]) == ("acme", 500, 1.0)
    assert (row["minute_tokens"], row["day_usd"], row["over"]) == (510, 0.5, True)
    table = ares("budgets", "status", env=env)
    assert table.returncode == 0, table.stderr
    assert "OVER" in table.stdout
    assert "beta" in table.stdout


async def test_a_record_that_is_not_usage_is_dead_lettered_and_the_keeper_goes_on(
        plan: TopicPlan, kafka_bootstrap: str) -> None:
    settings = settings_of(plan, kafka_bootstrap)
    await early_in_a_minute()
    follower = StateFollower(settings, plan)
    await follower.start()
    keeper = await started_keeper(settings, plan)
    out = await producer(settings)
    topic = plan.name(USAGE)
    try:
        await out.send(topic, b"\x00not json", key=b"acme")
        await out.send(topic, json.dumps({"tenant": "acme", "prompt_tokens": -1}).encode(),
                       key=b"acme")
        await send_usage(out, topic, usage("acme", 42, 0.25))
        await out.flush()
        state = await follower.wait("acme", lambda s: s.minute_tokens == 42)
        assert state.day_usd == 0.25
        assert keeper.running
        assert keeper.dead_letters == 2
    finally:
        await keeper.stop()
    # A second keeper re-reads the day: the same records, not dead-lettered again.
    keeper = await started_keeper(settings, plan)
    try:
        await send_usage(out, topic, usage("acme", 8, 0.25))
        await out.flush()
        await follower.wait("acme", lambda s: s.minute_tokens == 50)
        assert keeper.dead_letters == 0
    finally:
        await out.stop()
        await keeper.stop()
        await follower.stop()
    letters = await drain_records(kafka_bootstrap, plan.name(DLQ),
                                  partitions=plan.topic(DLQ).partitions)
    found = [dlq.DeadLetter.from_record(r.key, r.value, r.headers) for r in letters]
    assert sorted(letter.reason for letter in found) == ["invalid_usage", "undecodable"]
    undecodable = next(letter for letter in found if letter.reason == "undecodable")
    assert undecodable.value == b"\x00not json"
    assert undecodable.source_topic == topic
    assert undecodable.source_offset >= 0
    assert "not JSON" in undecodable.detail


async def test_the_runtime_s_view_follows_the_keeper(plan: TopicPlan,
                                                     kafka_bootstrap: str) -> None:
    settings = settings_of(plan, kafka_bootstrap)
    env = ares_env(settings, PARTITIONS)
    assert ares("budgets", "set", "acme", "--tokens-per-minute", "100", env=env).returncode == 0
    await early_in_a_minute()
    keeper = await started_keeper(settings, plan)
    view = KafkaBudgetView(settings, plan)
    await view.start()
    out = await producer(settings)
    try:
        assert await view.admit("acme", FAIL) == 0.0
        await send_usage(out, plan.name(USAGE), usage("acme", 150, 0.01))
        await out.flush()
        deadline = time.monotonic() + 10
        while (over := view.state("acme")) is None or not over.over:
            assert time.monotonic() < deadline, f"the view never saw acme over: {over}"
            await asyncio.sleep(0.01)
        with pytest.raises(BudgetExceeded, match="150 tokens spent"):
            await view.admit("acme", FAIL)
        # A waiter is held while the tenant is over, and goes when a raised limit reaches
        # the view: in the same minute window, with the same spend (not the window's end).
        waiter = asyncio.create_task(view.admit("acme", WAIT))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        assert ares("budgets", "set", "acme", "--tokens-per-minute", "1000",
                    env=env).returncode == 0
        waited = await wait_for(waiter, 60)
        released = view.state("acme")
        assert released is not None
        assert (released.limits.tokens_per_minute, released.minute_start,
                released.minute_tokens, released.over) == (1000, over.minute_start, 150, False)
        assert waited > 0  # it slept (a call let through at once reports 0.0)
        assert view.waits == 1
    finally:
        await out.stop()
        await view.stop()
        await keeper.stop()


async def test_two_keepers_share_the_tenants_and_a_rebalance_loses_nothing(
        plan: TopicPlan, kafka_bootstrap: str) -> None:
    settings = settings_of(plan, kafka_bootstrap)
    await early_in_a_minute()
    tenants = [f"tenant-{i}" for i in range(8)]
    follower = StateFollower(settings, plan)
    await follower.start()
    first = await started_keeper(settings, plan)
    out = await producer(settings)
    second: BudgetKeeper | None = None
    try:
        for tenant in tenants:
            await send_usage(out, plan.name(USAGE), usage(tenant, 10, 0.5))
        await out.flush()
        for tenant in tenants:
            await follower.wait(tenant, lambda s: s.minute_tokens == 10)
        # A second keeper joins: the partitions are shared out again and each re-read.
        second = BudgetKeeper(settings, plan)
        await second.start()
        deadline = time.monotonic() + 30
        while not (second.live and first.live and not (first.live & second.live)
                   and len(first.live | second.live) == PARTITIONS):
            assert time.monotonic() < deadline, (first.live, second.live)
            await asyncio.sleep(0.05)
        for tenant in tenants:
            await send_usage(out, plan.name(USAGE), usage(tenant, 5, 0.25))
        await out.flush()
        for tenant in tenants:
            state = await follower.wait(tenant, lambda s: s.minute_tokens == 15)
            assert state.day_usd == 0.75
        assert first.published > 0
        assert second.published > 0
    finally:
        await out.stop()
        if second is not None:
            await second.stop()
        await first.stop()
        await follower.stop()
