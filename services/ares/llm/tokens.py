"""The records of ``ares.tokens`` and how to follow one agent's of them.

Shared by the producer (``ares.llm.kafka_telemetry``), the replay reader's
``GET /agents/{id}/tokens`` (Server-Sent Events) and ``ares agents tail --tokens``.

A record's key is the agent id, so all of an agent's streams are on one partition, in the
order they were produced; its value is ``TokenRecord.to_json()`` as compact JSON. The Kafka
offset of a record is the id a client resumes from (SSE ``Last-Event-ID``).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ares.config import Settings
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.events.kafka.retry import connect
from ares.events.kafka.routing import partition_for
from ares.llm.telemetry import (
    DELTA,
    END,
    RESTARTED,
    START,
    STREAM_ERROR,
    count_field,
    text_field,
)
from ares.tasks import stop_client

log = logging.getLogger(__name__)

KINDS = (START, RESTARTED, DELTA, END, STREAM_ERROR)
# Where a reader without a resume point starts: the retained records of the agent (the
# topic keeps about an hour), or only the ones produced after it opened.
FROM_BEGINNING = "beginning"
FROM_END = "end"
FROM_CHOICES = (FROM_BEGINNING, FROM_END)
_POLL_MS = 1000


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """One record of ``ares.tokens``: a stream's START/RESTARTED, DELTA, END or ERROR."""

    stream: str  # str(StreamId): "task_id/name/occurrence"
    agent_id: str
    task_id: str
    name: str
    occurrence: int
    incarnation: int
    kind: str
    seq: int  # 0-based per stream attempt: a client can tell a gap (a lost delivery)
    text: str  # DELTA: the text; ERROR: the error; else ""
    at: float  # epoch seconds when it was produced

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: Any) -> TokenRecord:
        """``ValueError`` when ``data`` is not a token record (a field missing, of the
        wrong type, an unknown kind, a stream id that does not match its parts)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"not a token record: a JSON object expected, got "
                             f"{type(data).__name__}")
        try:
            record = cls(stream=text_field(data, "stream"), agent_id=text_field(data, "agent_id"),
                         task_id=text_field(data, "task_id"), name=text_field(data, "name"),
                         occurrence=count_field(data, "occurrence"),
                         incarnation=count_field(data, "incarnation"),
                         kind=text_field(data, "kind"),
                         seq=count_field(data, "seq"), text=text_field(data, "text"),
                         at=_number(data, "at"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a token record: {type(e).__name__}: {e}") from None
        if record.kind not in KINDS:
            raise ValueError(f"not a token record: unknown kind {record.kind!r}")
        if record.stream != f"{record.task_id}/{record.name}/{record.occurrence}":
            raise ValueError(f"not a token record: stream {record.stream!r} does not match "
                             "task_id/name/occurrence")
        return record

    @classmethod
    def decode(cls, raw: bytes | None) -> TokenRecord:
        """A record's value as a ``TokenRecord``; ``ValueError`` when it is not one."""
        if raw is None:
            raise ValueError("not a token record: no value")
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ValueError(f"not a token record: not JSON ({e})") from None
        return cls.from_json(data)


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A record as read back, with its offset (the SSE event id)."""

    offset: int
    record: TokenRecord


class TokenTail:
    """One agent's token records, live, from its partition of ``ares.tokens``.

    A consumer of its own, in no group (assign + seek: it commits nothing and moves no one),
    read_uncommitted (the topic is not transactional: a delta is visible once written).
    Records of the other agents on the partition, and undecodable ones, are skipped.
    """

    def __init__(self, consumer: AIOKafkaConsumer, tp: TopicPartition, agent_id: str) -> None:
        self._consumer = consumer
        self.tp = tp
        self.agent_id = agent_id
        self._key = agent_id.encode()
        self._buffer: deque[TokenEvent] = deque()
        self.skipped = 0  # undecodable records of this agent

    @classmethod
    async def open(cls, settings: Settings, topic: str, agent_id: str, *,
                   after: int | None = None, start: str = FROM_BEGINNING,
                   timeout_s: float | None = None) -> TokenTail:
        """Positioned after offset ``after`` (a resume), else at ``start``. An offset no
        longer retained (or past the end: another topic's) reads from the earliest one
        retained. ``UnavailableError`` when the broker does not answer within
        ``timeout_s`` (default ``ARES_RETRY_TIMEOUT_S``) or the topic does not exist."""
        if start not in FROM_CHOICES:
            raise ValueError(f"start must be one of {FROM_CHOICES}, got {start!r}")
        what = f"connecting the token reader of {topic}"
        consumer = await connect(
            lambda: new_consumer(settings, isolation_level="read_uncommitted",
                                 auto_offset_reset="earliest"),
            what=what, settings=settings, timeout_s=timeout_s)
        try:
            partitions = await topic_partitions(consumer, topic)
            # The producer's default partitioner (murmur2 of the key over every partition),
            # as for every per-agent topic of ares.
            tp = TopicPartition(topic, partition_for(agent_id, len(partitions)))
            consumer.assign([tp])
            if after is not None:
                consumer.seek(tp, after + 1)
            elif start == FROM_END:
                await consumer.seek_to_end(tp)
            else:
                await consumer.seek_to_beginning(tp)
            await consumer.position(tp)  # "from end" means from now, not from the 1st fetch
        except KafkaError as exc:
            await consumer.stop()
            raise translate(exc, what) from exc
        except BaseException:
            await consumer.stop()
            raise
        return cls(consumer, tp, agent_id)

    async def next(self) -> TokenEvent:
        """The agent's next record; waits for one. Safe to cancel (``ares.tasks.wait_for``):
        fetched records stay in the consumer until a later call takes them."""
        while not self._buffer:
            batch = await self._consumer.getmany(self.tp, timeout_ms=_POLL_MS)
            # No await from here to the return: a cancellation never loses a record.
            for raw in batch.get(self.tp, ()):
                if raw.key != self._key:
                    continue
                try:
                    record = TokenRecord.decode(raw.value)
                except ValueError as exc:
                    self.skipped += 1
                    log.warning("%s offset %d skipped: %s", self.tp, raw.offset, exc)
                    continue
                self._buffer.append(TokenEvent(raw.offset, record))
        return self._buffer.popleft()

    async def close(self) -> None:
        await stop_client(self._consumer)



def _number(data: Mapping[str, Any], name: str) -> float:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number")
    return float(value)
