"""Which partition a stream lives on: murmur2 of the key, as the Java client and aiokafka do.

librdkafka's default differs (consistent_random): its users must set
``partitioner=murmur2_random`` or their commands land on the wrong owner (who forwards them).
"""

from __future__ import annotations

from functools import lru_cache

from aiokafka.partitioner import murmur2


# murmur2 is pure Python in aiokafka, paid on every append and command; a fleet's streams
# are long-lived, so the answers are cached (bounded: ~100 bytes an entry).
@lru_cache(maxsize=1 << 16)
def partition_for(stream_id: str, partitions: int) -> int:
    if partitions <= 0:
        raise ValueError("a topic has at least one partition")
    return int(murmur2(stream_id.encode()) & 0x7FFFFFFF) % partitions
