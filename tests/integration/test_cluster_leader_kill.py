"""Acceptance (issue 30, a real Kafka cluster): SIGKILL of the leader of an ``ares.events``
partition during appends. Every acknowledged append is in the log once, at its acknowledged
version, and appends to that partition resume on a new leader.

The test starts a three-node KRaft cluster of its own on free ports in a temporary directory
(never the shared broker), applies the topics of the ``cluster`` environment (replication
factor 3, min ISR 2) under a fresh prefix and runs one real ``ares run runtime-manager``.
Appends go through ``ares.Client`` to streams on one chosen partition and on others, each
retried with the same event id until acknowledged (as the chaos load does). The broker
leading the chosen partition is SIGKILLed while they run; it is restarted at the end. The
resume time (kill -> first acknowledged append on that partition sent after the kill) is
printed, never asserted. Without Java or Maven the fixture fails: nothing here skips.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ares.chaos.invariants import check
from ares.chaos.load import EXPIRED, AckedAppend, Acks
from ares.client import Client, CommandRejectedError
from ares.config import Settings
from ares.devenv import kafka as dev_kafka
from ares.devenv.process import pid_alive, tail
from ares.errors import AresError, InfrastructureError
from ares.events.kafka.routing import partition_for
from ares.events.model import NewEvent
from ares.logs import quiet_aiokafka
from ares.tasks import wait_for
from ares.topics import EVENTS, TopicPlan, apply_topics, load_topics
from tests.support.kafka import admin_client
from tests.support.workers import Worker, fleet_events, wait_group, workers

NODES = 3
PARTITIONS = 6
STREAMS_ON_TARGET = 4
STREAMS_ELSEWHERE = 4
# Acknowledged appends to the target partition before the kill (the fault hits work), and
# per target stream after it (appends there resumed, not a lucky straggler).
ACKED_BEFORE_KILL = 20
ACKED_AFTER_KILL = 3
# One attempt's wait for the owner's reply; a retry carries the same event id.
ATTEMPT_TIMEOUT_S = 5.0
# Liveness bounds, not timing assertions: a hang fails instead of running into the timeout.
PHASE_TIMEOUT_S = 90.0
SESSION_TIMEOUT_MS = 10_000


def _traversable_base() -> Path:
    """As in test_dev_cluster.py: as root, /var/tmp (a home other users may traverse)."""
    return Path("/var/tmp") if os.geteuid() == 0 else Path(tempfile.gettempdir())


def _processes_in(root: Path) -> set[int]:
    """Live processes whose command line names ``root`` (every node's JVM does)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if str(root).encode() in cmdline:
                found.add(int(entry.name))
    return found


def _logs(cluster: dev_kafka.KafkaCluster) -> str:
    return "".join(f"\n--- node {node.node_id}: {node.log_file} ---\n{tail(node.log_file, 30)}"
                   for node in cluster.nodes)


@pytest.fixture(scope="module")
def cluster() -> Iterator[dev_kafka.KafkaCluster]:
    """A three-node cluster of this module's own; stopped (every node, the restarted one
    too) and removed at the end, also when the test fails."""
    try:
        dev_kafka.require_tools()
    except InfrastructureError as exc:
        pytest.fail(str(exc), pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="ares-leader-kill-", dir=_traversable_base()))
    started = dev_kafka.KafkaCluster.on_free_ports(root / "kafka", NODES)
    try:
        try:
            dev_kafka.start_cluster(started, dev_kafka.kafka_version())
        except InfrastructureError as exc:
            pytest.fail(f"the three-node cluster did not start: {exc}", pytrace=False)
        yield started
    finally:
        dev_kafka.stop_cluster(started)
        for pid in _processes_in(root):  # last resort: a node stop_cluster did not know
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Ack:
    append: AckedAppend
    partition: int
    sent_at: float  # monotonic start of the attempt that was acknowledged
    acked_at: float


@dataclass(slots=True)
class Appends:
    """Appends to ``streams`` one at a time per stream, each retried with the same event
    until its owner acknowledges it; what was acknowledged, and when."""

    client: Client
    streams: Sequence[str]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    acks: list[Ack] = field(default_factory=list)
    retries: int = 0

    async def run(self) -> None:
        await asyncio.gather(*(self._stream(s) for s in self.streams))

    async def _stream(self, stream_id: str) -> None:
        partition = partition_for(stream_id, PARTITIONS)
        n = 0
        while not self.stop.is_set():
            n += 1
            event = NewEvent("test.leader_kill", "test", {"n": n})  # one id for every retry
            version, sent_at = await self._until_acked(stream_id, event)
            self.acks.append(Ack(AckedAppend(stream_id, event.id, version), partition,
                                 sent_at, time.monotonic()))

    async def _until_acked(self, stream_id: str, event: NewEvent) -> tuple[int, float]:
        while True:
            sent_at = time.monotonic()
            try:
                version = await self.client.append(stream_id, [event],
                                                   timeout_s=ATTEMPT_TIMEOUT_S)
                return version, sent_at
            except CommandRejectedError as exc:
                if EXPIRED not in str(exc):  # refused outright: a bug, not the fault
                    raise
            except AresError:
                pass  # no answer in time, or the broker said "not now": send it again
            self.retries += 1
            await asyncio.sleep(0.1)

    def on(self, partition: int, *, sent_after: float = float("-inf")) -> list[Ack]:
        return [a for a in self.acks if a.partition == partition and a.sent_at > sent_after]


def _streams(count: int, *, on: int | None = None, off: int | None = None) -> list[str]:
    """``count`` fresh stream ids on partition ``on`` (or on any partition but ``off``)."""
    found: list[str] = []
    while len(found) < count:
        stream_id = f"lk-{uuid.uuid4().hex[:10]}"
        partition = partition_for(stream_id, PARTITIONS)
        if (on is None or partition == on) and (off is None or partition != off):
            found.append(stream_id)
    return found


async def _partition_state(settings: Settings, topic: str, partition: int) -> dict[str, Any]:
    """The partition's leader and ISR, as the cluster's metadata gives them now."""
    with quiet_aiokafka():
        async with admin_client(settings.kafka_bootstrap) as admin:
            (described,) = await admin.describe_topics([topic])
    return next(p for p in described["partitions"] if p["partition"] == partition)


async def _until(what: str, done: Callable[[], Awaitable[bool]],
                 timeout_s: float = PHASE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout_s:g}s")
        await asyncio.sleep(0.2)


@dataclass(frozen=True, slots=True)
class Kill:
    """What the SIGKILL of the target partition's leader did."""

    victim: int  # node id
    acked_before: int  # acknowledged appends to the target partition before the kill
    resumed: list[Ack]  # acknowledged appends to it sent after the kill
    first_ack_s: float  # kill -> the first of them acknowledged
    after: dict[str, Any]  # the partition's leader and ISR once appends resumed


async def _kill_leader(cluster: dev_kafka.KafkaCluster, settings: Settings, topic: str,
                       target: int, on_target: Sequence[str], appends: Appends,
                       running: asyncio.Task[None]) -> Kill:
    """Once appends to ``target`` are acknowledged, SIGKILL the broker leading it; return
    when every stream on it had appends sent after the kill acknowledged."""
    async def enough_before() -> bool:
        assert not running.done(), running.exception()
        return len(appends.on(target)) >= ACKED_BEFORE_KILL

    await _until(f"{ACKED_BEFORE_KILL} acknowledged appends to partition {target}",
                 enough_before)
    # The victim: the broker leading the target partition, alive, right now.
    before = await _partition_state(settings, topic, target)
    victim = int(before["leader"])
    victim_pid = cluster.pids()[victim]
    assert victim_pid is not None, cluster.pids()
    assert pid_alive(victim_pid), cluster.pids()
    assert sorted(before["isr"]) == [1, 2, 3], before
    acked_before = len(appends.on(target))
    killed_at = time.monotonic()
    os.kill(victim_pid, signal.SIGKILL)

    async def resumed() -> bool:
        assert not running.done(), running.exception()
        after = appends.on(target, sent_after=killed_at)
        return all(sum(1 for a in after if a.append.stream_id == s) >= ACKED_AFTER_KILL
                   for s in on_target)

    await _until(f"appends to partition {target} acknowledged again after its leader "
                 f"(node {victim}) was killed", resumed)
    resumed_acks = appends.on(target, sent_after=killed_at)
    return Kill(victim, acked_before, resumed_acks,
                min(a.acked_at for a in resumed_acks) - killed_at,
                await _partition_state(settings, topic, target))


@pytest.mark.timeout(300)
async def test_sigkill_of_an_events_partition_leader_loses_no_acknowledged_append(
        cluster: dev_kafka.KafkaCluster, tmp_path: Path) -> None:
    settings = Settings(kafka_bootstrap=cluster.bootstrap,
                        topic_prefix=f"leader-kill-{uuid.uuid4().hex[:8]}.",
                        request_timeout_s=30.0)
    plan: TopicPlan = load_topics(settings, environment="cluster",
                                  env={"ARES_TOPIC_PARTITIONS": str(PARTITIONS)})
    events_spec = plan.topic(EVENTS)
    assert (events_spec.replication_factor,
            events_spec.configs["min.insync.replicas"]) == (3, "2")
    await apply_topics(plan, settings)
    topic = plan.name(EVENTS)
    target = 0
    on_target = _streams(STREAMS_ON_TARGET, on=target)
    appends_streams = [*on_target, *_streams(STREAMS_ELSEWHERE, off=target)]

    with workers(settings, PARTITIONS, tmp_path / "logs", ["leader-kill-rm"],
                 session_timeout_ms=SESSION_TIMEOUT_MS,
                 ARES_TOPIC_ENVIRONMENT="cluster") as started:
        manager: Worker = started["leader-kill-rm"]
        await wait_group(settings, plan, 1, timeout_s=PHASE_TIMEOUT_S)
        client = Client(settings, plan, issuer="test-leader-kill")
        await client.start()
        appends = Appends(client, appends_streams)
        running = asyncio.create_task(appends.run())
        try:
            kill = await _kill_leader(cluster, settings, topic, target, on_target, appends,
                                      running)
        finally:
            appends.stop.set()  # appends in flight still run until acknowledged
            with contextlib.suppress(Exception):
                await wait_for(running, PHASE_TIMEOUT_S)
            await client.close()
        assert manager.proc.poll() is None, (
            f"the runtime manager exited:\n{manager.log_text()[-3000:]}")

    print(f"\nSIGKILL of node {kill.victim}, leader of {topic}/{target}: appends there "
          f"acknowledged again {kill.first_ack_s:.2f} s after the kill (new leader node "
          f"{kill.after['leader']}); {len(appends.acks)} appends acknowledged, "
          f"{kill.acked_before} to partition {target} before the kill, {len(kill.resumed)} "
          f"sent after it; {appends.retries} retries")
    assert kill.after["leader"] not in (kill.victim, -1), kill.after
    assert kill.victim not in kill.after["isr"], kill.after

    # The node comes back and catches up: the cluster is whole again.
    await asyncio.to_thread(dev_kafka.start_cluster, cluster, dev_kafka.kafka_version())

    async def back_in_sync() -> bool:
        return kill.victim in (await _partition_state(settings, topic, target))["isr"]

    await _until(f"node {kill.victim} back in the ISR of partition {target}", back_in_sync)

    # Every acknowledged append is in the log once, at its acknowledged version; no event
    # id twice; every stream's versions contiguous from 1.
    streams = await fleet_events(settings, plan)
    acks = Acks(appends=[a.append for a in appends.acks])
    findings = check({s: streams.get(s, []) for s in appends_streams}, acks, [], [])
    assert findings.violations == [], "\n".join(findings.violations) + _logs(cluster)
    in_log = Counter(e.id for s in appends_streams for e in streams.get(s, []))
    acked_ids = Counter(a.event_id for a in acks.appends)
    assert max(acked_ids.values()) == 1  # one acknowledgement per event
    assert {i: in_log[i] for i in acked_ids if in_log[i] != 1} == {}
