"""``ares audit verify --state``: does each recovery record's ``state_hash`` match the log?

A runtime manager that resurrects an agent writes a recovery record with
``agent.resurrected`` (``ares.lifecycle.recovery.RecoveryRecord``): the version it rebuilt
the agent to and the SHA-256 of the state it rebuilt (``state_hash``). The record is the
writer's own word; this audit re-checks it from the log alone. For every record, the
stream's events from version 1 up to the record's ``resulting_version`` are replayed from
scratch — no snapshot, so a snapshot the recovery trusted is not trusted here — through the
same fold recovery uses (``ares.runtime_manager.replay.state_hash_at``: ``AgentReplay``, the
agent's own ``restore``/``apply`` from the agent registry), and the hash is recomputed.

Verdicts: ``ok``; ``mismatch`` (an integrity failure: exit 5, as for a broken chain);
``unknown`` when the log cannot say (the stream's early versions were trimmed, the agent's
kind is not in the registry given with ``--agents``, the record holds no hash, the replay
of those versions does not verify).

Two passes over the scanned partitions: the first finds the records, the second keeps only
the events of streams that have one (memory: those streams, up to their last record).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.model import Event
from ares.events.wire.codec import decode_event
from ares.lifecycle import events as ev
from ares.lifecycle.recovery import RecoveryRecord
from ares.replay_reader.audit_run import RecordSource, _Topics
from ares.replay_reader.kafka_source import RangeScanner

OK, MISMATCH, UNKNOWN = "ok", "mismatch", "unknown"

# (stream id, its (offset, event)s from version 1, version) -> (state hash, "") or (None,
# why not). The runtime manager's own fold (``ares.runtime_manager.replay.state_hash_at``),
# handed in by the CLI: services do not import each other.
Recompute = Callable[[str, Sequence[tuple[int, Event]], int], tuple[str | None, str]]


@dataclass(frozen=True, slots=True)
class StateCheck:
    """The verdict on one recovery record."""

    stream_id: str
    event_version: int  # the agent.resurrected event's version
    resulting_version: int | None
    recorded: str | None
    recomputed: str | None
    status: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id, "event_version": self.event_version,
                "resulting_version": self.resulting_version, "recorded": self.recorded,
                "recomputed": self.recomputed, "status": self.status, "detail": self.detail}

    def line(self) -> str:
        head = (f"{self.stream_id} v{self.event_version}: recovery record state "
                f"(version {self.resulting_version})")
        if self.status == OK:
            return f"{head} ok"
        if self.status == MISMATCH:
            return (f"{head} MISMATCH: recorded {str(self.recorded)[:16]}..., the log gives "
                    f"{str(self.recomputed)[:16]}...")
        return f"{head} unknown: {self.detail}"


@dataclass(slots=True)
class StateReport:
    checks: list[StateCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(c.status == MISMATCH for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "records": [c.to_json() for c in self.checks]}

    def lines(self) -> list[str]:
        counts = {s: sum(c.status == s for c in self.checks) for s in (OK, MISMATCH, UNKNOWN)}
        return [*(c.line() for c in self.checks if c.status != OK),
                f"recovery records: {len(self.checks)} checked, {counts[OK]} ok, "
                f"{counts[MISMATCH]} mismatched, {counts[UNKNOWN]} unknown"]


async def audit_states(source: RecordSource, events_topic: str, streams: Sequence[str] | None,
                       recompute: Recompute) -> StateReport:
    wanted = None if streams is None else {s.encode() for s in streams}
    partitions = await source.partitions_to_scan(
        events_topic, None if streams is None else set(streams))
    ranges = []
    for p in partitions:
        tp = TopicPartition(events_topic, p)
        ranges.append((tp, await source.start_offset(tp), await source.end(tp)))

    # Pass 1: the recovery records.
    records: dict[str, list[tuple[int, RecoveryRecord]]] = {}
    for tp, start, end in ranges:
        async for _offset, event in _events(source, tp, start, end, wanted):
            if event.type == ev.AGENT_RESURRECTED:
                records.setdefault(event.stream_id, []).append(
                    (event.version, RecoveryRecord.from_event(event)))
    # Pass 2: the events of those streams, up to their last record's version.
    keep = {s.encode() for s in records}
    needed = {s: max((r.resulting_version or 0) for _, r in rs) for s, rs in records.items()}
    history: dict[str, list[tuple[int, Event]]] = {s: [] for s in records}
    if keep:
        for tp, start, end in ranges:
            async for offset, event in _events(source, tp, start, end, keep):
                if event.version <= needed[event.stream_id]:
                    history[event.stream_id].append((offset, event))

    report = StateReport()
    for stream_id in sorted(records):
        for event_version, record in records[stream_id]:
            report.checks.append(check_record(stream_id, event_version, record,
                                              history[stream_id], recompute))
    return report


def check_record(stream_id: str, event_version: int, record: RecoveryRecord,
                 events: Sequence[tuple[int, Event]], recompute: Recompute) -> StateCheck:
    """The verdict on one recovery record, given its stream's events from version 1."""
    version, recorded = record.resulting_version, record.state_hash
    if version is None or recorded is None:
        return StateCheck(stream_id, event_version, version, recorded, None, UNKNOWN,
                          "the record holds no version or state hash (an older writer)")
    recomputed, why = recompute(stream_id, events, version)
    if recomputed is None:
        return StateCheck(stream_id, event_version, version, recorded, None, UNKNOWN, why)
    status = OK if recomputed == recorded else MISMATCH
    return StateCheck(stream_id, event_version, version, recorded, recomputed, status)


async def _events(source: RecordSource, tp: TopicPartition, start: int, end: int,
                  keys: set[bytes] | None) -> AsyncIterator[tuple[int, Event]]:
    """(offset, event) of the records of ``keys`` (None: all); undecodable records are the
    integrity audit's business and skipped here."""
    async for record in source.records(tp, start, end):
        if keys is not None and record.key not in keys:
            continue
        if record.value is None:
            continue
        try:
            yield record.offset, decode_event(record.value or b"")
        except SchemaError:
            continue


async def run_state_audit(settings: Settings, events_topic: str,
                          streams: Sequence[str] | None,
                          recompute: Recompute) -> StateReport:
    """``audit_states`` on the topics of ``settings``' broker."""
    scanner = RangeScanner(settings)
    await scanner.start()
    try:
        return await audit_states(_Topics(scanner), events_topic, streams, recompute)
    finally:
        await scanner.close()


__all__ = ["MISMATCH", "OK", "UNKNOWN", "Recompute", "StateCheck", "StateReport",
           "audit_states", "check_record", "run_state_audit"]
