"""A log dumped by standard Kafka tooling, read back as the audit reads a topic.

An auditor who may not run ares next to the brokers dumps the topics with ``kcat``, in a
framing that survives binary values (an Avro body holds every byte, the line separator
included, so one record per line cannot work)::

    kcat -C -b BROKER -t ares.events -e -q -X isolation.level=read_committed \\
         -f 'ares-dump-1 %t %p %o %K %S\\n%k%s\\n' > events.dump

Each record is a header line — the format tag, topic, partition, offset, key length and
value length (``-1`` for null) — then exactly that many key and value bytes and a newline.
Several dumps may be concatenated (``ares.snapshots`` too, for the truncation checks).
``read_dump`` checks every frame and names the byte where one is broken; ``DumpSource``
serves the records to the audit as ``RangeScanner`` serves a topic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import BinaryIO

from aiokafka import TopicPartition

from ares.errors import AresError

FORMAT_TAG = b"ares-dump-1"
KCAT_FORMAT = r"ares-dump-1 %t %p %o %K %S\n%k%s\n"
_MAX_HEADER = 512  # a topic name is at most 249 characters


class DumpError(AresError):
    """The dump is not in the documented framing; the message says where."""


@dataclass(frozen=True, slots=True)
class DumpedRecord:
    """A record as a consumer saw it: what the audit reads of a ``ConsumerRecord``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_dump(stream: BinaryIO, name: str = "the dump") -> Iterable[DumpedRecord]:
    """Every record of a dump in kcat framing (``KCAT_FORMAT``), in file order."""
    position = 0
    while True:
        header = stream.readline(_MAX_HEADER)
        if not header:
            return
        where = f"{name}, byte {position}"
        if not header.endswith(b"\n"):
            raise DumpError(f"{where}: a record header line ends early or is too long")
        fields = header[:-1].split(b" ")
        if len(fields) != 6 or fields[0] != FORMAT_TAG:
            shown = header[:60].decode("utf-8", errors="replace")
            raise DumpError(f"{where}: expected '{FORMAT_TAG.decode()} TOPIC PARTITION "
                            f"OFFSET KEYLEN VALUELEN', got {shown!r} — dump with "
                            f"kcat -f '{KCAT_FORMAT}'")
        try:
            partition, offset, key_len, value_len = (int(f) for f in fields[2:])
        except ValueError:
            raise DumpError(f"{where}: partition, offset and lengths must be integers") from None
        key = _take(stream, key_len, where, "key")
        value = _take(stream, value_len, where, "value")
        if stream.read(1) != b"\n":
            raise DumpError(f"{where}: the record does not end where its lengths say "
                            "(a value changed in length, or not this framing)")
        position += len(header) + max(key_len, 0) + max(value_len, 0) + 1
        yield DumpedRecord(fields[1].decode(), partition, offset, key, value)


def _take(stream: BinaryIO, length: int, where: str, what: str) -> bytes | None:
    if length < 0:
        return None
    data = stream.read(length)
    if len(data) != length:
        raise DumpError(f"{where}: the {what} has {len(data)} of its {length} bytes: "
                        "the dump ends early")
    return data


class DumpSource:
    """The records of a dump, by topic partition, served as ``RangeScanner`` serves a
    topic (offsets as dumped; a record missing from the dump is a gap the audit reports)."""

    def __init__(self, records: Iterable[DumpedRecord]) -> None:
        self._records: dict[TopicPartition, list[DumpedRecord]] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            self._records.setdefault(tp, []).append(record)
        for found in self._records.values():
            found.sort(key=lambda r: r.offset)

    def topics(self) -> set[str]:
        return {tp.topic for tp in self._records}

    async def partitions_to_scan(self, topic: str, streams: set[str] | None) -> list[int]:
        """Every partition of ``topic`` in the dump (its partition count is unknown here,
        so a named stream's records are found by key in all of them)."""
        return sorted(tp.partition for tp in self._records if tp.topic == topic)

    async def start_offset(self, tp: TopicPartition) -> int:
        found = self._records.get(tp)
        return found[0].offset if found else 0

    async def end(self, tp: TopicPartition) -> int:
        found = self._records.get(tp)
        return found[-1].offset + 1 if found else 0

    async def records(self, tp: TopicPartition, start: int,
                      end: int | None = None) -> AsyncIterator[DumpedRecord]:
        for record in self._records.get(tp, ()):
            if record.offset >= start and (end is None or record.offset < end):
                yield record
