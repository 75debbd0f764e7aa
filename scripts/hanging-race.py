"""Reproduce the Kafka 4.4 restart race (reliability finding 1) and check what ares does.

    PYTHONPATH=services python scripts/hanging-race.py [--cycles 20] [--partitions 6]

Each cycle: agents append to a KafkaEventStore on a broker of the script's own; the broker
is SIGKILLed mid-load and restarted; a new store takes every partition over. Sometimes the
restarted transaction coordinator skips a partition's COMMIT markers ("Couldn't find leader
endpoint for partitions ... likely deleted already") and leaves a hanging transaction. The
script then checks, every cycle, that no partition is left undecided, that every append
acknowledged before the kill is in its stream at its version, and that each stream's hash
chain holds. It prints one line per cycle and exits non-zero on a violation.

On a 2-core machine about one restart in two skips markers and one in six to ten leaves a
hanging transaction (3 in 19 on 1 Dec 2026); each cycle takes about a minute.
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
from ares.chaos.toxiproxy import free_port
from ares.config import Settings
from ares.devenv import kafka as dev_kafka
from ares.devenv.process import pid_alive
from ares.errors import AresError
from ares.events.chain import verify_chain
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.topics import EVENTS, apply_topics, load_topics

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


async def cycle(settings: Settings, layout: dev_kafka.KafkaLayout, topic: str,
                streams: list[str], acked: dict[str, list[str]]) -> tuple[int, list[str]]:
    """One kill and takeover; the race's log lines and the violations found."""
    store = await KafkaEventStore.open(settings, topic=topic)
    stop = asyncio.Event()
    agents = [asyncio.create_task(load(store, s, acked, stop)) for s in streams]
    await asyncio.sleep(random.uniform(2.0, 4.0))
    pid = dev_kafka.running_pid(layout)
    assert pid is not None, "the broker is not running"
    os.killpg(pid, signal.SIGKILL)
    await asyncio.to_thread(_wait_until_gone, pid)
    stop.set()
    await asyncio.wait(agents, timeout=30)
    for agent in agents:
        agent.cancel()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(store.close(), 10)
    races = _race_lines(layout)
    await asyncio.to_thread(dev_kafka.start, layout, dev_kafka.kafka_version(), 180.0)
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
    return _race_lines(layout) - races, violations


def _wait_until_gone(pid: int) -> None:
    while pid_alive(pid):
        time.sleep(0.05)


def _completed() -> dict[str, int]:
    """Hanging transactions this process's takeovers completed so far, by decision."""
    return {d: int(metrics.HANGING_TRANSACTIONS.labels(d)._value.get())
            for d in ("commit", "abort")}


def _race_lines(layout: dev_kafka.KafkaLayout) -> int:
    return layout.log_file.read_text(errors="replace").count(RACE)


async def main(cycles: int, partitions: int, agents: int) -> int:
    root = Path(tempfile.mkdtemp(prefix="ares-hanging-race-", dir="/var/tmp"))
    layout = dev_kafka.KafkaLayout(root, port=free_port(), controller_port=free_port())
    await asyncio.to_thread(dev_kafka.start, layout, dev_kafka.kafka_version(), 180.0)
    settings = Settings(kafka_bootstrap=layout.bootstrap, request_timeout_s=10.0)
    plan = load_topics(settings, env={"ARES_TOPIC_PARTITIONS": str(partitions)})
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
                races, violations = await cycle(settings, layout, plan.name(EVENTS), streams,
                                                acked)
            except AresError as exc:
                races, violations = 0, [f"takeover failed: {exc}"]
            completed = {d: n - before[d] for d, n in _completed().items()}
            totals.update({"race": races, **completed, "violations": len(violations)})
            print(f"cycle {n}: race lines {races}, hanging completed {completed}, "
                  f"violations {violations or 0} ({time.monotonic() - started:.0f}s)",
                  flush=True)
            failed |= bool(violations)
    finally:
        dev_kafka.stop(layout, 20.0)
    print(f"total: {dict(totals)}; broker files in {root}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--agents", type=int, default=24)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    sys.exit(asyncio.run(main(args.cycles, args.partitions, args.agents)))
