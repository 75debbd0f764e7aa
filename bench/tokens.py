"""Token streams and usage records: what the LLM telemetry publishes per second.

Run alone: ``python bench/tokens.py [--agents A] [--deltas D] [--calls C] [--json]``.

Deltas: ``--agents`` concurrent streams (one per agent, as many agents stream at once on
a runtime manager), each a start record, ``--deltas`` text deltas of a few characters (what
a provider's SSE chunk holds) and an end record, through ``KafkaTelemetry.open_stream``
(the runtime manager's publisher: a ``TokenRecord`` encoded per delta, sent without
awaiting its delivery, all delivered when the stream ends). Ceiling: a raw aiokafka
producer with the same settings (idempotent, ``acks=all``, ``linger_ms=5``) sending
pre-encoded records of the same size with the same keys.

Usage: ``--calls`` usage records from ``--agents`` concurrent agents, each awaiting the
delivery of its record as the SDK does after every provider answer; ceiling: the raw
producer sending the same JSON and awaiting each delivery the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from ares.config import Settings
from ares.llm.kafka_telemetry import KafkaTelemetry
from ares.llm.telemetry import DELTA, StreamId, UsageRecord
from ares.llm.tokens import TokenRecord
from ares.topics import TOKENS, USAGE, apply_topics, delete_topics

if __package__ in (None, ""):  # python bench/tokens.py: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import Section, Stopwatch, bench_plan, bench_settings, cli, section

DELTA_TEXT = "tok "  # ~one token of English per delta, as providers stream them


async def run(settings: Settings, agents: int = 50, deltas: int = 400,
              calls: int = 5000, partitions: int = 4) -> Section:
    settings = bench_settings(settings)
    plan = bench_plan(settings, partitions)
    await apply_topics(plan, settings)
    telemetry = KafkaTelemetry(settings, plan)
    raw = _raw_producer(settings)
    await telemetry.start()
    await raw.start()
    try:
        ceiling = await _raw_deltas(raw, plan.name(TOKENS), agents, deltas)
        ours = await _deltas(telemetry, agents, deltas)
        usage_ceiling = await _raw_usage(raw, plan.name(USAGE), agents, calls)
        usage_ours = await _usage(telemetry, agents, calls)
    finally:
        await raw.stop()
        await telemetry.stop()
        await delete_topics(plan, settings)
    usage = section("tokens.usage: usage records published (delivery awaited per answer)",
                    "events_per_s", usage_ours, usage_ceiling, calls=calls, agents=agents)
    return section("tokens: stream deltas published to ares.tokens", "events_per_s", ours,
                   ceiling, agents=agents, deltas_per_stream=deltas,
                   partitions=partitions, parts={"usage": usage})


def _raw_producer(settings: Settings) -> AIOKafkaProducer:
    """What ``KafkaTelemetry`` configures, minus ares."""
    return AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap,
                            enable_idempotence=True, acks="all", linger_ms=5,
                            request_timeout_ms=int(settings.request_timeout_s * 1000))


def _stream(agent: int) -> StreamId:
    return StreamId(f"agent-{agent:04d}", "task-1", "answer", 0)


async def _deltas(telemetry: KafkaTelemetry, agents: int, deltas: int) -> dict[str, object]:
    async def one(agent: int) -> None:
        stream = await telemetry.open_stream(_stream(agent), incarnation=0, restarted=False)
        for _ in range(deltas):
            await stream.delta(DELTA_TEXT)
        await stream.end()

    watch = Stopwatch()
    await asyncio.gather(*(one(a) for a in range(agents)))
    return watch.stop(agents * (deltas + 2)).to_dict()


async def _raw_deltas(producer: AIOKafkaProducer, topic: str, agents: int,
                      deltas: int) -> dict[str, object]:
    async def one(agent: int) -> None:
        stream = _stream(agent)
        value = TokenRecord(stream=str(stream), agent_id=stream.agent_id,
                            task_id=stream.task_id, name=stream.name, occurrence=0,
                            incarnation=0, kind=DELTA, seq=0, text=DELTA_TEXT,
                            at=time.time()).encode()
        key = stream.agent_id.encode()
        pending = [await producer.send(topic, value=value, key=key)
                   for _ in range(deltas + 2)]
        await asyncio.gather(*pending)

    watch = Stopwatch()
    await asyncio.gather(*(one(a) for a in range(agents)))
    return watch.stop(agents * (deltas + 2)).to_dict()


def _usage_record(agent: int, call: int) -> UsageRecord:
    return UsageRecord(tenant=f"tenant-{agent % 7}", agent_id=f"agent-{agent:04d}",
                       kind="bench", task_id="task-1", name=f"call-{call}", provider="offline",
                       model="offline-1", prompt_tokens=300, completion_tokens=120,
                       cost_usd=0.0001, at=time.time())


async def _usage(telemetry: KafkaTelemetry, agents: int, calls: int) -> dict[str, object]:
    async def one(agent: int) -> None:
        for call in range(agent, calls, agents):
            await telemetry.usage(_usage_record(agent, call))

    watch = Stopwatch()
    await asyncio.gather(*(one(a) for a in range(agents)))
    return watch.stop(calls).to_dict()


async def _raw_usage(producer: AIOKafkaProducer, topic: str, agents: int,
                     calls: int) -> dict[str, object]:
    async def one(agent: int) -> None:
        for call in range(agent, calls, agents):
            record = _usage_record(agent, call)
            value = json.dumps(record.to_json(), separators=(",", ":")).encode()
            await (await producer.send(topic, value=value, key=record.tenant.encode()))

    watch = Stopwatch()
    await asyncio.gather(*(one(a) for a in range(agents)))
    return watch.stop(calls).to_dict()


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--deltas", type=int, default=400)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=4)


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    cli("LLM telemetry throughput", run, _arguments)
