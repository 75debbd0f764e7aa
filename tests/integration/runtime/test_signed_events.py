"""Signed events on the real broker: the forgery the hash chain cannot see.

A runtime manager with a signing key (ARES_SIGNING_KEY_FILE) signs every event it appends.
A forger with plain write access to ``ares.events`` reads the head of a stream and appends a
correctly chained successor with a plain aiokafka producer: every SHA-256 link holds (the
audit without a keyring says intact), but it carries no signature of a key of the keyring
(ARES_KEYRING_FILE). ``ares audit verify`` then exits 5 naming the stream, the version and
the signature, and recovery quarantines the agent with an integrity alert.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.config import Settings
from ares.events import signing
from ares.events.chain import seal_encoded
from ares.events.kafka.routing import partition_for
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.signing import KeyEntry, Keyring, Signer
from ares.events.wire.codec import decode, encode_event
from ares.runtime_manager.service import RuntimeManager
from ares.tasks import wait_for
from ares.topics import ALERTS, EVENTS, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env
from tests.support.runtime import read_stream, types_of, wait_for_events
from tests.support.workers import TEST_AGENTS, has, wait_fleet

PARTITIONS = 2


@pytest.fixture(scope="module")
def se_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"se-{uuid.uuid4().hex[:8]}.",
                    request_timeout_s=20.0)


@pytest.fixture(scope="module")
async def plan(se_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(se_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Signer, Path, Path]]:
    """A writer key and a keyring holding it, configured for this process (the in-process
    runtime manager signs with it and verifies with the keyring); forgotten afterwards."""
    signer = Signer.generate("runtime-manager")
    key_path, keyring_path = tmp_path / "writer.pem", tmp_path / "keyring.json"
    key_path.write_bytes(signing.private_pem(signer.private_key))
    Keyring({signer.key_id: KeyEntry(signer.key_id, signer.public_key, "runtime-manager")},
            since=None).save(keyring_path)  # no legacy: every event must be signed
    monkeypatch.setenv(signing.SIGNING_KEY_ENV, str(key_path))
    monkeypatch.setenv(signing.KEYRING_ENV, str(keyring_path))
    signing.reset()
    yield signer, key_path, keyring_path
    monkeypatch.delenv(signing.SIGNING_KEY_ENV)
    monkeypatch.delenv(signing.KEYRING_ENV)
    signing.reset()


async def started_manager(settings: Settings, plan: TopicPlan) -> RuntimeManager:
    manager = RuntimeManager(settings, plan, agents=[TEST_AGENTS], services=AgentServices(),
                             session_timeout_ms=6000)
    await manager.start()
    await wait_for(manager.owner.ready.wait(), 60)
    return manager


def audit(settings: Settings, agent: str, keyring: Path | None) -> tuple[int, dict[str, object],
                                                                         str]:
    extra = {} if keyring is None else {signing.KEYRING_ENV: str(keyring)}
    env = ares_env(settings, PARTITIONS, **extra)
    env.pop(signing.SIGNING_KEY_ENV, None)  # the auditor holds no private key
    if keyring is None:
        env.pop(signing.KEYRING_ENV, None)
    done = ares("audit", "verify", "--no-index", "--json", agent, env=env, timeout=120)
    assert done.returncode in (0, 5), done.stderr
    human = ares("audit", "verify", "--no-index", agent, env=env, timeout=120)
    assert human.returncode == done.returncode, human.stderr
    return done.returncode, json.loads(done.stdout), human.stdout


async def run_counter(settings: Settings, plan: TopicPlan, agent: str) -> None:
    """A ``test.counter`` agent completes two tasks under a runtime manager that signs."""
    manager = await started_manager(settings, plan)
    try:
        async with Client(settings, plan, issuer="test-signing") as client:
            await client.start_agent(agent, "test.counter")
            for i in (1, 2):
                await client.assign_task(agent, f"t{i}", None)
        await wait_fleet(settings, plan, [agent], has("task.completed", 2), 60, "done")
    finally:
        await manager.stop()


async def forge_successor(settings: Settings, plan: TopicPlan, agent: str) -> Event:
    """The forger: the stream's head read from the log, a correct chain, a plain producer
    (no transaction, no key)."""
    last = (await read_stream(settings, plan, agent))[-1]
    forged, wire = seal_encoded(agent, StreamHead(last.version, last.hash), NewEvent(
        "task.assigned", "runtime-manager", {"task_id": "t-forged", "input_json": "null"}),
        last.version + 1)
    assert forged.prev_hash == last.hash
    assert wire == encode_event(forged)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(plan.name(EVENTS), wire, key=agent.encode(),
                                     partition=partition_for(agent, PARTITIONS),
                                     headers=[("ares.type", b"task.assigned")])
    finally:
        await producer.stop()
    return forged


async def test_a_well_chained_forgery_fails_the_audit_and_quarantines_the_agent(
        se_settings: Settings, plan: TopicPlan, keys: tuple[Signer, Path, Path]) -> None:
    signer, _, keyring = keys
    agent = f"signed-{uuid.uuid4().hex[:6]}"
    await run_counter(se_settings, plan, agent)
    events = await read_stream(se_settings, plan, agent)
    # Every event the writer appended is signed with its key, and the log verifies.
    assert {e.key_id for e in events} == {signer.key_id}
    code, report, human = audit(se_settings, agent, keyring)
    assert code == 0, report
    assert report["signatures"]["signed"] == len(events)  # type: ignore[index]
    assert f"signatures: {len(events)} verified" in human

    forged = await forge_successor(se_settings, plan, agent)

    # The hash chain alone is fooled...
    code, report, _ = audit(se_settings, agent, None)
    assert code == 0, report
    assert "signatures: not checked" in audit(se_settings, agent, None)[2]
    # ...the keyring is not: exit 5, naming the stream, the version and the signature.
    code, report, human = audit(se_settings, agent, keyring)
    assert code == 5
    [stream] = report["streams"]  # type: ignore[misc]
    [finding] = stream["findings"]
    assert (finding["stream_id"], finding["version"], finding["kind"]) == (
        agent, forged.version, "signature")
    assert "unsigned" in finding["detail"]
    assert f"FAIL stream {agent!r} version {forged.version}: signature: " in human

    # Recovery treats it as a broken chain: quarantine and an integrity alert.
    manager = await started_manager(se_settings, plan)
    try:
        events = await wait_for_events(se_settings, plan, agent, has("agent.quarantined"))
        quarantined = events[-1]
        assert quarantined.type == "agent.quarantined", types_of(events)
        assert quarantined.payload["reason"] == "integrity:signature"
        assert quarantined.key_id == signer.key_id  # the owner's own events stay signed
        assert "agent.resurrected" not in types_of([e for e in events
                                                    if e.version > forged.version])
        hosted = manager.host.partitions[partition_for(agent, PARTITIONS)].agents[agent]
        assert not hosted.running
    finally:
        await manager.stop()
    alerts = [decode(r.value)[1] for r in await drain_records(
        se_settings.kafka_bootstrap, plan.name(ALERTS), partitions=plan.topic(ALERTS).partitions)]
    mine = [a for a in alerts if a["stream_id"] == agent]
    assert [a["kind"] for a in mine] == ["integrity_failure"], mine
    assert mine[0]["severity"] == "critical"
    assert "signature" in mine[0]["message"]
