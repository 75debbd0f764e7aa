"""Signing benchmark: what an Ed25519 signature per event costs the append path.

Run alone: ``python bench/signing.py [--events N] [--streams K] [--rounds R] [--json]``.

Signed and unsigned appends side by side in one run, on the same writers, the signer
switched on and off between rounds (``StreamTable.signer``), the order alternating so that
neither side always runs second:

* **append** (the figure): K agents append concurrently on a real broker, one event per
  append, each awaited (``bench/append.py``'s fleet), through one ``KafkaEventStore``;
  events/s signed over events/s unsigned, and the CPU-µs per event of each.
* **cpu**: the same fleet through partition writers whose producer answers at once
  (``bench/append_cpu.py``): the append path's own CPU per event, signed and unsigned.
* **seal**: ``StreamTable.plan`` alone (validate, encode, hash, and sign), best of 3.
* **verify**: what a reader (recovery, the audit) pays per event to check a signature:
  ``verify_chain`` with the keyring's policy against hashes only, best of 3.

Nothing is asserted: the ratios go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ares.config import Settings
from ares.events.chain import verify_chain
from ares.events.kafka.partition_writer import PartitionWriter
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.events.signing import UNCHECKED, KeyEntry, Keyring, SignaturePolicy, Signer
from ares.events.wire.codec import decode_event
from ares.events.writer import StreamTable

if __package__ in (None, ""):  # python bench/signing.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.append import append_fleet
from bench.append_cpu import InstantProducer
from bench.harness import (
    Measurement,
    Section,
    bench_settings,
    bench_topics,
    best_of,
    cli,
    combine,
    events_topic_configs,
    machine,
    rate_ratios,
    section,
    step_events,
    stream_ids,
)

WARM_UP = 5


def _bounds(count: int, rounds: int) -> list[tuple[int, int]]:
    """``rounds`` consecutive slices of ``count`` events per stream, after the warm-up."""
    measured = count - WARM_UP
    return [(WARM_UP + r * measured // rounds, WARM_UP + (r + 1) * measured // rounds)
            for r in range(rounds)]


def _slice(news: Mapping[str, Sequence[NewEvent]], lo: int,
           hi: int) -> dict[str, Sequence[NewEvent]]:
    return {s: events[lo:hi] for s, events in news.items()}


async def _alternate(tables: Sequence[StreamTable], signer: Signer, rounds: int,
                     news: Mapping[str, Sequence[NewEvent]], per_stream: int,
                     fleet: Callable[[Mapping[str, Sequence[NewEvent]], int],
                                     Any]) -> tuple[list[Measurement], list[Measurement]]:
    """Each round's slice is appended twice: half of the streams signed, the other half
    unsigned, one after the other (signed first on even rounds). Returns the (signed,
    unsigned) measurements of every round."""
    streams = sorted(news)
    halves = (streams[0::2], streams[1::2])
    signed: list[Measurement] = []
    unsigned: list[Measurement] = []
    for r, (lo, hi) in enumerate(_bounds(per_stream, rounds)):
        order = (True, False) if r % 2 == 0 else (False, True)
        for i, sign in enumerate(order):
            for table in tables:
                table.signer = signer if sign else None
            # Half the streams per side, swapped every other round: each stream is signed
            # and unsigned alike, and each side appends the same number of events.
            part = halves[(i + r) % 2]
            measured = await fleet({s: news[s][lo:hi] for s in part}, lo)
            (signed if sign else unsigned).append(measured)
    for table in tables:
        table.signer = None
    return signed, unsigned


def _pair(name: str, signed: Sequence[Measurement], unsigned: Sequence[Measurement],
          what: str, **extra: Any) -> Section:
    ours, ceiling = combine(signed).to_dict(), combine(unsigned).to_dict()
    cpu_ratio = (round(ours["cpu_us_per_event"] / ceiling["cpu_us_per_event"], 3)
                 if ceiling["cpu_us_per_event"] else None)
    return section(name, "events_per_s", ours, ceiling, what=what,
                   round_ratios=rate_ratios(signed, unsigned), cpu_ratio=cpu_ratio, **extra)


async def measure_cpu(news: Mapping[str, Sequence[NewEvent]], per_stream: int, rounds: int,
                      partitions: int, signer: Signer) -> Section:
    writers = {p: PartitionWriter(InstantProducer(), "bench", p,
                                  StreamTable(sign=False), 1 << 20) for p in range(partitions)}
    for writer in writers.values():
        writer.start()
    store = KafkaEventStore(Settings.from_env(), "bench", partitions, writers,
                            None)  # type: ignore[arg-type]
    try:
        await append_fleet(store, _slice(news, 0, WARM_UP))
        signed, unsigned = await _alternate(
            [w.table for w in writers.values()], signer, rounds, news, per_stream,
            lambda part, at: append_fleet(store, part, at))
    finally:
        for writer in writers.values():
            await writer.stop()
    return _pair("signing.cpu", signed, unsigned,
                 f"the same fleet, {partitions} writers whose producer answers at once: "
                 "the append path's own CPU")


def measure_seal(signer: Signer, count: int = 20_000) -> Section:
    news = [NewEvent("step.completed", "bench", {"task_id": "t", "step_name": f"s{i}",
                                                 "result_json": '{"ok":true}'})
            for i in range(count)]

    def plan(sign: bool) -> Callable[[], object]:
        def work() -> object:
            table = StreamTable(signer=signer, sign=sign)
            for i, new in enumerate(news):
                table.apply(table.plan(f"s-{i % 200}", [new]))
            return table
        return work

    unsigned = best_of(3, count, plan(False))
    signed = best_of(3, count, plan(True))
    unsigned = min(unsigned, best_of(3, count, plan(False)), key=lambda m: m.cpu_s)
    return section("signing.seal", "cpu_us_per_event", signed.to_dict(), unsigned.to_dict(),
                   higher_is_better=False,
                   what="StreamTable.plan + apply of one step.completed event, best of 3")


def measure_verify(signer: Signer, count: int = 5_000) -> Section:
    """What a reader pays to check signatures: ``verify_chain`` over decoded events of one
    stream with the keyring's policy, against the same call checking hashes only."""
    table = StreamTable(signer=signer)
    plan = table.plan("s", [NewEvent("step.completed", "bench", {
        "task_id": "t", "step_name": f"s{i}", "result_json": '{"ok":true}'})
        for i in range(count)])
    events = [decode_event(wire) for wire in plan.encoded]
    keyring = Keyring({signer.key_id: KeyEntry(signer.key_id, signer.public_key)})

    def verify(policy: Callable[[], SignaturePolicy]) -> Callable[[], object]:
        return lambda: verify_chain(events, signatures=policy())

    unchecked = best_of(3, count, verify(lambda: UNCHECKED))
    checked = best_of(3, count, verify(lambda: SignaturePolicy(keyring)))
    return section("signing.verify", "cpu_us_per_event", checked.to_dict(),
                   unchecked.to_dict(), higher_is_better=False,
                   what="verify_chain of decoded events (recovery, audit): hashes and "
                        "signatures against hashes only, best of 3")


async def run(settings: Settings, *, events: int = 20_000, streams: int = 200,
              rounds: int = 6, partitions: int | None = None, seal_events: int = 20_000,
              verify_events: int = 5_000) -> Section:
    """The ``signing`` report section: signed appends (ours) against unsigned (ceiling)."""
    settings = bench_settings(settings)
    where = machine()
    partitions = partitions or events_topic_configs(settings)[0]
    per_stream = max(WARM_UP + rounds, events // streams + WARM_UP)
    rounds = max(1, rounds)
    news = step_events(stream_ids(streams), per_stream)
    signer = Signer.generate("bench")
    seal = measure_seal(signer, seal_events)
    verify = measure_verify(signer, verify_events)
    cpu = await measure_cpu(news, per_stream, rounds, partitions, signer)
    topic = settings.topic("ares.events")
    async with bench_topics(settings, [topic], partitions):
        store = await KafkaEventStore.open(settings, topic=topic)
        try:
            tables = []
            for p in store.owned:
                writer = store.writer(p)
                assert writer is not None
                tables.append(writer.table)
            await append_fleet(store, _slice(news, 0, WARM_UP))
            started = time.perf_counter()
            signed, unsigned = await _alternate(
                tables, signer, rounds, news, per_stream,
                lambda part, at: append_fleet(store, part, at))
            elapsed = time.perf_counter() - started
        finally:
            await store.close()
    return _pair(
        "signing", signed, unsigned,
        f"{streams} agents ({streams // 2} per side and round) x sequential single-event "
        f"appends (OCC), {partitions} partitions, acks=all, on one store; ours: every event "
        "signed (Ed25519 over its hash), ceiling: the same appends unsigned",
        config={"events_per_side": sum(m.events for m in signed), "streams": streams,
                "partitions": partitions, "rounds": rounds, "seconds": round(elapsed, 1)},
        machine=where, parts={"cpu": cpu, "seal": seal, "verify": verify})


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=20_000,
                        help="events appended in all, half of them signed (default 20000)")
    parser.add_argument("--streams", type=int, default=200, help="agents (default 200)")
    parser.add_argument("--rounds", type=int, default=6,
                        help="rounds, alternating which side runs first (default 6)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions of the events topic (default: topics.yaml's)")
    parser.add_argument("--seal-events", type=int, default=20_000,
                        help="events sealed per measurement of signing.seal (default 20000)")
    parser.add_argument("--verify-events", type=int, default=5_000,
                        help="events verified per measurement of signing.verify "
                             "(default 5000)")


if __name__ == "__main__":
    cli(__doc__.split("\n\n")[0] if __doc__ else "signing", run, _arguments)
