"""Snapshots: an agent's state at a stream version, kept on the compacted ``ares.snapshots``.

The owner writes a snapshot inside the same transaction as its ``snapshot.taken`` event, so
the two are visible together or not at all. A snapshot records the ``ares.events`` offset
after the last event it covers: recovery of a partition seeks the log to the smallest such
offset and replays from there. Never trusted over the log: recovery discards a snapshot
whose version and hash do not match the stream's chain.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import TopicPartition

from ares.errors import SchemaError
from ares.events.kafka.dlq import Reject, reason_of
from ares.events.kafka.reader import PartitionScanner
from ares.events.model import utc_now
from ares.events.wire.canonical import canonical_json
from ares.events.wire.codec import decode, encode
from ares.events.wire.schemas import SNAPSHOT

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Snapshot:
    stream_id: str
    version: int
    hash: str
    events_offset: int  # offset in ares.events right after the last covered event
    agent_kind: str
    state: Mapping[str, Any]
    incarnation: int = 0
    taken_at: datetime = field(default_factory=utc_now)

    def encode(self) -> bytes:
        return encode(SNAPSHOT, {
            "stream_id": self.stream_id, "version": self.version, "hash": self.hash,
            "events_offset": self.events_offset, "agent_kind": self.agent_kind,
            "incarnation": self.incarnation, "taken_at": self.taken_at,
            "state": canonical_json(dict(self.state)).encode(), "state_encoding": "json",
        })

    @classmethod
    def decode(cls, data: bytes) -> Snapshot:
        name, record = decode(data)
        if name != SNAPSHOT:
            raise SchemaError(f"schema_mismatch: expected a {SNAPSHOT}, got a {name}")
        if record["state_encoding"] != "json":
            raise SchemaError(f"invalid_payload: unknown state encoding "
                              f"{record['state_encoding']!r}")
        try:
            state = json.loads(record["state"])
        except (ValueError, UnicodeDecodeError) as exc:
            raise SchemaError(f"invalid_payload: snapshot state is not JSON: {exc}") from exc
        return cls(record["stream_id"], record["version"], record["hash"],
                   record["events_offset"], record["agent_kind"], state,
                   record["incarnation"], record["taken_at"])


async def load_snapshots(scanner: PartitionScanner, topic: str, partition: int,
                         reject: Reject | None = None) -> dict[str, Snapshot]:
    """The latest readable snapshot of every stream of one partition of ``ares.snapshots``.

    A compacted topic may still hold older snapshots of a key: the last one wins. An
    unreadable snapshot is skipped with a warning (recovery then replays that stream in
    full), never trusted.
    """
    latest: dict[str, Snapshot] = {}
    async for record in scanner.scan_records(TopicPartition(topic, partition)):
        if record.value is None:  # a tombstone: the stream's snapshots were deleted
            if record.key is None:
                if reject is not None:
                    reject(record, "invalid_snapshot", "a tombstone without a key")
                continue
            latest.pop(record.key.decode(errors="replace"), None)
            continue
        try:
            snapshot = Snapshot.decode(record.value)
        except SchemaError as exc:
            log.warning("discarding unreadable snapshot at %s/%d@%d: %s", topic, partition,
                        record.offset, exc)
            if reject is not None:
                reject(record, reason_of(exc, "invalid_snapshot"), str(exc))
            continue
        latest[snapshot.stream_id] = snapshot
    return latest
