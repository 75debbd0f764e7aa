"""The owner refuses a command whose issuer may not act on that agent: nothing runs, the
record is dead-lettered as ``unauthorised_issuer`` and the sender is told why."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ares.client import Client, CommandRejectedError
from ares.config import Settings
from ares.events.kafka.dlq import DeadLetter
from ares.events.model import NewEvent
from ares.runtime_manager.owner import PartitionOwner
from ares.topics import DLQ, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.runtime import read_stream


@pytest.fixture(scope="module")
def issuer_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, request_timeout_s=20.0,
                    topic_prefix=f"iss-{uuid.uuid4().hex[:8]}.",
                    command_issuers="ops=*:*;billing=billing-:events.append")


@pytest.fixture(scope="module")
async def plan(issuer_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(issuer_settings, partitions=2) as plan:
        owner = PartitionOwner(issuer_settings, plan, session_timeout_ms=6000)
        await owner.start()
        yield plan
        await owner.stop()


async def test_an_issuer_acts_only_where_its_rules_allow(issuer_settings: Settings,
                                                         plan: TopicPlan) -> None:
    event = NewEvent("iss.noted", "test", {})
    async with Client(issuer_settings, plan, issuer="billing") as billing:
        assert await billing.append("billing-1", [event]) == 1
        with pytest.raises(CommandRejectedError, match=r"may not send events\.append"):
            await billing.append("payroll-1", [NewEvent("iss.noted", "test", {})])
    async with Client(issuer_settings, plan, issuer="ops") as ops:
        assert await ops.append("payroll-1", [NewEvent("iss.noted", "test", {})]) == 1
    assert len(await read_stream(issuer_settings, plan, "payroll-1")) == 1  # ops' only
    letters = [DeadLetter.from_record(r.key, r.value, r.headers)
               for r in await drain_records(issuer_settings.kafka_bootstrap, plan.name(DLQ),
                                            partitions=plan.topic(DLQ).partitions)]
    assert [(d.key, d.reason) for d in letters] == [(b"payroll-1", "unauthorised_issuer")]
