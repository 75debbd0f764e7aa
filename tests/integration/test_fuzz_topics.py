"""Hostile records on EVERY topic a service consumes, with every service running.

The five services run in-process on the real broker (runtime manager, health checker,
compactor, replay reader with PostgreSQL, budget keeper). Well over 10,000 hostile records
are spread over the ten consumed topics: random bytes, empty values, wrong magic, unknown
fingerprints, truncated Avro or JSON, valid Avro of the wrong schema, valid records with
invalid content (an empty worker id, a snapshot state that is not JSON, a summary under a
key that is not a range, usage with negative tokens, limits with unknown fields, JSON
nested deeper than any parser goes), oversized blobs, tombstones and null keys where the
topic allows them. Then:

* 0 crashes: every service is still running, and after the fuzz the runtime manager still
  runs a task, the health checker is ready, the keeper folds a valid usage record, the
  projector projects the new events, the compactor completes passes;
* every hostile record is in ``ares.dlq`` exactly once, matched by its source topic,
  partition and offset, with its original key and bytes and a reason;
* restarting every consumer (and projecting into a fresh schema, which re-reads the whole
  log) meets the records again and dead-letters none of them a second time.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from ares.agents.host_api import AgentServices
from ares.budgets.keeper import BudgetKeeper
from ares.client import Client
from ares.commands.model import Reply, ReplyStatus, append_command
from ares.compactor.config import CompactionConfig
from ares.compactor.service import CompactorService
from ares.config import Settings
from ares.events.kafka.dlq import DeadLetter, DeadLetters
from ares.events.model import NewEvent
from ares.events.wire.codec import encode
from ares.events.wire.schemas import ALERT, HEARTBEAT, SNAPSHOT, registry
from ares.health_checker.service import HealthChecker, wait_ready
from ares.llm.telemetry import UsageRecord
from ares.replay_reader.service import ReplayReaderService
from ares.runtime_manager.service import RuntimeManager
from ares.service import Service
from ares.tasks import wait_for
from ares.topics import (
    ALERTS,
    BUDGET_LIMITS,
    BUDGETS,
    COMMANDS,
    DLQ,
    EVENTS,
    HEARTBEATS,
    SCHEDULES,
    SNAPSHOTS,
    SUMMARIES,
    USAGE,
    TopicPlan,
)
from tests.support.kafka import applied_topics, drain_records
from tests.support.runtime import read_stream
from tests.support.workers import TEST_AGENTS

PARTITIONS = 2
MAX_RECORD = 16 * 1024
PER_TOPIC = int(os.environ.get("ARES_FUZZ_TOPIC_RECORDS", "1050"))
CONSUMED = (COMMANDS, EVENTS, ALERTS, HEARTBEATS, SNAPSHOTS, SCHEDULES, SUMMARIES, USAGE,
            BUDGET_LIMITS, BUDGETS)
# Topics whose cleanup policy is delete: a record without a key or value may be produced.
DELETE_POLICY = {COMMANDS, EVENTS, ALERTS, HEARTBEATS, USAGE}
JSON_TOPICS = {USAGE, BUDGET_LIMITS, BUDGETS}
WAIT_S = 150.0


@dataclass(frozen=True, slots=True)
class Hostile:
    topic: str  # logical
    label: str
    key: bytes | None
    value: bytes | None


# -- what is sent ---------------------------------------------------------------------------


def _heartbeat(worker: str = "fz-worker", interval_ms: int = 1000) -> bytes:
    return encode(HEARTBEAT, {"worker_id": worker, "timestamp": datetime.now(UTC),
                              "interval_ms": interval_ms, "agents": []})


def _alert(n: int) -> bytes:
    return encode(ALERT, {"id": f"fz-{n}", "stream_id": f"fz-{n}", "kind": "fuzz",
                          "severity": "warning", "message": "m", "source": "fuzzer",
                          "timestamp": datetime.now(UTC), "details": {}})


def _snapshot(state: bytes, encoding: str) -> bytes:
    return encode(SNAPSHOT, {"stream_id": "fz-s", "version": 1, "hash": "h", "events_offset": 0,
                             "agent_kind": "test.counter", "incarnation": 0,
                             "taken_at": datetime.now(UTC), "state": state,
                             "state_encoding": encoding})


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _usage_json(**fields: Any) -> bytes:
    record = {"tenant": "fz", "agent_id": "a", "kind": "k", "task_id": "t", "name": "n",
              "provider": "p", "model": "m", "prompt_tokens": 1, "completion_tokens": 1,
              "cost_usd": 0.001, "outcome": "ok", "at": time.time(), "usage_id": "u",
              **fields}
    return json.dumps({k: v for k, v in record.items() if v is not ...}).encode()


def _proper(topic: str, rng: random.Random, n: int) -> bytes:
    """A well-formed record of some kind, to be damaged (truncated, re-stamped)."""
    if topic in JSON_TOPICS:
        return _usage_json(usage_id=f"u{n}")
    if topic == COMMANDS:
        return append_command(f"fz-{n}", [NewEvent("fuzz.noted", "fuzzer", {"n": n})],
                              -1).encode()
    return rng.choice([_heartbeat(), _alert(n), _snapshot(b"{}", "json")])


def _wrong_schema(topic: str, n: int) -> bytes:
    """Valid Avro of a schema the topic does not carry."""
    return {EVENTS: _alert(n), ALERTS: _heartbeat(), HEARTBEATS: _alert(n),
            SNAPSHOTS: _heartbeat(), SCHEDULES: _alert(n), SUMMARIES: _heartbeat(),
            COMMANDS: Reply(str(uuid.uuid4()), ReplyStatus.OK, "fz", n).encode()}[topic]


def _invalid_content(topic: str, rng: random.Random, n: int) -> tuple[bytes | None, bytes]:
    """(key, value): decodable, but not a record the topic's reader may use."""
    key = f"fz-{n}".encode()
    if topic == HEARTBEATS:
        return key, rng.choice([_heartbeat(worker=""), _heartbeat(interval_ms=-5)])
    if topic == SNAPSHOTS:
        return key, rng.choice([_snapshot(b"{}", "xml"), _snapshot(b"\xff not json", "json")])
    if topic == SUMMARIES:  # not a summary, or under a key that is no range
        return rng.choice([(f"fz-{n}:1-5".encode(), _alert(n)),
                           (f"fz-{n}".encode(), _alert(n))])
    if topic == USAGE:
        return key, rng.choice([_usage_json(prompt_tokens=-1), _usage_json(cost_usd=-1.0),
                                _usage_json(tenant=...), _usage_json(at=1e300),
                                b"[]", b"null", b"1", _deep(rng.randint(3000, 20000))])
    if topic == BUDGET_LIMITS:
        return f"t{n}".encode(), rng.choice([
            b'{"bogus": 1}', b'{"tokens_per_minute": -5}', b'{"usd_per_day": "x"}', b"[]",
            _deep(rng.randint(3000, 20000))])
    if topic == BUDGETS:
        return f"t{n}".encode(), rng.choice([
            b'{"tenant": "x"}', b"[]", b'{"tenant": 1, "limits": {}}',
            _deep(rng.randint(3000, 20000))])
    return key, _wrong_schema(topic, n)


def _random_bytes(rng: random.Random, low: int, high: int) -> bytes:
    value = rng.randbytes(rng.randint(low, high))
    return value if not value.startswith(b"\xc3") else b"\x00" + value


def hostile_records(per_topic: int, seed: int = 31) -> list[Hostile]:
    rng = random.Random(seed)
    known = set(registry().by_fingerprint)
    found: list[Hostile] = []
    n = 0
    for topic in CONSUMED:
        labels = ["random_bytes", "empty", "wrong_magic", "unknown_fingerprint", "truncated",
                  "invalid_content", "oversized"]
        if topic in DELETE_POLICY:
            labels += ["tombstone", "null_key"]
        if topic not in JSON_TOPICS:
            labels.append("wrong_schema")
        weights = [4 if label != "oversized" else 0.15 for label in labels]
        for _ in range(per_topic):
            n += 1
            label = rng.choices(labels, weights)[0]
            key: bytes | None = (f"t{n}" if topic in {BUDGETS, BUDGET_LIMITS}
                                 else f"fz-{n}").encode()
            if topic == SUMMARIES:
                key = f"fz-{n}:1-{n}".encode()
            value: bytes | None
            if label == "random_bytes":
                value = _random_bytes(rng, 1, 300)
            elif label == "empty":
                value = b""
            elif label == "wrong_magic":
                value = b"\xc3" + bytes([rng.choice([0, 2, 3, 0xff])]) + rng.randbytes(20)
            elif label == "unknown_fingerprint":
                fingerprint = rng.randbytes(8)
                while fingerprint in known:
                    fingerprint = rng.randbytes(8)
                value = b"\xc3\x01" + fingerprint + _proper(topic, rng, n)[10:]
            elif label == "truncated":
                whole = _proper(topic, rng, n)
                value = whole[:rng.randint(1, len(whole) - 1)]
            elif label == "invalid_content":
                key, value = _invalid_content(topic, rng, n)
            elif label == "oversized":
                value = _random_bytes(rng, MAX_RECORD + 1, 4 * MAX_RECORD)
            elif label == "tombstone":
                value = None
            elif label == "null_key":
                key, value = None, _random_bytes(rng, 1, 100)
            else:
                value = _wrong_schema(topic, n)
            found.append(Hostile(topic, label, key, value))
    return found


async def produce(settings: Settings, plan: TopicPlan,
                  records: list[Hostile]) -> list[tuple[str, int, int]]:
    """Send every record (spread over the partitions); where each landed."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=20,
                                max_request_size=1_048_576)
    await producer.start()
    try:
        placed: list[tuple[str, int, int]] = []
        for start in range(0, len(records), 1000):
            futures = [await producer.send(plan.name(r.topic), r.value, key=r.key,
                                           partition=i % PARTITIONS)
                       for i, r in enumerate(records[start:start + 1000], start)]
            placed += [(m.topic, m.partition, m.offset) for m in await asyncio.gather(*futures)]
        return placed
    finally:
        await producer.stop()


# -- the services ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fz_settings(kafka_bootstrap: str, postgres_dsn: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, postgres_dsn=postgres_dsn,
                    topic_prefix=f"fzt-{uuid.uuid4().hex[:8]}.", max_record_bytes=MAX_RECORD,
                    request_timeout_s=30.0)


@pytest.fixture(scope="module")
async def plan(fz_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(fz_settings, partitions=PARTITIONS) as plan:
        yield plan


async def until(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g}s"
        await asyncio.sleep(0.1)


class Fleet:
    """The five services, in-process; ``restart`` replaces one with a fresh instance."""

    def __init__(self, settings: Settings, plan: TopicPlan, schema: str) -> None:
        self.settings = settings
        self.plan = plan
        self.schema = schema
        self.runtime: RuntimeManager | None = None
        self.checker: HealthChecker | None = None
        self.compactor: CompactorService | None = None
        self.reader: ReplayReaderService | None = None
        self.keeper: BudgetKeeper | None = None

    def services(self) -> list[Service]:
        return [s for s in (self.runtime, self.checker, self.compactor, self.reader,
                            self.keeper) if s is not None]

    async def start_runtime(self) -> RuntimeManager:
        self.runtime = RuntimeManager(self.settings, self.plan, agents=[TEST_AGENTS],
                                      services=AgentServices(), session_timeout_ms=6000)
        await self.runtime.start()
        await wait_for(self.runtime.owner.ready.wait(), 60)
        await until("the runtime's budget view loaded",
                    lambda: self.runtime is not None and self.runtime.budget_view is not None
                    and self.runtime.budget_view.loaded)
        return self.runtime

    async def start_checker(self) -> HealthChecker:
        self.checker = HealthChecker(self.settings, self.plan, registry=CollectorRegistry())
        await self.checker.start()
        await wait_ready(self.checker)  # every assigned partition rebuilt from the lookback
        return self.checker

    async def start_compactor(self) -> CompactorService:
        self.compactor = CompactorService(self.settings, self.plan,
                                          CompactionConfig(interval_s=0.5))
        await self.compactor.start()
        compactor = self.compactor
        await until("a compaction pass", lambda: compactor.passes >= 1)
        return compactor

    async def start_reader(self, schema: str) -> ReplayReaderService:
        self.reader = ReplayReaderService(self.settings, http_port=0, schema=schema,
                                          host="127.0.0.1")
        await self.reader.start()
        assert self.reader.projector is not None
        await wait_for(self.reader.projector.caught_up.wait(), 60)
        return self.reader

    async def start_keeper(self) -> BudgetKeeper:
        self.keeper = BudgetKeeper(self.settings, self.plan)
        await self.keeper.start()
        keeper = self.keeper
        await until("the keeper live", lambda: keeper.ready)
        return keeper

    async def start(self) -> None:
        await self.start_runtime()
        await self.start_checker()
        await self.start_compactor()
        await self.start_reader(self.schema)
        await self.start_keeper()

    def alive(self) -> None:
        for service in self.services():
            assert service.running, f"{service.name} ended: {service.error!r}"

    async def stop(self) -> None:
        for service in reversed(self.services()):
            await service.stop()


def letters_of(service: Service) -> DeadLetters:
    found = getattr(service, "letters", None)
    if found is None and isinstance(service, CompactorService):
        found = service.compactor.letters
    if found is None and isinstance(service, ReplayReaderService):
        found = service._letters
    assert isinstance(found, DeadLetters), service.name
    return found


async def dead_letters(settings: Settings, plan: TopicPlan) -> list[DeadLetter]:
    records = await drain_records(settings.kafka_bootstrap, plan.name(DLQ),
                                  partitions=plan.topic(DLQ).partitions)
    return [DeadLetter.from_record(r.key, r.value, r.headers) for r in records]


async def all_dead_lettered(settings: Settings, plan: TopicPlan,
                            wanted: set[tuple[str, int, int]],
                            alive: Callable[[], None]) -> list[DeadLetter]:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = await dead_letters(settings, plan)
        missing = wanted - {(x.source_topic, x.source_partition, x.source_offset)
                            for x in found}
        if not missing:
            return found
        alive()
        if time.monotonic() > deadline:
            by_topic = Counter(topic for topic, _, _ in missing)
            pytest.fail(f"{len(missing)} hostile record(s) never reached the DLQ: "
                        f"{dict(by_topic)}")
        await asyncio.sleep(1.0)


async def real_work(settings: Settings, plan: TopicPlan, agent: str, task: str,
                    tasks: int) -> None:
    async with Client(settings, plan, issuer="fuzz-topics") as client:
        await client.assign_task(agent, task, None)

    async def completed() -> bool:  # read through the store: it skips what is not an event
        events = await read_stream(settings, plan, agent)
        return sum(1 for e in events if e.type == "task.completed") >= tasks

    await _eventually(f"{agent}: {tasks} task(s) completed", completed)


async def send_usage(settings: Settings, plan: TopicPlan, tenant: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        record = UsageRecord(tenant=tenant, agent_id="a", kind="k", task_id="t", name="n",
                             provider="offline", model="m", prompt_tokens=3,
                             completion_tokens=4, cost_usd=0.01, outcome="ok",
                             at=time.time(), usage_id=str(uuid.uuid4()))
        await producer.send_and_wait(plan.name(USAGE), json.dumps(record.to_json()).encode(),
                                     key=tenant.encode())
    finally:
        await producer.stop()


async def _eventually(what: str, check: Callable[[], Awaitable[bool]],
                      timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g}s"
        await asyncio.sleep(0.2)


# -- the test ---------------------------------------------------------------------------------


@pytest.mark.timeout(600)
async def test_hostile_records_on_every_consumed_topic_are_dead_lettered_once(
        fz_settings: Settings, plan: TopicPlan) -> None:
    settings = fz_settings
    schema = f"fzt_{uuid.uuid4().hex[:8]}"
    fresh_schema = f"{schema}_again"
    fleet = Fleet(settings, plan, schema)
    agent = "fz-agent"
    try:
        await fleet.start()
        async with Client(settings, plan, issuer="fuzz-topics") as client:
            await client.start_agent(agent, "test.counter")
        await real_work(settings, plan, agent, "before", 1)

        records = hostile_records(PER_TOPIC)
        per_topic = Counter(r.topic for r in records)
        labels = Counter(r.label for r in records)
        print(f"{len(records)} hostile records: {dict(sorted(per_topic.items()))}; "
              f"{dict(sorted(labels.items()))}")
        assert len(records) >= 10_000
        assert set(per_topic) == set(CONSUMED)
        placed = await produce(settings, plan, records)
        hostile = dict(zip(placed, records, strict=True))

        # Snapshots and schedules are read at a takeover: a second runtime manager.
        assert fleet.runtime is not None
        first_runtime = fleet.runtime
        fleet.alive()
        await first_runtime.stop()
        await fleet.start_runtime()

        found = await all_dead_lettered(settings, plan, set(hostile), fleet.alive)
        _exactly_once(found, hostile)
        fleet.alive()
        reasons = Counter((x.source_topic.removeprefix(settings.topic_prefix), x.reason)
                          for x in found if (x.source_topic, x.source_partition,
                                             x.source_offset) in hostile)
        print("dead letters by topic and reason:",
              json.dumps({f"{t} {r}": c for (t, r), c in sorted(reasons.items())}))

        # The services still do real work.
        await real_work(settings, plan, agent, "after-fuzz", 2)
        fleet.alive()

        # Every consumer restarted (the projector into a fresh schema: the whole log again)
        # meets the records again and dead-letters none of them twice, and works.
        before = len(found)
        await restarted_and_working(fleet, fresh_schema, agent)
        again = await dead_letters(settings, plan)
        assert len(again) == before, "the restarts dead-lettered records again"
        _exactly_once(again, hostile)
    finally:
        await fleet.stop()
        conn = await asyncpg.connect(settings.postgres_dsn)
        for name in (schema, fresh_schema):
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await conn.close()


async def restarted_and_working(fleet: Fleet, schema: str, agent: str) -> None:
    """Every service stopped and started again (the projector into ``schema``): each met
    its topics' hostile records again, dead-lettered none, and does real work."""
    settings, plan = fleet.settings, fleet.plan
    for service in list(fleet.services()):
        await service.stop()
    runtime = await fleet.start_runtime()  # re-read snapshots, schedules, budgets
    checker = await fleet.start_checker()
    compactor = await fleet.start_compactor()
    reader = await fleet.start_reader(schema)
    keeper = await fleet.start_keeper()
    met_again = {s.name: letters_of(s).repeated
                 for s in (runtime, checker, compactor, reader, keeper)}
    print(f"records met again after the restarts, not dead-lettered twice: {met_again}")
    for service in fleet.services():
        assert letters_of(service).sent == 0, f"{service.name} dead-lettered again"
    assert all(n > 0 for n in met_again.values()), met_again

    await real_work(settings, plan, agent, "after-restart", 3)
    await send_usage(settings, plan, "fz-tenant")
    await until("the keeper folded a valid usage record", lambda: keeper.folded >= 1)
    projector = reader.projector
    assert projector is not None
    projected = projector.projected
    await real_work(settings, plan, agent, "projected", 4)
    await until("the projector projected the new events",
                lambda: projector.projected > projected)
    passes = compactor.passes
    await until("another compaction pass", lambda: compactor.passes > passes)
    assert checker.ready
    fleet.alive()


def _exactly_once(found: list[DeadLetter], hostile: dict[tuple[str, int, int], Hostile]) -> None:
    counts = Counter((x.source_topic, x.source_partition, x.source_offset) for x in found)
    twice = [where for where, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} record(s) dead-lettered more than once: {twice[:10]}"
    wrong = []
    for letter in found:
        record = hostile.get((letter.source_topic, letter.source_partition,
                              letter.source_offset))
        if record is None:
            wrong.append(f"not a hostile record: {letter.source_topic}/"
                         f"{letter.source_partition}@{letter.source_offset} {letter.reason}: "
                         f"{letter.detail[:200]}")
            continue
        if (letter.value or b"") != (record.value or b"") or letter.key != record.key \
                or not letter.reason or letter.reason == "unknown":
            wrong.append(f"{record.topic} {record.label}: reason {letter.reason!r}, bytes "
                         f"kept: {letter.value == (record.value or b'')}, key kept: "
                         f"{letter.key == record.key}")
    assert not wrong, f"{len(wrong)} wrong dead letter(s):\n" + "\n".join(wrong[:20])


async def test_instances_of_one_service_dead_letter_a_record_once(
        fz_settings: Settings, plan: TopicPlan) -> None:
    """Three keepers meet the same unusable records at once, then three restarted ones meet
    them again (plus new ones): each record is on ares.dlq once. What makes it so is the
    fence of the shared transactional id and the catch-up after it, not luck in timing."""
    topic = plan.name(BUDGET_LIMITS)
    base = 10_000_000  # offsets no real record of this test has

    @dataclass(frozen=True)
    class Bad:
        topic: str
        partition: int
        offset: int
        key: bytes | None
        value: bytes | None

    def bad(n: int) -> Bad:
        return Bad(topic, n % PARTITIONS, base + n, f"t{n}".encode(), f"bad {n}".encode())

    sent = 0
    for records in (range(200), range(250)):
        keepers = [DeadLetters(fz_settings, plan.name, "budget-keeper") for _ in range(3)]
        try:
            for keeper in keepers:
                for n in records:
                    keeper.reject(bad(n), "invalid_limits", f"record {n}")

            async def flushed(keeper: DeadLetters) -> None:
                while not await keeper.flush():
                    pass  # a broker hiccup: the letters stay queued, as in a service

            await asyncio.gather(*(flushed(k) for k in keepers))
            sent += sum(k.sent for k in keepers)
            assert all(k.pending == 0 for k in keepers)
        finally:
            for keeper in keepers:
                await keeper.stop()
    found = Counter((x.source_partition, x.source_offset)
                    for x in await dead_letters(fz_settings, plan)
                    if x.source_topic == topic and x.source_offset >= base)
    assert found == Counter({(n % PARTITIONS, base + n): 1 for n in range(250)})
    assert sent == 250
