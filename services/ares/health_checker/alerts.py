"""Alerts on ``ares.alerts``: the Avro record, its JSON form, and reading them back.

The JSON form is one object with the Alert record's fields (``timestamp`` as ISO 8601)
and is what ``ares alerts tail --json`` prints and what the webhook posts::

    {"id": "...", "stream_id": "agent-7", "kind": "death_loop", "severity": "critical",
     "message": "...", "source": "health-checker", "timestamp": "2026-...Z",
     "details": {"fingerprint": "...", ...}}
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from ares.errors import SchemaError
from ares.events.wire.codec import decode, encode
from ares.events.wire.schemas import ALERT
from ares.health_checker.model import RaiseAlert

log = logging.getLogger(__name__)
SOURCE = "health-checker"


def alert_record(alert: RaiseAlert, source: str = SOURCE) -> bytes:
    return encode(ALERT, {
        "id": alert.id, "stream_id": alert.stream_id, "kind": alert.kind,
        "severity": alert.severity, "message": alert.message, "source": source,
        "timestamp": datetime.fromtimestamp(alert.at, UTC), "details": dict(alert.details),
    })


def decode_alert(value: bytes) -> dict[str, Any]:
    """The Alert record in ``value``; ``SchemaError`` when it is something else."""
    name, record = decode(value)
    if name != ALERT:
        raise SchemaError(f"schema_mismatch: expected a {ALERT}, got a {name}")
    return record


def alert_json(record: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form of a decoded Alert record (see the module docstring)."""
    ts = record.get("timestamp")
    return {
        "id": record.get("id"), "stream_id": record.get("stream_id", ""),
        "kind": record.get("kind"), "severity": record.get("severity"),
        "message": record.get("message"), "source": record.get("source"),
        "timestamp": ts.isoformat() if isinstance(ts, datetime) else ts,
        "details": dict(record.get("details") or {}),
    }


async def seek_to_time(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                       since: float) -> dict[TopicPartition, int]:
    """Seek every partition to its first record at or after ``since`` (epoch seconds), or
    its end; the end offsets at the time of the call (what "caught up" means)."""
    ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    found = await consumer.offsets_for_times({tp: max(int(since * 1000), 0) for tp in tps})
    for tp in tps:
        hit = found.get(tp)
        consumer.seek(tp, hit.offset if hit is not None else ends[tp])
    return ends


async def read_alerts(consumer: AIOKafkaConsumer, topic: str, partitions: int,
                      since: float) -> AsyncIterator[dict[str, Any]]:
    """Every readable alert of ``topic`` from ``since`` up to the ends at call time, one
    partition after the other (``consumer`` must be group-less)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    ends = await seek_to_time(consumer, tps, since)
    deadline = time.monotonic() + 30
    while (open_tps := [tp for tp in tps if await consumer.position(tp) < ends[tp]]):
        if time.monotonic() > deadline:
            log.warning("stopped reading %s before its end: %s", topic, open_tps)
            return
        batch = await consumer.getmany(*open_tps, timeout_ms=500)
        for records in batch.values():
            for record in records:
                if record.value is None:
                    continue
                try:
                    yield decode_alert(record.value)
                except SchemaError as exc:
                    log.warning("undecodable alert at %s/%d@%d: %s", record.topic,
                                record.partition, record.offset, exc)
