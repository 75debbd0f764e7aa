"""The Java client as a second ceiling: Kafka's own ProducerPerformance/ConsumerPerformance.

Run alone: ``python bench/java_clients.py [--records N] [--json]``.

The same broker, the same record size as an ares event on the wire (521 bytes), the same
producer settings as our writers (``acks=all``, idempotent, ``linger.ms=1``): raw aiokafka
(Python) next to Kafka's Java tools, resolved from Maven Central onto a classpath of their
own (``ares.devenv.kafka_tools``, cached under the ares cache dir). It says how much
of the distance to the broker's speed is Python's and not ares-mesh's.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from ares.config import Settings
from ares.devenv.kafka_tools import resolve_tools_classpath

if __package__ in (None, ""):  # python bench/java_clients.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import bench_settings, bench_topics, cli, section, start_producer

KAFKA_VERSION = "4.4.0"
RECORD_BYTES = 521


def _java(classpath: str, main: str, *args: str) -> str:
    done = subprocess.run(["java", "-Xmx512m", "-cp", classpath, main, *args],
                          capture_output=True, text=True, timeout=600, check=True)
    return done.stdout


async def run(settings: Settings, *, records: int = 50_000, partitions: int = 12
              ) -> dict[str, Any]:
    settings = bench_settings(settings)
    libs = await asyncio.to_thread(resolve_tools_classpath, KAFKA_VERSION)
    classpath = f"{libs}/*"
    topic = settings.topic(f"bench.java.{uuid.uuid4().hex[:6]}")
    payload = b"x" * RECORD_BYTES
    async with bench_topics(settings, [topic], partitions):
        producer = await start_producer(settings, acks="all", enable_idempotence=True,
                                        linger_ms=1)
        try:
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(records):
                await producer.send(topic, payload, key=str(i % 1000).encode())
            await producer.flush()
            py_produce = records / (time.perf_counter() - wall)
            py_cpu_us = (time.process_time() - cpu) / records * 1e6
        finally:
            await producer.stop()
        py_consume = await _python_consume(settings, topic, partitions, records)
        out = await asyncio.to_thread(
            _java, classpath, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(records), "--record-size", str(RECORD_BYTES),
            "--throughput", "-1", "--command-property",
            f"bootstrap.servers={settings.kafka_bootstrap}", "acks=all", "linger.ms=1",
            "enable.idempotence=true")
        java_produce = float(re.findall(r"([\d.]+) records/sec", out)[-1])
        out = await asyncio.to_thread(
            _java, classpath, "org.apache.kafka.tools.ConsumerPerformance", "--topic", topic,
            "--num-records", str(2 * records), "--bootstrap-server", settings.kafka_bootstrap)
        last = out.strip().splitlines()[-1].split(", ")
        java_consume = float(last[-1])  # fetch.nMsg.sec: without the group join
    return section(
        "java_clients", "produce_per_s",
        {"client": "aiokafka (Python)", "produce_per_s": round(py_produce),
         "produce_cpu_us_per_record": round(py_cpu_us, 1), "consume_per_s": round(py_consume)},
        {"client": f"Kafka {KAFKA_VERSION} Java tools", "produce_per_s": round(java_produce),
         "consume_per_s": round(java_consume)},
        records=records, record_bytes=RECORD_BYTES,
        consume_ratio=round(py_consume / java_consume, 3) if java_consume else None)


async def _python_consume(settings: Settings, topic: str, partitions: int,
                          records: int) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                enable_auto_commit=False, **settings.kafka_options())
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen, wall = 0, time.perf_counter()
        while seen < records:
            batch = await consumer.getmany(timeout_ms=1000)
            seen += sum(len(r) for r in batch.values())
        return seen / (time.perf_counter() - wall)
    finally:
        await consumer.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=12)


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], run, add_arguments)
