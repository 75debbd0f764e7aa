"""A takeover completes a hanging transaction of its own writer with the coordinator's
decision, and refuses every other hanging transaction (reliability finding 1).

The state the Kafka 4.4 restart race leaves is built here on purpose, on a broker of the
test's own: the coordinator finished a transaction of the writer's ``transactional_id``
(commit or abort) but the events partition never got its marker, so the records stay
undecided there. ``scripts/hanging-race.py`` reproduces the race itself (SIGKILLs under
load, about one in ten restarts) for a check against the real thing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from ares import metrics
from ares.chaos.toxiproxy import free_port
from ares.config import Settings
from ares.devenv import kafka as dev_kafka
from ares.errors import AresError, IntegrityError
from ares.events.chain import seal_encoded, verify_chain
from ares.events.kafka import store as kafka_store
from ares.events.kafka.partition_writer import transactional_id
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent, StreamHead
from ares.tasks import wait_for
from ares.topics import COMMANDS, EVENTS, TopicPlan
from tests.support.kafka import (
    UNVERIFIED_TRANSACTIONS,
    applied_topics,
    leave_hanging_transaction,
)

STREAM = "agent-hung"
WAIT_S = 2.0
FOREVER_S = 1800.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of this module's own: it must accept a transactional batch for a partition
    the coordinator was not told of, which the shared broker rightly refuses."""
    root: Path = tmp_path_factory.mktemp("hanging-broker")
    layout = dev_kafka.KafkaLayout(root, port=free_port(), controller_port=free_port())
    try:
        # write_config's defaults: the single node the race happens on.
        dev_kafka.start(layout, dev_kafka.kafka_version(), 180.0, UNVERIFIED_TRANSACTIONS)
    except AresError as exc:
        pytest.fail(f"the test's broker did not start: {exc}", pytrace=False)
    try:
        yield layout.bootstrap
    finally:
        dev_kafka.stop(layout, 20.0)


@pytest.fixture
async def topics(broker: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    """Every ares topic, one partition each, under a prefix of the test's own."""
    settings = Settings(kafka_bootstrap=broker, request_timeout_s=15.0,
                        topic_prefix=f"hangfix-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=1) as plan:
        yield settings, plan


def _sealed(count: int) -> list[tuple[bytes, bytes]]:
    """Versions 1..count of STREAM as the writer would have sent them."""
    head, records = StreamHead(), []
    for n in range(1, count + 1):
        event, wire = seal_encoded(STREAM, head, NewEvent("test.step", "t", {"n": n}), n)
        head = StreamHead(event.version, event.hash)
        records.append((STREAM.encode(), wire))
    return records


async def _hang(settings: Settings, plan: TopicPlan, *, commit: bool) -> TopicPartition:
    """Two events of STREAM left undecided on events/0 by the partition writer's own id."""
    events = TopicPartition(plan.name(EVENTS), 0)
    await leave_hanging_transaction(
        settings.kafka_bootstrap, transactional_id(events.topic, 0), events, _sealed(2),
        TopicPartition(plan.name(COMMANDS), 0), commit=commit)
    scanner = await PartitionScanner.open(settings)
    try:
        assert await scanner.undecided(events) is not None, "the hang was not built"
    finally:
        await scanner.close()
    return events


def _completed(decision: str) -> float:
    return metrics.HANGING_TRANSACTIONS.labels(decision)._value.get()  # type: ignore[no-any-return]


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
async def test_a_takeover_completes_its_writers_hanging_transaction_as_decided(
    topics: tuple[Settings, TopicPlan], commit: bool, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings, plan = topics
    # The writer's own hanging transaction is completed at once, not after the grace that
    # other producers' transactions get: waiting would let a concurrent takeover erase the
    # coordinator's decision (seen in a chaos run after a broker restart).
    monkeypatch.setattr(kafka_store, "HANGING_TRANSACTION_WAIT_S", FOREVER_S)
    decision = "commit" if commit else "abort"
    before = _completed(decision)
    events = await _hang(settings, plan, commit=commit)

    with caplog.at_level(logging.WARNING, logger="ares.events.kafka.store"):
        store = await wait_for(KafkaEventStore.open(settings, topic=events.topic),
                                       FOREVER_S / 10)
    try:
        # The coordinator's decision stands: the acknowledged appends of a committed
        # transaction appear, those of an aborted one never do.
        found = await store.read(STREAM)
        assert [e.version for e in found] == ([1, 2] if commit else [])
        at = len(found)
        assert await store.append(STREAM, [NewEvent("test.step", "t", {"n": 9})], at) == at + 1
        verify_chain(await store.read(STREAM))
    finally:
        await store.close()
    assert _completed(decision) == before + 1
    assert any("hanging transaction" in r.getMessage() and f"with {decision}" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


async def test_a_hanging_transaction_whose_decision_is_gone_is_left_to_the_operator(
    topics: tuple[Settings, TopicPlan], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once anyone has re-initialised the writer's id, the coordinator no longer says what
    it decided: guessing could drop acknowledged appends or revive aborted ones."""
    monkeypatch.setattr(kafka_store, "HANGING_TRANSACTION_WAIT_S", WAIT_S)
    settings, plan = topics
    events = await _hang(settings, plan, commit=True)
    reinit = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap,
                              transactional_id=transactional_id(events.topic, 0))
    await reinit.start()  # init_transactions: the coordinator's state becomes Empty
    await reinit.stop()

    with pytest.raises(IntegrityError) as refused:
        await KafkaEventStore.open(settings, topic=events.topic)
    message = str(refused.value)
    assert "hanging) transaction" in message
    assert "state Empty" in message
    assert f"kafka-transactions.sh find-hanging / abort --topic {events.topic}" in message
