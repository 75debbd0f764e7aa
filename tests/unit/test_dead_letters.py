"""The shared dead-letter module: identities, reasons, ownership, what ``reject`` queues.

``DeadLetters.reject`` is pure bookkeeping (``flush`` is what talks to Kafka: the
integration fuzzer, tests/integration/test_fuzz_topics.py, covers it on the real broker).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka import dlq
from ares.events.kafka.dlq import DeadLetter, DeadLetters, letter_id, reason_of
from ares.events.wire.schemas import CodecError
from ares.topics import (
    ALERTS,
    BUDGET_LIMITS,
    BUDGETS,
    COMMANDS,
    EVENTS,
    HEARTBEATS,
    REPLIES,
    SCHEDULES,
    SNAPSHOTS,
    SUMMARIES,
    TOKENS,
    USAGE,
    load_topics,
)


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None = b"k"
    value: bytes | None = b"\x00bad"


def name(logical: str) -> str:
    return f"t1.{logical}"


def letters(service: str) -> DeadLetters:
    return DeadLetters(Settings(topic_prefix="t1."), name, service)


def test_the_identity_is_where_the_record_is() -> None:
    assert letter_id("ares.events", 3, 42) == "ares.events/3@42"
    letter = DeadLetter("bad_magic", "d", "ares.events", 3, 42, b"k", b"v")
    assert letter.id == "ares.events/3@42"
    assert (dlq.ID, b"ares.events/3@42") in letter.headers()


def test_a_dead_letter_read_back_keeps_its_identity() -> None:
    letter = DeadLetter("truncated", "cut", "x.ares.heartbeats", 1, 7, None, b"\xc3")
    again = DeadLetter.from_record(None, b"\xc3", letter.headers())
    assert (again.id, again.reason, again.value, again.key) == (letter.id, "truncated",
                                                                b"\xc3", None)
    assert dlq._identity(letter.headers()) == ("x.ares.heartbeats", "x.ares.heartbeats/1@7")


def test_an_older_letter_without_the_id_header_is_identified_by_its_source() -> None:
    old = [h for h in DeadLetter("r", "", "ares.commands", 0, 5, None, None).headers()
           if h[0] != dlq.ID]
    assert dlq._identity(old) == ("ares.commands", "ares.commands/0@5")
    assert dlq._identity([(dlq.SOURCE_TOPIC, b"t"), (dlq.SOURCE_OFFSET, b"x")]) is None
    assert dlq._identity([]) is None


def test_reasons_come_from_the_error() -> None:
    assert reason_of(CodecError("bad_magic", "no C3 01"), "x") == "bad_magic"
    assert reason_of(SchemaError("schema_mismatch: expected a Snapshot"), "x") \
        == "schema_mismatch"
    assert reason_of(ValueError("not JSON: Expecting value"), "invalid_limits") \
        == "invalid_limits"
    assert reason_of(ValueError("Bad: x"), "fallback") == "fallback"


def test_every_consumed_topic_has_exactly_one_dead_lettering_service() -> None:
    consumed = {COMMANDS, EVENTS, ALERTS, HEARTBEATS, SNAPSHOTS, SCHEDULES, SUMMARIES, USAGE,
                BUDGETS, BUDGET_LIMITS}
    assert set(dlq.OWNERS) == consumed
    assert TOKENS not in dlq.OWNERS  # read by clients only
    assert REPLIES not in dlq.OWNERS
    # The literal names of this layer are the topics of topics.yaml.
    assert consumed <= {spec.logical for spec in load_topics(Settings()).topics}
    assert dlq.DLQ == "ares.dlq"


@pytest.mark.parametrize(("service", "owned"), [
    (dlq.RUNTIME_MANAGER, {SNAPSHOTS, SCHEDULES, BUDGETS}),  # commands: in its transactions
    (dlq.REPLAY_READER, {EVENTS, ALERTS}),
    (dlq.HEALTH_CHECKER, {HEARTBEATS}),
    (dlq.COMPACTOR, {SUMMARIES}),
    (dlq.BUDGET_KEEPER, {USAGE, BUDGET_LIMITS}),
])
def test_a_service_owns_its_topics_under_the_environment_s_names(service: str,
                                                                 owned: set[str]) -> None:
    found = letters(service)
    assert found.owned == {name(t) for t in owned}
    assert found.dlq_topic == "t1.ares.dlq"
    assert found.transactional_id == f"t1.ares-dlq.{service}"


def test_reject_queues_a_record_once_and_counts_what_another_service_owns() -> None:
    mine = letters(dlq.HEALTH_CHECKER)
    beat = Record(name(HEARTBEATS), 2, 10)
    mine.reject(beat, "bad_magic", "x")
    mine.reject(beat, "bad_magic", "x")  # met again (a rebuilt lookback): still one
    assert (mine.pending, mine.queued) == (1, 1)
    mine.reject(Record(name(EVENTS), 2, 10), "truncated", "y")  # the replay reader's
    assert (mine.pending, mine.skipped) == (1, 1)


def test_a_letter_already_on_the_dlq_is_not_queued_again() -> None:
    mine = letters(dlq.BUDGET_KEEPER)
    record = Record(name(USAGE), 0, 3)
    mine._known.add(letter_id(record.topic, record.partition, record.offset))
    mine.reject(record, "undecodable", "x")
    assert (mine.pending, mine.queued, mine.repeated) == (0, 0, 1)


async def test_a_flush_with_nothing_queued_talks_to_no_broker() -> None:
    mine = DeadLetters(Settings(kafka_bootstrap="127.0.0.1:1"), name, dlq.COMPACTOR)
    assert await mine.flush()
    await mine.stop()
