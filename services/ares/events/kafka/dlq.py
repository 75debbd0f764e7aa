"""Dead letters: rejected input kept whole, with the reason, on ``ares.dlq``.

The record's key and value are the original bytes; headers say why and where it came from,
so `ares events dump --topic ares.dlq` (or any Kafka tool) can show and replay it.

Every dead letter has a deterministic identity, its source record's ``topic/partition@offset``
(the ``ares.dlq.id`` header), and every consumed topic has ONE service that dead-letters
it (``OWNERS``; the others skip and count what they cannot read). ``DeadLetters`` is that
service's writer: a transactional producer whose ``transactional_id`` is the same for
every instance of the service (``<prefix>ares-dlq.<service>``), and an index of the
identities already on ``ares.dlq``, caught up after every ``init_transactions``. A letter
whose identity is in the index is not written again, so a record is dead-lettered once
however often it is re-read (a restart, a rebuilt state, a rebalance) and however many
instances of the service read it: an instance that starts a batch of letters fenced the
others (their open batch is aborted, their next commit fails) and reads what they
committed before writing its own (docs/operations.md "Dead letters").
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka
from prometheus_client import Counter

from ares import metrics
from ares.config import Settings
from ares.errors import AresError
from ares.events.kafka.reader import topic_partitions
from ares.events.model import utc_now

REASON = "ares.dlq.reason"
DETAIL = "ares.dlq.detail"
SOURCE_TOPIC = "ares.dlq.source.topic"
SOURCE_PARTITION = "ares.dlq.source.partition"
SOURCE_OFFSET = "ares.dlq.source.offset"
TIME = "ares.dlq.time"
ID = "ares.dlq.id"
SERVICE = "ares.dlq.service"
MAX_DETAIL = 2000

log = logging.getLogger(__name__)

# The one service that dead-letters each consumed topic (by logical name). Why each:
# docs/operations.md "Dead letters". ares.tokens and ares.replies are read by clients
# only (a live view, a command's round trip), never by a service: nothing dead-letters them.
# The logical topic names (ares.topics, which this layer does not import).
COMMANDS, SNAPSHOTS, SCHEDULES, BUDGETS = ("ares.commands", "ares.snapshots", "ares.schedules",
                                           "ares.budgets")
EVENTS, ALERTS, HEARTBEATS, SUMMARIES = ("ares.events", "ares.alerts", "ares.heartbeats",
                                         "ares.summaries")
USAGE, BUDGET_LIMITS, DLQ = "ares.usage", "ares.budget-limits", "ares.dlq"
RUNTIME_MANAGER = "runtime-manager"
HEALTH_CHECKER = "health-checker"
COMPACTOR = "compactor"
REPLAY_READER = "replay-reader"
BUDGET_KEEPER = "budget-keeper"
OWNERS: dict[str, str] = {
    COMMANDS: RUNTIME_MANAGER,  # in the command's own transaction (command_handler)
    SNAPSHOTS: RUNTIME_MANAGER,
    SCHEDULES: RUNTIME_MANAGER,
    BUDGETS: RUNTIME_MANAGER,
    EVENTS: REPLAY_READER,
    ALERTS: REPLAY_READER,
    HEARTBEATS: HEALTH_CHECKER,
    SUMMARIES: COMPACTOR,
    USAGE: BUDGET_KEEPER,
    BUDGET_LIMITS: BUDGET_KEEPER,
}

LETTERS = Counter("ares_dead_letters_by_topic_total",
                  "Records this process sent to ares.dlq, by source topic and reason",
                  ["topic", "reason"])
REPEATS = Counter("ares_dead_letters_repeated_total",
                  "Rejected records met again and not dead-lettered twice (already in "
                  "ares.dlq), by source topic", ["topic"])
SKIPPED = Counter("ares_rejected_records_skipped_total",
                  "Rejected records of a topic another service dead-letters (skipped "
                  "here), by source topic and reason", ["topic", "reason"])

_CODE = re.compile(r"^([a-z][a-z0-9_]{1,40}):\s")


def letter_id(topic: str, partition: int, offset: int) -> str:
    """A dead letter's identity: where its record is. The same every time it is met."""
    return f"{topic}/{partition}@{offset}"


def reason_of(exc: BaseException, default: str) -> str:
    """The short code of a rejection: the error's ``reason``, else a leading ``code: ``
    of its message (the codec's convention), else ``default``."""
    found = getattr(exc, "reason", None)
    if isinstance(found, str) and found:
        return found
    match = _CODE.match(str(exc))
    return match.group(1) if match else default


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
            (ID, self.id.encode()),
        ]

    @property
    def id(self) -> str:
        return letter_id(self.source_topic, self.source_partition, self.source_offset)

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


class _Record(Protocol):
    """What a rejected record needs: an aiokafka ``ConsumerRecord`` has it."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


# ``reject(record, reason, detail)``: how a reader hands over a record it cannot use.
Reject = Callable[[_Record, str, str], None]
INDEX_WAIT_S = 10.0
FLUSH_ATTEMPTS = 5


class DeadLetters:
    """One service's dead letters: ``reject`` queues, ``flush`` writes each once.

    A reader calls ``reject(record, reason, detail)`` for every record it cannot use and
    goes on; ``flush()`` (before the reader records its progress anywhere) writes what is
    queued and not yet on ``ares.dlq``. A record of a topic the service does not own
    (``OWNERS``) is only counted and logged: its owner dead-letters it.

    Once, soundly: every instance of the service writes with the same ``transactional_id``,
    so an instance's ``init_transactions`` fences the others (their open batch is aborted,
    their next send or commit fails, and they start over: init, catch up, filter). After
    its own init an instance reads ``ares.dlq`` (read_committed, waiting until nothing
    undecided hides a letter) and drops every queued letter whose identity is there. So
    between two fences exactly one instance writes, and it has read everything the others
    committed. A restart is a new instance of the same kind.
    """

    def __init__(self, settings: Settings, name: Callable[[str], str], service: str) -> None:
        """``name``: a logical topic's name in this environment (``TopicPlan.name``)."""
        self.settings = settings
        self.service = service
        self.dlq_topic = name(DLQ)
        self.owned = frozenset(name(t) for t, owner in OWNERS.items()
                               if owner == service and t != COMMANDS)
        self.transactional_id = f"{settings.topic_prefix}ares-dlq.{service}"
        self._pending: dict[str, DeadLetter] = {}
        self._known: set[str] = set()  # identities on ares.dlq (of the owned topics)
        self._positions: dict[TopicPartition, int] = {}
        self._tps: list[TopicPartition] = []
        self._producer: AIOKafkaProducer | None = None
        self._reader: AIOKafkaConsumer | None = None
        self._ends: AIOKafkaConsumer | None = None  # read_uncommitted: the high watermarks
        self._lock = asyncio.Lock()
        # Counters (tests, logs); the Prometheus ones are per topic.
        self.sent = 0  # written to ares.dlq
        self.queued = 0  # new letters queued (not known to be on ares.dlq when met)
        self.repeated = 0  # met again, already on ares.dlq: not written twice
        self.skipped = 0  # of topics another service dead-letters

    def owns(self, topic: str) -> bool:
        return topic in self.owned

    @property
    def pending(self) -> int:
        return len(self._pending)

    def reject(self, record: _Record, reason: str, detail: str) -> None:
        """Queue ``record`` for ``ares.dlq`` (``flush`` writes it), or count it when
        another service owns its topic. Never raises: the reader goes on."""
        if record.topic not in self.owned:
            self.skipped += 1
            SKIPPED.labels(record.topic, reason).inc()
            log.debug("%s: skipping unusable record %s/%d@%d (%s: %s); %s dead-letters it",
                      self.service, record.topic, record.partition, record.offset, reason,
                      detail[:200], _owner_of(record.topic))
            return
        detail = detail.removeprefix(f"{reason}: ")  # str() of a codec error repeats it
        letter = DeadLetter(reason, detail, record.topic, record.partition, record.offset,
                            record.key, record.value)
        if letter.id in self._known:
            self.repeated += 1
            REPEATS.labels(record.topic).inc()
            return
        if letter.id not in self._pending:
            self.queued += 1
            log.warning("%s: dead letter from %s/%d@%d: %s: %s", self.service, record.topic,
                        record.partition, record.offset, reason, detail[:200])
        self._pending[letter.id] = letter

    async def start(self) -> None:
        """Connect now and load the index of what ``ares.dlq`` holds, so that ``reject``
        already knows the letters written before (a restart): optional, ``flush`` does it
        when first needed. A broker failure here is only logged."""
        async with self._lock:
            try:
                await self._producer_ready()
            except (kafka.KafkaError, AresError, OSError, TimeoutError) as exc:
                log.warning("%s: dead letters not connected yet (%s): retried when needed",
                            self.service, exc)
                await self._reset()

    async def flush(self) -> bool:
        """Write every queued letter not on ``ares.dlq`` yet; True when none is left
        queued. Retries a few times (a fence is answered at once: init, catch up, retry);
        on a broker failure it logs, keeps the letters queued and returns False."""
        async with self._lock:
            attempt = 0
            while self._pending:
                try:
                    await self._write()
                except kafka.ProducerFenced:
                    log.info("%s: dead letters fenced by another instance: catching up",
                             self.service)
                    await self._reset()
                    await asyncio.sleep(random.uniform(0, 0.1))  # no lockstep with it
                except (kafka.KafkaError, AresError, OSError, TimeoutError) as exc:
                    await self._reset()
                    attempt += 1
                    if attempt >= FLUSH_ATTEMPTS:
                        log.warning("%s: %d dead letter(s) not written yet (%s): kept, "
                                    "retried at the next flush", self.service,
                                    len(self._pending), exc)
                        return False
                    await asyncio.sleep(min(0.2 * 2 ** attempt, 2.0))
            return True

    # -- the writer ---------------------------------------------------------------------

    async def _write(self) -> None:
        producer = await self._producer_ready()
        letters = []
        for letter_key, letter in list(self._pending.items()):
            if letter_key in self._known:
                self.repeated += 1
                REPEATS.labels(letter.source_topic).inc()
                del self._pending[letter_key]
            else:
                letters.append(letter)
        if not letters:
            return
        await producer.begin_transaction()
        try:
            futures = []
            for letter in letters:
                future = await producer.send(self.dlq_topic, letter.value or b"",
                                             key=letter.key,
                                             headers=_with_service(letter.headers(),
                                                                   self.service))
                future.add_done_callback(_retrieved)  # a fenced batch fails them all
                futures.append(future)
            await asyncio.gather(*futures)
            await producer.commit_transaction()
        except BaseException:
            await self._reset()  # an open transaction is aborted by the next init
            raise
        for letter in letters:
            self._known.add(letter.id)
            self._pending.pop(letter.id, None)
            LETTERS.labels(letter.source_topic, letter.reason).inc()
            metrics.DEAD_LETTERS.labels(letter.reason).inc()
        self.sent += len(letters)

    async def _producer_ready(self) -> AIOKafkaProducer:
        """The producer, initialised (fencing the service's other instances), and the
        index caught up with everything committed before that."""
        if self._producer is not None:
            return self._producer
        producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            transactional_id=self.transactional_id, enable_idempotence=True, acks="all",
            linger_ms=5, max_request_size=max(4 * self.settings.max_record_bytes,
                                              2 * 1_048_576),
            request_timeout_ms=int(self.settings.request_timeout_s * 1000),
            **self.settings.kafka_options())
        await producer.start()  # init_transactions: the fence
        self._producer = producer
        try:
            await self._catch_up()
        except BaseException:
            await self._reset()
            raise
        return producer

    async def _catch_up(self) -> None:
        """Read ``ares.dlq`` from where the index stands to its end, once nothing undecided
        (a transaction still open) hides a committed letter."""
        if self._reader is None:
            self._reader = _consumer(self.settings, "read_committed")
            self._ends = _consumer(self.settings, "read_uncommitted")
            await self._reader.start()
            await self._ends.start()
        assert self._ends is not None
        reader = self._reader
        if not self._tps:
            self._tps = [TopicPartition(self.dlq_topic, p)
                         for p in sorted(await topic_partitions(reader, self.dlq_topic))]
        tps = self._tps
        reader.assign(tps)
        for tp in tps:
            reader.seek(tp, self._positions.get(tp, 0))
        high = await self._ends.end_offsets(tps)
        deadline = time.monotonic() + INDEX_WAIT_S
        while True:
            stable = await reader.end_offsets(tps)
            if all(stable[tp] >= high[tp] for tp in tps):
                break
            if time.monotonic() > deadline:
                raise kafka.KafkaTimeoutError(
                    f"{self.dlq_topic}: an open transaction holds the end of the log")
            await asyncio.sleep(0.05)
        while [tp for tp in tps if await reader.position(tp) < stable[tp]]:
            batch = await reader.getmany(*tps, timeout_ms=500)
            for records in batch.values():
                for record in records:
                    found = _identity(record.headers)
                    if found is not None and found[0] in self.owned:
                        self._known.add(found[1])
        for tp in tps:
            self._positions[tp] = await reader.position(tp)

    async def _reset(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception as exc:  # a fenced or broken producer may fail to close
                log.debug("%s: closing the dead-letter producer: %s", self.service, exc)

    async def stop(self) -> None:
        await self._reset()
        for consumer in (self._reader, self._ends):
            if consumer is not None:
                await consumer.stop()
        self._reader = self._ends = None


def _consumer(settings: Settings, isolation_level: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, isolation_level=isolation_level,
        enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=50,
        max_partition_fetch_bytes=8 * 1_048_576,
        request_timeout_ms=int(settings.request_timeout_s * 1000),
        **settings.kafka_options())


def _retrieved(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()


def _with_service(headers: list[tuple[str, bytes]], service: str) -> list[tuple[str, bytes]]:
    return [*headers, (SERVICE, service.encode())]


def _identity(headers: Iterable[tuple[str, bytes]]) -> tuple[str, str] | None:
    """(source topic, identity) of a dead letter from its headers; None if it has none."""
    found: dict[str, bytes] = dict(headers)
    try:
        topic = found[SOURCE_TOPIC].decode()
        if ID in found:
            return topic, found[ID].decode()
        return topic, letter_id(topic, int(found[SOURCE_PARTITION]),
                                int(found[SOURCE_OFFSET]))
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def _owner_of(topic: str) -> str:
    for name, owner in OWNERS.items():
        if topic.endswith(name):
            return owner
    return "nobody"
