"""`ares audit verify` against a log tampered with by hand (raw aiokafka records).

Each stream gets one kind of damage; the audit must exit 5 and name the stream, the version
and what is wrong, and an intact log must exit 0.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from aiokafka import AIOKafkaProducer

from ares.config import Settings
from ares.events.chain import seal_encoded
from ares.events.kafka.routing import partition_for
from ares.events.kafka.snapshots import Snapshot
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.wire.codec import encode_event
from ares.topics import EVENTS, SNAPSHOTS, TopicPlan
from tests.integration.replay.conftest import PARTITIONS, env_of, write_streams
from tests.integration.replay.test_replay_cli import projected
from tests.support.kafka import applied_topics
from tests.support.processes import ares

N = 12


def sealed(stream_id: str, n: int = N) -> list[Event]:
    head, events = StreamHead(), []
    for i in range(n):
        event = seal_encoded(stream_id, head, NewEvent("note.added", "tests", {
            "task_id": "t", "name": f"s{i}", "output": i}), i + 1)[0]
        head = StreamHead(event.version, event.hash)
        events.append(event)
    return events


def tampered_streams() -> dict[str, tuple[list[Event], tuple[int, str] | None]]:
    """stream -> (the records to write, the first finding expected)."""
    intact = sealed("intact")
    modified = sealed("modified")
    modified[4] = replace(modified[4], payload={**modified[4].payload, "output": 666})
    dropped = sealed("dropped")
    del dropped[6]
    duplicated = sealed("duplicated")
    duplicated.insert(9, duplicated[3])
    forged = sealed("forged")
    forged[7] = replace(forged[7], payload={**forged[7].payload, "name": "forged"},
                        hash=uuid.uuid4().hex * 2)
    truncated = sealed("truncated")[:10]  # the snapshot below knows version 12
    return {"intact": (intact, None), "modified": (modified, (5, "hash_mismatch")),
            "dropped": (dropped, (7, "gap")), "duplicated": (duplicated, (4, "duplicate")),
            "forged": (forged, (8, "hash_mismatch")),
            "truncated": (truncated, (11, "truncated"))}


@pytest.fixture(scope="module")
async def tampered(rp_settings: Settings) -> AsyncIterator[Settings]:
    settings = rp_settings.with_overrides(topic_prefix=f"tamper-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for stream_id, (events, _) in tampered_streams().items():
                for event in events:
                    await producer.send_and_wait(
                        plan.name(EVENTS), encode_event(event), key=stream_id.encode(),
                        partition=partition_for(stream_id, PARTITIONS))
            full = sealed("truncated")
            snapshot = Snapshot("truncated", N, full[-1].hash, 999, "example.chat", {})
            await producer.send_and_wait(plan.name(SNAPSHOTS), snapshot.encode(),
                                         key=b"truncated",
                                         partition=partition_for("truncated", PARTITIONS))
            await producer.send_and_wait(plan.name(EVENTS), b"\x00not avro",
                                         key=b"garbled",
                                         partition=partition_for("garbled", PARTITIONS))
        finally:
            await producer.stop()
        yield settings


def verify(settings: Settings, schema: str, *args: str) -> tuple[int, dict[str, object]]:
    done = ares("audit", "verify", "--json", *args, env=env_of(settings, schema), timeout=120)
    assert done.returncode in (0, 1, 5), done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("stream", ["modified", "dropped", "duplicated", "forged", "truncated"])
def test_each_kind_of_tampering_exits_5_naming_stream_version_and_kind(
        tampered: Settings, schema: str, stream: str) -> None:
    expected = tampered_streams()[stream][1]
    code, report = verify(tampered, schema, stream)
    assert code == 5
    [found] = report["streams"]  # type: ignore[misc]
    assert found["stream_id"] == stream
    assert found["ok"] is False
    first = found["findings"][0]
    assert (first["version"], first["kind"]) == expected
    assert first["stream_id"] == stream
    human = ares("audit", "verify", stream, env=env_of(tampered, schema))
    assert human.returncode == 5
    assert f"FAIL stream {stream!r} version {expected[0]}: {expected[1]}" in human.stdout


def test_an_intact_stream_exits_0(tampered: Settings, schema: str) -> None:
    code, report = verify(tampered, schema, "intact")
    assert code == 0
    assert report["ok"] is True
    assert report["events_verified"] == N


def test_all_finds_every_damaged_stream_within_a_small_replay_cap(
        tampered: Settings, schema: str) -> None:
    code, report = verify(tampered, schema, "--all", "--max-replay", "3")
    assert code == 5
    by_stream = {s["stream_id"]: s for s in report["streams"]}  # type: ignore[attr-defined]
    for stream, (_, expected) in tampered_streams().items():
        findings = by_stream[stream]["findings"]
        if expected is None:
            assert findings == []
        else:
            assert (findings[0]["version"], findings[0]["kind"]) == expected
    assert by_stream["garbled"]["findings"][0]["kind"] == "undecodable"
    assert report["max_replay"] == 3


def test_a_named_stream_nobody_knows_exits_1(tampered: Settings, schema: str) -> None:
    code, report = verify(tampered, schema, "intact", "ghost")
    assert code == 1
    assert report["unknown_streams"] == ["ghost"]


async def test_truncation_against_the_projected_index(
        rp_settings: Settings, plan: TopicPlan, schema: str) -> None:
    """The index of a log that held 12 versions, against a log that holds 10."""
    stream = f"idx-{uuid.uuid4().hex[:6]}"
    full = sealed(stream)
    await write_streams(rp_settings, plan, {stream: [
        NewEvent(e.type, e.module, e.payload, id=e.id, timestamp=e.timestamp) for e in full]})
    await projected(rp_settings, schema)
    short = rp_settings.with_overrides(topic_prefix=f"short-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(short, partitions=PARTITIONS) as short_plan:
        await write_streams(short, short_plan, {stream: [
            NewEvent(e.type, e.module, e.payload, id=e.id, timestamp=e.timestamp)
            for e in full[:10]]})
        code, report = verify(short, schema, stream)
        assert code == 5
        finding = report["streams"][0]["findings"][0]  # type: ignore[index]
        assert (finding["version"], finding["kind"]) == (11, "truncated")
        assert "index" in finding["detail"]
        code, report = verify(short, schema, "--no-index", stream)
        assert code == 0
