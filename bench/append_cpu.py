"""Our append path's own CPU, without a broker: the fleet of ``bench/append.py`` appending
through partition writers whose producer answers at once.

Run alone: ``python bench/append_cpu.py [--per-stream N] [--streams K] [--partitions P]``
prints the CPU-µs per appended event (best of 3 rounds after a warm-up of 5 events per
stream). No Kafka is involved, so this is a profiling tool, not a benchmark with a ceiling:
``bench/append.py`` measures the path against raw aiokafka on a real broker.

Instructions per event, as docs/benchmarks.md gives them, are the difference of two run
lengths under callgrind (start-up and workload generation cancel)::

    for n in 25 45; do
      valgrind --tool=callgrind --callgrind-out-file=cg.$n \
        python bench/append_cpu.py --per-stream $n
    done
    # (total of cg.45 - total of cg.25) / (200 streams * 20 events)

``callgrind_annotate --tree=calling cg.45`` then lists what each compiled function calls.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka.producer.message_accumulator import BatchBuilder

from ares.config import Settings
from ares.events.kafka.partition_writer import PartitionWriter
from ares.events.kafka.store import KafkaEventStore
from ares.events.writer import StreamTable
from ares.gc_policy import apply_gc_policy

if __package__ in (None, ""):  # python bench/append_cpu.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.append import append_fleet
from bench.harness import step_events, stream_ids

WARM_UP = 5
ROUNDS = 3


class _Sent:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class InstantProducer:
    """The producer calls a partition writer makes, answered at once: batches are built
    (as aiokafka would before sending them) and given consecutive offsets."""

    def __init__(self) -> None:
        self._offset = 0

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(1 << 20, 0, is_transactional=True)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        batch._build()
        sent: asyncio.Future[_Sent] = asyncio.get_running_loop().create_future()
        sent.set_result(_Sent(self._offset))
        self._offset += batch.record_count() + 1  # and a commit marker
        return sent

    async def begin_transaction(self) -> None:
        await asyncio.sleep(0)

    async def commit_transaction(self) -> None:
        await asyncio.sleep(0)

    async def abort_transaction(self) -> None:
        await asyncio.sleep(0)

    async def stop(self) -> None:
        return None


async def run(per_stream: int, streams: int, partitions: int) -> tuple[float, int]:
    """The best round's CPU-µs per appended event, and how many events the writers' tables
    hold afterwards (every one, or an append went missing)."""
    writers = {}
    for p in range(partitions):
        writer = PartitionWriter(InstantProducer(), "bench", p, StreamTable(), 1 << 20)
        writer.start()
        writers[p] = writer
    # Appends only: the store's scanner serves reads, and this benchmark makes none.
    store = KafkaEventStore(Settings.from_env(), "bench", partitions, writers,
                            None)  # type: ignore[arg-type]
    news = step_events(stream_ids(streams), per_stream)
    await append_fleet(store, {s: events[:WARM_UP] for s, events in news.items()})
    measured = per_stream - WARM_UP
    best = float("inf")
    for r in range(ROUNDS):
        low = WARM_UP + r * measured // ROUNDS
        high = WARM_UP + (r + 1) * measured // ROUNDS
        start = time.process_time()
        await append_fleet(store, {s: events[low:high] for s, events in news.items()}, low)
        best = min(best, (time.process_time() - start) / (streams * (high - low)) * 1e6)
    for writer in writers.values():
        await writer.stop()
    held = sum(writer.table.head(s).version for writer in writers.values()
               for s in writer.table.stream_ids())
    return best, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-stream", type=int, default=150,
                        help="events each agent appends, warm-up included (default 150)")
    parser.add_argument("--streams", type=int, default=200, help="agents (default 200)")
    parser.add_argument("--partitions", type=int, default=12, help="writers (default 12)")
    args = parser.parse_args()
    if args.per_stream < WARM_UP + ROUNDS:
        parser.error(f"--per-stream must be at least {WARM_UP + ROUNDS}")
    apply_gc_policy(Settings.from_env().gc_threshold)
    best, _ = asyncio.run(run(args.per_stream, args.streams, args.partitions))
    print(f"{best:.2f} CPU-µs per appended event (best of {ROUNDS} rounds)")


if __name__ == "__main__":
    main()
