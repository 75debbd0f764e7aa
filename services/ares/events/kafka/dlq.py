"""Dead letters: rejected input kept whole, with the reason, on ``ares.dlq``.

The record's key and value are the original bytes; headers say why and where it came from,
so `ares events dump --topic ares.dlq` (or any Kafka tool) can show and replay it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ares.events.model import utc_now

REASON = "ares.dlq.reason"
DETAIL = "ares.dlq.detail"
SOURCE_TOPIC = "ares.dlq.source.topic"
SOURCE_PARTITION = "ares.dlq.source.partition"
SOURCE_OFFSET = "ares.dlq.source.offset"
TIME = "ares.dlq.time"
MAX_DETAIL = 2000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One rejected record and why it was rejected."""

    reason: str  # a short stable code: bad_magic, unknown_fingerprint, oversized, ...
    detail: str
    source_topic: str
    source_partition: int
    source_offset: int
    key: bytes | None
    value: bytes | None
    time: datetime | None = None

    def headers(self) -> list[tuple[str, bytes]]:
        when = (self.time or utc_now()).isoformat()
        return [
            (REASON, self.reason.encode()),
            (DETAIL, self.detail[:MAX_DETAIL].encode()),
            (SOURCE_TOPIC, self.source_topic.encode()),
            (SOURCE_PARTITION, str(self.source_partition).encode()),
            (SOURCE_OFFSET, str(self.source_offset).encode()),
            (TIME, when.encode()),
        ]

    @classmethod
    def from_record(cls, key: bytes | None, value: bytes | None,
                    headers: Sequence[tuple[str, bytes]]) -> DeadLetter:
        """Tolerant of damaged headers: a dead letter must stay readable whatever it holds."""
        found = {name: raw.decode(errors="replace") for name, raw in headers}
        malformed: list[str] = []
        letter = cls(
            reason=found.get(REASON, "unknown"),
            detail=found.get(DETAIL, ""),
            source_topic=found.get(SOURCE_TOPIC, ""),
            source_partition=_int_or(found, SOURCE_PARTITION, malformed),
            source_offset=_int_or(found, SOURCE_OFFSET, malformed),
            key=key,
            value=value,
            time=_time_or_none(found, malformed),
        )
        if malformed:
            note = f"[malformed dead-letter headers: {', '.join(malformed)}]"
            letter = replace(letter, detail=f"{letter.detail} {note}".strip())
        return letter


def _int_or(found: dict[str, str], name: str, malformed: list[str]) -> int:
    text = found.get(name)
    try:
        return int(text) if text is not None else -1
    except ValueError:
        malformed.append(f"{name}={text!r}")
        return -1


def _time_or_none(found: dict[str, str], malformed: list[str]) -> datetime | None:
    text = found.get(TIME)
    try:
        return datetime.fromisoformat(text) if text is not None else None
    except ValueError:
        malformed.append(f"{TIME}={text!r}")
        return None
