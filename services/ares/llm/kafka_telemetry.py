"""``LlmTelemetry`` on Kafka: usage records on ``ares.usage``, token streams on ``ares.tokens``.

One idempotent producer (acks=all), not transactional: what a provider answered was paid
whether or not the step commits, and a delta must be visible as it arrives, not at a commit.
Nothing here raises into the agent: a raised error would crash the step, and its re-run
would pay the provider again. A record that could not be published is logged (a usage
record in full, so the spend stays on record) and counted
(``ares_llm_telemetry_failures_total``).

Token records (``ares.llm.tokens.TokenRecord``) are keyed by agent id: one agent's
records are on one partition, in order (one producer; idempotence keeps the order through
retries). Deltas are sent without awaiting each delivery; ``end()`` awaits them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from aiokafka import AIOKafkaProducer
from prometheus_client import Counter

from ares.config import Settings
from ares.events.kafka.retry import connect
from ares.llm.telemetry import (
    DELTA,
    END,
    RESTARTED,
    START,
    STREAM_ERROR,
    StreamId,
    TokenStream,
    UsageRecord,
)
from ares.llm.tokens import TokenRecord
from ares.topics import TOKENS, USAGE, TopicPlan

log = logging.getLogger(__name__)

TELEMETRY_FAILURES = Counter(
    "ares_llm_telemetry_failures_total",
    "LLM telemetry records not published (broker unreachable after the producer's retries), "
    "by record: usage (logged in full) or tokens", ["record"])


class KafkaTelemetry:
    """The runtime manager's ``LlmTelemetry``: ``start()`` before agents run, ``stop()``
    after (both idempotent)."""

    def __init__(self, settings: Settings, plan: TopicPlan) -> None:
        self.settings = settings
        self.usage_topic = plan.name(USAGE)
        self.tokens_topic = plan.name(TOKENS)
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    def _new_producer(self) -> AIOKafkaProducer:
        settings = self.settings
        return AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True,
            **settings.kafka_options(), acks="all",
            # Deltas arrive a few ms apart: a short linger batches them without delaying a
            # viewer noticeably.
            linger_ms=5, request_timeout_ms=int(settings.request_timeout_s * 1000))

    async def start(self) -> None:
        """Connect (retried for ARES_RETRY_TIMEOUT_S, then ``UnavailableError``)."""
        async with self._lock:
            if self._producer is None:
                self._producer = await connect(self._new_producer, settings=self.settings,
                                               what="starting the LLM telemetry producer")

    async def stop(self) -> None:
        """Flush what is pending and close."""
        async with self._lock:
            producer, self._producer = self._producer, None
            if producer is not None:
                await producer.stop()

    async def flush(self) -> None:
        """Wait until every record sent so far is delivered (or failed)."""
        await self._started().flush()

    def _started(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("the LLM telemetry producer is not started")
        return self._producer

    async def usage(self, record: UsageRecord) -> None:
        """Publish and await delivery: once it returns, what was paid is on record."""
        value = record.to_json()
        try:
            delivery = await self._started().send(
                self.usage_topic, value=_encode(value), key=record.tenant.encode())
            await delivery
        except Exception as exc:  # anything: the agent's step must not crash over it
            TELEMETRY_FAILURES.labels("usage").inc()
            log.error("usage record not published to %s (%s: %s): %s", self.usage_topic,
                      type(exc).__name__, exc, json.dumps(value, sort_keys=True))

    async def open_stream(self, stream: StreamId, *, incarnation: int,
                          restarted: bool) -> TokenStream:
        opened = _KafkaTokenStream(self, stream, incarnation)
        await opened.publish(RESTARTED if restarted else START, "")
        return opened


class _KafkaTokenStream:
    """One attempt's stream: its records numbered from 0 (``seq``)."""

    def __init__(self, telemetry: KafkaTelemetry, stream: StreamId, incarnation: int) -> None:
        self._telemetry = telemetry
        self._stream = stream
        self._name = str(stream)
        self._key = stream.agent_id.encode()
        self._incarnation = incarnation
        self._seq = 0
        self._pending: set[asyncio.Future[Any]] = set()
        self._failed = False
        self._ended = False

    async def delta(self, text: str) -> None:
        await self.publish(DELTA, text)

    async def end(self, error: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        await self.publish(STREAM_ERROR if error else END, error or "")
        if self._pending:
            await asyncio.wait(set(self._pending))

    async def publish(self, kind: str, text: str) -> None:
        """Send without awaiting the delivery (order: one producer, one key, idempotence);
        ``_delivered`` notes a failure. After the first failure the stream is abandoned:
        a viewer tells the gap by ``seq``."""
        if self._failed:
            return
        stream = self._stream
        record = TokenRecord(stream=self._name, agent_id=stream.agent_id,
                             task_id=stream.task_id, name=stream.name,
                             occurrence=stream.occurrence, incarnation=self._incarnation,
                             kind=kind, seq=self._seq, text=text, at=time.time())
        self._seq += 1
        try:
            delivery = await self._telemetry._started().send(
                self._telemetry.tokens_topic, value=record.encode(), key=self._key)
        except Exception as exc:  # never fail the step over a live view
            self._failure(exc)
            return
        self._pending.add(delivery)
        delivery.add_done_callback(self._delivered)

    def _delivered(self, delivery: asyncio.Future[Any]) -> None:
        self._pending.discard(delivery)
        if not delivery.cancelled() and (exc := delivery.exception()) is not None:
            self._failure(exc)

    def _failure(self, exc: BaseException) -> None:
        if self._failed:
            return  # one line and one count per stream, not one per delta
        self._failed = True
        TELEMETRY_FAILURES.labels("tokens").inc()
        log.error("token stream %s of %s not published to %s (%s: %s); its further records "
                  "are dropped", self._name, self._stream.agent_id,
                  self._telemetry.tokens_topic, type(exc).__name__, exc)


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
