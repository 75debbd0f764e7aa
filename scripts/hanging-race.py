"""Reproduce the Kafka 4.4 restart race (reliability finding 1) and check what ares does.

    PYTHONPATH=services python scripts/hanging-race.py [--cycles 20] [--partitions 6]
                                                       [--brokers 3]

Each cycle: agents append to a KafkaEventStore on a broker of the script's own; the broker
is SIGKILLed mid-load and restarted; a new store takes every partition over. With
``--brokers 3`` the same on a three-node cluster (RF 3, min ISR 2), where the broker killed
is the transaction coordinator of the most writers: there another broker takes the
coordinator's place (its replica of ``__transaction_state`` is in sync) instead of the same
broker reloading its state on restart. Sometimes the
restarted transaction coordinator skips a partition's COMMIT markers ("Couldn't find leader
endpoint for partitions ... likely deleted already") and leaves a hanging transaction. The
script then checks, every cycle, that no partition is left undecided, that every append
acknowledged before the kill is in its stream at its version, and that each stream's hash
chain holds. It prints one line per cycle and exits non-zero on a violation.

On a 2-core machine about one restart in two skips markers and one in six to ten leaves a
hanging transaction (3 in 19 on 1 Dec 2026); each cycle takes about a minute.
docs/reliability.md has the figures of both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from ares import metrics
from ares.chaos.brokers import busiest_coordinator, until_in_sync
from ares.chaos.toxiproxy import free_port
from ares.config import Settings
from ares.devenv import kafka as dev_kafka
from ares.devenv.process import pid_alive
from ares.errors import AresError
from ares.events.chain import verify_chain
from ares.events.kafka.partition_writer import transactional_id
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.tasks import wait_for
from ares.topics import EVENTS, apply_topics, load_topics
from ares.topics.loader import ENV_ENVIRONMENT

RACE = "Couldn't find leader endpoint"


async def load(store: KafkaEventStore, stream: str, acked: dict[str, list[str]],
               stop: asyncio.Event) -> None:
    """One agent: sequential appends; ``acked`` gets each event id the store acknowledged."""
    ids = acked.setdefault(stream, [])
    while not stop.is_set():
        event = NewEvent("race.step", "race", {"n": len(ids) + 1})
        try:
            version = await store.append(stream, [event], len(ids))
        except (AresError, TimeoutError):
            return  # the broker is gone: this agent's run ends here
        assert version == len(ids) + 1
        ids.append(event.id)


async def victim(cluster: dev_kafka.KafkaCluster, topic: str, partitions: int
                 ) -> dev_kafka.KafkaLayout:
    """The broker to kill: the only one, or the writers' busiest transaction coordinator."""
    if cluster.size == 1:
        return cluster.first
    node = await busiest_coordinator(cluster.bootstrap, None, [
        transactional_id(topic, p) for p in range(partitions)])
    return cluster.node(node) if node is not None else cluster.first


async def cycle(settings: Settings, cluster: dev_kafka.KafkaCluster, topic: str,
                partitions: int, streams: list[str], acked: dict[str, list[str]]
                ) -> tuple[int, list[str]]:
    """One kill and takeover; the race's log lines and the violations found."""
    store = await KafkaEventStore.open(settings, topic=topic)
    stop = asyncio.Event()
    agents = [asyncio.create_task(load(store, s, acked, stop)) for s in streams]
    await asyncio.sleep(random.uniform(2.0, 4.0))
    layout = await victim(cluster, topic, partitions)
    pid = dev_kafka.running_pid(layout)
    assert pid is not None, "the broker is not running"
    os.killpg(pid, signal.SIGKILL)
    await asyncio.to_thread(_wait_until_gone, pid)
    if cluster.size > 1:  # the survivors serve: the load goes on through the failover
        await asyncio.sleep(random.uniform(2.0, 4.0))
    stop.set()
    await asyncio.wait(agents, timeout=30)
    for agent in agents:
        agent.cancel()
    with contextlib.suppress(Exception):
        await wait_for(store.close(), 10)
    races = _race_lines(cluster)
    await asyncio.to_thread(dev_kafka.start_cluster, cluster, dev_kafka.kafka_version(), 180.0)
    if cluster.size > 1:
        await until_in_sync(cluster.bootstrap, cluster.size)
    store = await KafkaEventStore.open(settings, topic=topic)  # the takeover under test
    violations: list[str] = []
    try:
        for stream in streams:
            events = await store.read(stream)
            verify_chain(events)
            found = [e.id for e in events]
            # Acknowledged appends are a prefix of the stream: an append whose commit
            # failed may still have committed (then it follows them).
            if found[:len(acked[stream])] != acked[stream]:
                violations.append(f"{stream}: {len(acked[stream])} acknowledged appends, "
                                  f"the log has {len(found)} and differs")
            acked[stream] = found
    finally:
        await store.close()
    return _race_lines(cluster) - races, violations


def _wait_until_gone(pid: int) -> None:
    while pid_alive(pid):
        time.sleep(0.05)


def _completed() -> dict[str, int]:
    """Hanging transactions this process's takeovers completed so far, by decision."""
    return {d: int(metrics.HANGING_TRANSACTIONS.labels(d)._value.get())
            for d in ("commit", "abort")}


def _race_lines(cluster: dev_kafka.KafkaCluster) -> int:
    return sum(node.log_file.read_text(errors="replace").count(RACE)
               for node in cluster.nodes if node.log_file.exists())


async def main(cycles: int, partitions: int, agents: int, brokers: int) -> int:
    root = Path(tempfile.mkdtemp(prefix="ares-hanging-race-", dir="/var/tmp"))
    cluster = (dev_kafka.KafkaCluster.on_free_ports(root, brokers) if brokers > 1 else
               dev_kafka.KafkaCluster.single(dev_kafka.KafkaLayout(
                   root, port=free_port(), controller_port=free_port())))
    await asyncio.to_thread(dev_kafka.start_cluster, cluster, dev_kafka.kafka_version(), 180.0)
    settings = Settings(kafka_bootstrap=cluster.bootstrap, request_timeout_s=10.0)
    topic_env = {"ARES_TOPIC_PARTITIONS": str(partitions)}
    if brokers >= 3:
        topic_env[ENV_ENVIRONMENT] = "cluster"  # RF 3, min.insync.replicas 2
    plan = load_topics(settings, env=topic_env)
    await apply_topics(plan, settings)
    streams = [f"agent-{i:03d}" for i in range(agents)]
    acked: dict[str, list[str]] = {}
    totals: Counter[str] = Counter()
    failed = False
    try:
        for n in range(1, cycles + 1):
            started = time.monotonic()
            before = _completed()
            try:
                races, violations = await cycle(settings, cluster, plan.name(EVENTS),
                                                partitions, streams, acked)
            except AresError as exc:
                races, violations = 0, [f"takeover failed: {exc}"]
            completed = {d: n - before[d] for d, n in _completed().items()}
            totals.update({"race": races, **completed, "violations": len(violations)})
            print(f"cycle {n}: race lines {races}, hanging completed {completed}, "
                  f"violations {violations or 0} ({time.monotonic() - started:.0f}s)",
                  flush=True)
            failed |= bool(violations)
    finally:
        dev_kafka.stop_cluster(cluster, 20.0)
    print(f"total: {dict(totals)}; broker files in {root}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--agents", type=int, default=24)
    parser.add_argument("--brokers", type=int, default=1, choices=(1, 3))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    sys.exit(asyncio.run(main(args.cycles, args.partitions, args.agents, args.brokers)))
