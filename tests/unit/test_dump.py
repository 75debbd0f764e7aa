"""The kcat dump framing (``ares.replay_reader.dump``): records of any bytes survive it, and
a broken frame is named by its byte."""

from __future__ import annotations

import io

import pytest
from aiokafka import TopicPartition

from ares.replay_reader.dump import DumpError, DumpSource, read_dump


def frame(topic: str, partition: int, offset: int, key: bytes | None,
          value: bytes | None) -> bytes:
    """What kcat writes for one record with -f 'ares-dump-1 %t %p %o %K %S\\n%k%s\\n'."""
    klen = -1 if key is None else len(key)
    vlen = -1 if value is None else len(value)
    return (f"ares-dump-1 {topic} {partition} {offset} {klen} {vlen}\n".encode()
            + (key or b"") + (value or b"") + b"\n")


BINARY = bytes(range(256)) + b"\n\nares-dump-1 x 0 0 0 0\n"  # newlines and a fake header


def test_binary_values_and_nulls_survive() -> None:
    data = (frame("ares.events", 1, 7, b"agent-1", BINARY)
            + frame("ares.events", 0, 3, None, b"")
            + frame("ares.snapshots", 1, 0, b"agent-1", None))
    records = list(read_dump(io.BytesIO(data)))
    assert [(r.topic, r.partition, r.offset, r.key, r.value) for r in records] == [
        ("ares.events", 1, 7, b"agent-1", BINARY),
        ("ares.events", 0, 3, None, b""),
        ("ares.snapshots", 1, 0, b"agent-1", None),
    ]


async def test_the_source_serves_each_partition_in_offset_order() -> None:
    data = b"".join(frame("ares.events", 0, o, b"k", str(o).encode()) for o in (9, 2, 5))
    source = DumpSource(read_dump(io.BytesIO(data)))
    tp = TopicPartition("ares.events", 0)
    assert await source.partitions_to_scan("ares.events", None) == [0]
    assert (await source.start_offset(tp), await source.end(tp)) == (2, 10)
    assert [r.offset async for r in source.records(tp, 3)] == [5, 9]
    assert [r.offset async for r in source.records(tp, 0, 9)] == [2, 5]
    assert await source.end(TopicPartition("ares.events", 4)) == 0


@pytest.mark.parametrize(("data", "says"), [
    (frame("t", 0, 0, b"k", b"value")[:-3], "the value has 3 of its 5 bytes"),
    (frame("t", 0, 0, b"k", b"value")[:-1] + b"X", "does not end where its lengths say"),
    (b"agent-1\tsome value\n", "expected 'ares-dump-1 TOPIC PARTITION OFFSET"),
    (b"ares-dump-1 t zero 0 1 1\nkv\n", "must be integers"),
    (b"ares-dump-1 t 0 0 1", "ends early or is too long"),
])
def test_a_broken_frame_is_named(data: bytes, says: str) -> None:
    good = frame("t", 0, 0, b"k", b"v")
    with pytest.raises(DumpError) as caught:
        list(read_dump(io.BytesIO(good + data), "log.dump"))
    assert str(caught.value).startswith(f"log.dump, byte {len(good)}: ")  # the broken frame's
    assert says in str(caught.value)
