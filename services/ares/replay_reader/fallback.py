"""The projections computed from the log itself: what reads answer while PostgreSQL is down.

Slower (a scan of the stream, or of the whole log for a listing) but exact: the same pure
code as the projector (``projection.project``, the runtime's genealogy), so an answer from
here equals the one PostgreSQL would give once the projector has caught up.
"""

from __future__ import annotations

from aiokafka import TopicPartition

from ares.events.model import Event
from ares.lifecycle import events as ev
from ares.lifecycle.genealogy import Incarnation, genealogy
from ares.replay_reader.kafka_source import KafkaStreamReader, decode_or_skip
from ares.replay_reader.projection import AgentRow, Located, project

PAGE = 10_000


async def stream_events(reader: KafkaStreamReader, stream_id: str) -> list[Event]:
    """Every event of one stream, in version order."""
    events: list[Event] = []
    while True:
        page = await reader.read(stream_id, events[-1].version + 1 if events else 1, PAGE)
        events.extend(page)
        if len(page) < PAGE:
            return events


async def agent_from_log(reader: KafkaStreamReader, agent_id: str) -> AgentRow | None:
    events = await stream_events(reader, agent_id)
    return project([Located(0, 0, e) for e in events], {}).agents.get(agent_id)


async def genealogy_from_log(reader: KafkaStreamReader,
                             agent_id: str) -> list[Incarnation] | None:
    """None when the stream is no agent's (no agent.started)."""
    events = await stream_events(reader, agent_id)
    if not any(e.type == ev.AGENT_STARTED for e in events):
        return None
    return genealogy(events)


async def agents_from_log(reader: KafkaStreamReader) -> dict[str, AgentRow]:
    """Every agent of the log: one scan of every partition."""
    rows: dict[str, AgentRow] = {}
    async with reader.lease() as scanner:
        for partition in range(reader.partitions):
            tp = TopicPartition(reader.topic, partition)
            chunk: list[Located] = []
            async for record in scanner.records(tp, await scanner.start_offset(tp)):
                event = decode_or_skip(record)
                if event is not None:
                    chunk.append(Located(partition, record.offset, event))
                if len(chunk) >= PAGE:
                    rows.update(_fold(chunk, rows))
                    chunk = []
            rows.update(_fold(chunk, rows))
    return rows


def _fold(chunk: list[Located], rows: dict[str, AgentRow]) -> dict[str, AgentRow]:
    streams = {x.event.stream_id for x in chunk}
    return project(chunk, {s: rows[s] for s in streams if s in rows}).agents
