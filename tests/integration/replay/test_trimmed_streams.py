"""A stream whose head the compactor trimmed: accepted by the audit and the replay when an
anchored summary on ares.summaries accounts for it, `missing_history` when none does."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import RecordsToDelete

from ares.config import Settings
from ares.events.kafka.routing import partition_for
from ares.events.wire.codec import encode_event
from ares.summaries.record import Summary, SummaryFacts
from ares.topics import EVENTS, SUMMARIES
from tests.integration.replay.conftest import PARTITIONS, env_of
from tests.integration.replay.test_audit_tampering import sealed
from tests.support.kafka import admin_client, applied_topics
from tests.support.processes import ares


@pytest.fixture(scope="module")
async def trimmed(rp_settings: Settings) -> AsyncIterator[Settings]:
    """Streams `kept` (versions 1..4 summarised, then trimmed) and `lost` (trimmed, no
    summary), each alone in its partition."""
    settings = rp_settings.with_overrides(topic_prefix=f"trim-{uuid.uuid4().hex[:8]}.")
    names = _one_per_partition()
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
        await producer.start()
        try:
            logs = {name: sealed(name, 10) for name in names.values()}
            for name, events in logs.items():
                for event in events:
                    await producer.send_and_wait(plan.name(EVENTS), encode_event(event),
                                                 key=name.encode(),
                                                 partition=partition_for(name, PARTITIONS))
            events = logs[names["kept"]]
            summary = Summary(names["kept"], 1, 4, 0, 3, events[0].prev_hash, events[3].hash,
                              SummaryFacts(event_count=4), "4 notes")
            await producer.send_and_wait(plan.name(SUMMARIES), summary.encode(),
                                         key=summary.key.encode(),
                                         partition=partition_for(names["kept"], PARTITIONS))
        finally:
            await producer.stop()
        async with admin_client(settings.kafka_bootstrap) as admin:
            await admin.delete_records({
                TopicPartition(plan.name(EVENTS), partition_for(n, PARTITIONS)):
                    RecordsToDelete(before_offset=4) for n in names.values()})
        yield settings


def _one_per_partition() -> dict[str, str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < 2:
        name = f"trimmed-{i}"
        found.setdefault(partition_for(name, PARTITIONS), name)
        i += 1
    kept, lost = found.values()
    return {"kept": kept, "lost": lost}


def test_an_anchored_summary_accounts_for_a_trimmed_head(trimmed: Settings,
                                                        schema: str) -> None:
    names = _one_per_partition()
    env = env_of(trimmed, schema)
    done = ares("audit", "verify", names["kept"], "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)["streams"][0]
    assert (report["first_version"], report["head_version"]) == (5, 10)
    assert report["summarised"]["to_version"] == 4

    replayed = ares("replay", names["kept"], "--summary", "--json", env=env)
    assert replayed.returncode == 0, replayed.stderr
    summary = json.loads(replayed.stdout)
    assert (summary["first_version"], summary["total_steps"]) == (5, 6)
    assert summary["intact"] is True
    assert summary["summarised"]["anchor_hash"]


def test_a_trimmed_head_without_a_summary_is_missing_history(trimmed: Settings,
                                                             schema: str) -> None:
    names = _one_per_partition()
    env = env_of(trimmed, schema)
    done = ares("audit", "verify", names["lost"], "--json", env=env)
    assert done.returncode == 5
    finding = json.loads(done.stdout)["streams"][0]["findings"][0]
    assert (finding["version"], finding["kind"]) == (1, "missing_history")
    replayed = ares("replay", names["lost"], "--to", "1", "--json", env=env)
    assert replayed.returncode == 5
    assert json.loads(replayed.stdout)["integrity"]["kind"] == "gap"
