"""The compactor on the real broker: 50 agents x 2,000 events (the issue's figures).

One fleet for the module, written as a runtime manager leaves it when its worker is
SIGKILLed (no hand-off): events, snapshots 50 events behind each head, partition
checkpoints. ``agent-00`` has no snapshot and its partition no checkpoint. The tests run
in order and each one first brings about what it needs with (idempotent) passes:

1. a pass killed in the middle of a partition's transaction, then a new compactor: every
   stream above the threshold has exactly one summary, none written twice;
2. with trimming on, each partition's log start moves to exactly the safe point computed
   here from the data;
3. `ares compaction status --json` names agent-00 as what holds its partition back;
4. reads of the trimmed ranges return summaries anchored to the chain;
5. a runtime manager started on those topics recovers every agent (snapshot + tail) to the
   same version and state hash as a full replay of the untrimmed history;
6. a snapshot older than the summaries is requested from that owner before a trim;
7. `ares run compactor` runs passes and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from ares.agents.host_api import AgentServices
from ares.client import Client
from ares.compactor import CompactionConfig, Compactor, SummarisedReader, verify_summarised
from ares.compactor.report import PartitionReport
from ares.compactor.summariser import summarise_events
from ares.compactor.trim import Hold
from ares.config import Settings
from ares.events.kafka.reader import new_consumer
from ares.events.kafka.routing import partition_for
from ares.events.kafka.snapshots import Snapshot
from ares.events.model import GENESIS_HASH, NewEvent, StreamHead
from ares.runtime_manager.host import HostConfig
from ares.runtime_manager.service import RuntimeManager
from ares.summaries.record import SYNTHETIC_TYPE, Summary, parse_summary_key
from ares.summaries.store import SummaryWriter
from ares.topics import EVENTS, SNAPSHOTS, SUMMARIES, TopicPlan
from tests.integration.compaction.fleet import Fleet, write_fleet
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env

AGENTS = 50
EVENTS_PER_AGENT = 2000
PARTITIONS = 4
SNAPSHOT_LAG = 50
UNSNAPSHOTTED = "agent-00"
THRESHOLD, KEEP_RECENT = 500, 100
SUMMARISED_THROUGH = EVENTS_PER_AGENT - KEEP_RECENT
TEST_AGENTS = "tests.support.agents:REGISTRY"

CONFIG = CompactionConfig(threshold=THRESHOLD, keep_recent=KEEP_RECENT,
                          snapshot_timeout_s=1.5)
TRIMMING = CONFIG.with_overrides(trimming=True)


class Crash(Exception):
    """The compactor process dies here."""


@pytest.fixture(scope="module")
def c_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, request_timeout_s=20.0,
                    topic_prefix=f"cmp-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def plan(c_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(c_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture(scope="module")
async def fleet(c_settings: Settings, plan: TopicPlan) -> Fleet:
    home = partition_for(UNSNAPSHOTTED, plan.partitions)
    return await write_fleet(c_settings, plan, agents=AGENTS, events=EVENTS_PER_AGENT,
                             snapshot_lag=SNAPSHOT_LAG, without_snapshot={UNSNAPSHOTTED},
                             without_checkpoint={home})


@pytest.fixture(scope="module")
async def crashed(c_settings: Settings, plan: TopicPlan, fleet: Fleet) -> dict[str, Summary]:
    """A first compactor dies in the middle of partition 2's transaction; what it left."""
    doomed = Compactor(c_settings, plan, CONFIG, writer_factory=CrashingWriter)
    await doomed.open()
    try:
        with pytest.raises(Crash):
            await doomed.run_pass()
    finally:
        await doomed.close()
    live, _ = await live_summaries(c_settings, plan)
    return live


@pytest.fixture(scope="module")
async def compactor(c_settings: Settings, plan: TopicPlan,
                    crashed: dict[str, Summary]) -> AsyncIterator[Compactor]:
    """The compactor started after the crash; it keeps its index between passes, as the
    service does (``config`` is switched per test)."""
    compactor = Compactor(c_settings, plan, CONFIG)
    await compactor.open()
    yield compactor
    await compactor.close()


async def run_pass(compactor: Compactor, config: CompactionConfig) -> list[PartitionReport]:
    compactor.config = config
    return await compactor.run_pass()


async def live_summaries(settings: Settings, plan: TopicPlan) -> tuple[dict[str, Summary],
                                                                      Counter[str]]:
    """Live summaries by key, and how many committed records each summary key has."""
    records = await drain_records(settings.kafka_bootstrap, plan.name(SUMMARIES),
                                  partitions=plan.partitions)
    live: dict[str, Summary] = {}
    writes: Counter[str] = Counter()
    for record in records:
        key = record.key.decode()
        if parse_summary_key(key) is None:
            continue
        if record.value is None:
            live.pop(key, None)
            continue
        writes[key] += 1
        live[key] = Summary.decode(record.value)
    return live, writes


async def log_starts(settings: Settings, plan: TopicPlan) -> dict[int, int]:
    consumer = new_consumer(settings)
    await consumer.start()
    try:
        tps = [TopicPartition(plan.name(EVENTS), p) for p in range(plan.partitions)]
        found = await consumer.beginning_offsets(tps)
        return {tp.partition: int(offset) for tp, offset in found.items()}
    finally:
        await consumer.stop()


def expected_trim_point(fleet: Fleet, partition: int) -> int:
    """The safe point, computed from what was written: per stream the first event that is
    not both snapshotted and summarised (the first event for a stream without snapshot),
    the head event when no checkpoint holds the heads; the checkpoint; the end."""
    limits = [fleet.checkpoints.get(partition, fleet.ends[partition]), fleet.ends[partition]]
    for stream_id in fleet.streams_of(partition):
        snapshot = fleet.snapshots.get(stream_id)
        if snapshot is None:
            limits.append(fleet.offsets[(stream_id, 1)])
            continue
        covered = min(SUMMARISED_THROUGH, snapshot.version)
        limits.append(fleet.offsets[(stream_id, covered + 1)])
        if partition not in fleet.checkpoints:
            limits.append(fleet.offsets[(stream_id, len(fleet.events[stream_id]))])
    return min(limits)


class CrashingWriter(SummaryWriter):
    """Dies in the middle of the transaction of ``crash_on``: records sent, no commit,
    no abort (a SIGKILL)."""

    crash_on = 2

    async def write(self, partition: int, puts: Sequence[Summary] = (),
                    deletes: Sequence[str] = (),
                    records: Sequence[tuple[str, bytes]] = ()) -> None:
        if partition != self.crash_on:
            await super().write(partition, puts, deletes, records)
            return
        await self.producer.begin_transaction()
        for summary in puts[: len(puts) // 2 + 1]:
            await self.producer.send(self.topic, summary.encode(), key=summary.key.encode(),
                                     partition=partition)
        await self.producer.flush()
        raise Crash


# -- 1. summaries, and a restart mid-pass -----------------------------------------------


async def test_a_compactor_killed_mid_pass_leaves_no_duplicate_summary(
    c_settings: Settings, plan: TopicPlan, fleet: Fleet, crashed: dict[str, Summary],
    compactor: Compactor
) -> None:
    done_before = {parse_summary_key(k)[0] for k in crashed}  # type: ignore[index]
    assert {fleet.partition_of(s) for s in done_before} == {0, 1}  # before the crash

    reports = await run_pass(compactor, CONFIG)
    assert all(r.written == 0 for r in reports if r.partition in (0, 1))
    live, writes = await live_summaries(c_settings, plan)
    assert max(writes.values()) == 1  # no summary key was ever written twice
    by_stream = {parse_summary_key(k)[0]: s for k, s in live.items()}  # type: ignore[index]
    assert len(live) == len(by_stream) == AGENTS  # one summary per stream, above threshold
    for stream_id, summary in by_stream.items():
        events = fleet.events[stream_id]
        assert (summary.from_version, summary.to_version) == (1, SUMMARISED_THROUGH)
        assert summary.anchor_hash == events[SUMMARISED_THROUGH - 1].hash
        assert summary.prev_hash == GENESIS_HASH
        assert summary.to_offset == fleet.offsets[(stream_id, SUMMARISED_THROUGH)]
        covered = events[:SUMMARISED_THROUGH]
        assert summary == summarise_events(stream_id, covered, [
            fleet.offsets[(stream_id, e.version)] for e in covered])
        # 1,900 events: started, 316 tasks of 6 events, 3 events into the 317th.
        assert summary.text.startswith(
            f"Agent {stream_id} ran 317 task(s) [{stream_id}-task-0, ")
        assert summary.text.endswith("result: in_progress")
    again = await run_pass(compactor, CONFIG)
    assert sum(r.written for r in again) == 0


# -- 2. trimming ------------------------------------------------------------------------


async def test_trimming_moves_each_log_start_to_exactly_the_safe_point(
    c_settings: Settings, plan: TopicPlan, fleet: Fleet, compactor: Compactor
) -> None:
    reports = await run_pass(compactor, TRIMMING)
    starts = await log_starts(c_settings, plan)
    expected = {p: expected_trim_point(fleet, p) for p in range(PARTITIONS)}
    assert starts == expected
    assert sum(expected.values()) > AGENTS * 1000  # most of the log is gone
    home = fleet.partition_of(UNSNAPSHOTTED)
    assert starts[home] == fleet.offsets[(UNSNAPSHOTTED, 1)]  # held back
    for report in reports:
        assert report.plan.safe_point == expected[report.partition]
        if report.partition != home:
            assert report.trimmed is not None
            assert (report.trimmed.from_offset, report.trimmed.to_offset) == (
                0, expected[report.partition])
    # The trims are on record, and a second pass trims nothing more.
    again = await run_pass(compactor, TRIMMING)
    assert all(r.trimmed is None for r in again)
    assert {r.partition for r in again if r.last_trim is not None} == {
        p for p in range(PARTITIONS) if expected[p] > 0}


# -- 3. status --------------------------------------------------------------------------


async def test_status_names_the_stream_without_a_snapshot(
    c_settings: Settings, plan: TopicPlan, fleet: Fleet, compactor: Compactor
) -> None:
    await run_pass(compactor, TRIMMING)
    env = ares_env(c_settings, PARTITIONS)
    result = await asyncio.to_thread(ares, "compaction", "status", "--json", "--threshold",
                                     str(THRESHOLD), "--keep-recent", str(KEEP_RECENT),
                                     env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    held = status["partitions"][fleet.partition_of(UNSNAPSHOTTED)]
    assert held["held_by"] == UNSNAPSHOTTED
    assert held["hold"] == "no_snapshot"
    assert held["trim_point"] == fleet.offsets[(UNSNAPSHOTTED, 1)]
    streams = {s["stream_id"]: s for p in status["partitions"] for s in p["streams"]}
    assert len(streams) == AGENTS
    assert {s["events_since_summary"] for s in streams.values()} == {KEEP_RECENT}
    home = str(fleet.partition_of(UNSNAPSHOTTED))
    human = await asyncio.to_thread(ares, "compaction", "status", "--partition", home,
                                    env=env, timeout=120)
    assert human.returncode == 0, human.stderr
    assert f"held by {UNSNAPSHOTTED} (no_snapshot" in human.stdout


# -- 4. reads of trimmed ranges -----------------------------------------------------------


async def test_reads_of_trimmed_ranges_return_summaries_anchored_to_the_chain(
    c_settings: Settings, plan: TopicPlan, fleet: Fleet, compactor: Compactor
) -> None:
    await run_pass(compactor, TRIMMING)
    home = fleet.partition_of(UNSNAPSHOTTED)
    reader = await SummarisedReader.open(c_settings, plan)
    try:
        for stream_id in [s for s in sorted(fleet.events) if fleet.partition_of(s) != home][:3]:
            events = fleet.events[stream_id]
            items = await reader.read(stream_id)
            first = items[0]
            assert first.type == SYNTHETIC_TYPE
            assert first.payload["anchor_hash"] == events[SUMMARISED_THROUGH - 1].hash
            assert first.payload["event_count"] == SUMMARISED_THROUGH
            assert first.payload["outcome"] == "in_progress"
            assert first.payload["summary_text"].startswith(f"Agent {stream_id} ran")
            assert items[1].version > 1  # the raw events start after the trimmed ones
            assert verify_summarised(items).version >= EVENTS_PER_AGENT
        assert (await reader.read(stream_id, from_version=10, limit=1)) == [first]
        untrimmed = await reader.read(UNSNAPSHOTTED)
        assert untrimmed[0].version == 1
        assert untrimmed[0].type == "agent.started"
    finally:
        await reader.close()


# -- 5. recovery after trimming -----------------------------------------------------------


@pytest.fixture(scope="module")
async def manager(c_settings: Settings, plan: TopicPlan, fleet: Fleet,
                  compactor: Compactor) -> AsyncIterator[RuntimeManager]:
    await run_pass(compactor, TRIMMING)  # what the recovery test is about
    manager = RuntimeManager(c_settings, plan, agents=[TEST_AGENTS], services=AgentServices(),
                             session_timeout_ms=6000,
                             host_config=HostConfig(snapshot_every=1_000_000))
    await manager.start()
    yield manager
    await manager.stop()


async def test_every_agent_recovers_from_a_trimmed_log_to_the_same_state(
    manager: RuntimeManager, fleet: Fleet
) -> None:
    for _ in range(450):  # 90 s
        if len(manager.host.recoveries) >= AGENTS:
            break
        await asyncio.sleep(0.2)
    records = {r.stream_id: r for r in manager.host.recoveries}
    assert len(records) == AGENTS
    for stream_id, record in records.items():
        assert record.resulting_version == EVENTS_PER_AGENT, stream_id
        assert record.state_hash == fleet.expected_state_hash(stream_id), stream_id
        assert record.verified
        expected_snapshot = None if stream_id == UNSNAPSHOTTED else (
            EVENTS_PER_AGENT - SNAPSHOT_LAG)
        assert record.snapshot_version == expected_snapshot
    statuses = Counter(a.lifecycle.status.value for a in manager.host.agents())
    assert statuses == {"running": AGENTS}


# -- 6. snapshot before trim ----------------------------------------------------------------


async def test_an_old_snapshot_is_renewed_by_its_owner_before_a_trim(
    c_settings: Settings, plan: TopicPlan, fleet: Fleet, manager: RuntimeManager,
    compactor: Compactor
) -> None:
    stream_id = "agent-07"
    partition = fleet.partition_of(stream_id)
    async with Client(c_settings, plan, issuer="test") as client:
        for batch in range(7):
            await client.append(stream_id, [NewEvent("heartbeat", "tests", {
                "progress": f"more {batch}-{i}"}) for i in range(100)])
        head = await _version(c_settings, plan, stream_id)
    assert head > EVENTS_PER_AGENT + 700
    reports = await run_pass(compactor, TRIMMING)
    report = next(r for r in reports if r.partition == partition)
    assert report.written >= 1
    assert report.snapshots_requested >= 1
    assert report.snapshots_failed == 0
    status = next(s for s in report.streams if s.stream_id == stream_id)
    assert status.summarised_through == head - KEEP_RECENT
    assert status.snapshot_version is not None
    assert status.snapshot_version >= head - KEEP_RECENT
    assert status.limit.hold is not Hold.SNAPSHOT
    snapshot = await _snapshot(c_settings, plan, stream_id)
    assert snapshot.version >= head - KEEP_RECENT


async def _version(settings: Settings, plan: TopicPlan, stream_id: str) -> int:
    reader = await SummarisedReader.open(settings, plan)
    try:
        items = await reader.read(stream_id)
        return verify_summarised(items, StreamHead()).version
    finally:
        await reader.close()


async def _snapshot(settings: Settings, plan: TopicPlan, stream_id: str) -> Snapshot:
    records = await drain_records(settings.kafka_bootstrap, plan.name(SNAPSHOTS),
                                  partitions=plan.partitions)
    found = [Snapshot.decode(r.value) for r in records
             if r.key == stream_id.encode() and r.value is not None]
    return found[-1]


# -- 7. the service ---------------------------------------------------------------------


def test_ares_run_compactor_runs_passes_until_sigterm(c_settings: Settings, plan: TopicPlan,
                                                      fleet: Fleet, tmp_path: Path) -> None:
    # Last: this second compactor fences the module's one (one compactor per environment).
    env = ares_env(c_settings, PARTITIONS, ARES_HTTP_PORT="0", ARES_COMPACTION_INTERVAL="1s",
                   ARES_COMPACTION_THRESHOLD=str(THRESHOLD),
                   ARES_COMPACTION_KEEP_RECENT=str(KEEP_RECENT))
    log_path = tmp_path / "compactor.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ares", "run", "compactor"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "pass 2:" not in log_path.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.2)
        assert "pass 2:" in log_path.read_text()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
