"""The webhook sink: every alert on ``ares.alerts`` posted as JSON to a paging system.

``WebhookForwarder`` reads ``ares.alerts`` in its own consumer group
(``<prefix>ares-alert-webhook``) and commits an alert's offset only once it is delivered or
given up, so a restart re-posts at most the alerts in flight: delivery is at least once and
the alert ``id`` (deterministic for the checker's alerts) lets the receiver deduplicate. A
partition the group has no offset for yet starts ``BACKFILL_S`` before the forwarder did:
deploying the sink neither pages 30 days of history nor misses what was raised while it
was joining its group.

``WebhookSink.post`` retries connection errors, timeouts, 5xx, 408 and 429 (honouring a
numeric Retry-After) with exponential backoff and full jitter; any other 4xx is the
receiver refusing the alert and is not retried. The URL is a secret (Slack-style hooks
carry their token in the path): it is never logged, only ``scheme://host:port``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.reader import new_consumer
from ares.health_checker.alerts import alert_json, decode_alert, seek_to_time
from ares.health_checker.metrics import HealthMetrics
from ares.lifecycle.backoff import BackoffPolicy
from ares.tasks import stop_client

log = logging.getLogger(__name__)
RETRIED_STATUS = frozenset({408, 425, 429})
BACKFILL_S = 60.0
DEFAULT_BACKOFF = BackoffPolicy(initial_s=0.5, multiplier=2.0, max_s=30.0,
                                first_immediate=False)


def redacted(url: str) -> str:
    """What of a webhook URL may appear in logs: scheme, host and port."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/***"


class WebhookSink:
    def __init__(self, url: str, *, attempts: int = 8, timeout_s: float = 10.0,
                 backoff: BackoffPolicy = DEFAULT_BACKOFF,
                 rand: Callable[[], float] = random.random,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._url = url
        self.target = redacted(url)
        self._attempts = attempts
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._backoff = backoff
        self._rand = rand
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, payload: Mapping[str, Any]) -> bool:
        """Deliver ``payload``; False once it is refused or the attempts are spent."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        what = f"alert {payload.get('id')} ({payload.get('kind')}) to {self.target}"
        for attempt in range(1, self._attempts + 1):
            retry_after: float | None = None
            try:
                async with self._session.post(self._url, json=dict(payload)) as response:
                    status = response.status
                    if status < 300:
                        return True
                    retry_after = _retry_after(response.headers.get("Retry-After"))
                problem = f"HTTP {status}"
                if 400 <= status < 500 and status not in RETRIED_STATUS:
                    log.error("webhook refused %s: %s (not retried)", what, problem)
                    return False
            except (aiohttp.ClientError, TimeoutError) as exc:
                # The exception text may quote the URL: only its type is logged.
                problem = type(exc).__name__
            if attempt == self._attempts:
                log.error("webhook gave up on %s after %d attempts (last: %s)", what,
                          attempt, problem)
                return False
            delay = self._backoff.delay(attempt, self._rand)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self._backoff.max_s))
            log.warning("webhook post of %s failed (%s); attempt %d of %d in %.2fs", what,
                        problem, attempt + 1, self._attempts, delay)
            await self._sleep(delay)
        return False


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(float(value), 0.0)
    return None


class WebhookForwarder(ConsumerRebalanceListener):  # type: ignore[misc]
    """Posts every alert of ``topic`` through ``sink``; see the module docstring."""

    def __init__(self, settings: Settings, topic: str, sink: WebhookSink,
                 metrics: HealthMetrics | None = None) -> None:
        self._settings = settings
        self._topic = topic
        self._sink = sink
        self._metrics = metrics
        self.group_id = f"{settings.topic_prefix}ares-alert-webhook"
        self._consumer: AIOKafkaConsumer | None = None
        self._started_at = time.time()
        self.delivered = 0

    async def start(self) -> None:
        self._started_at = time.time()
        self._consumer = new_consumer(self._settings, group_id=self.group_id,
                                      auto_offset_reset="latest",
                                      **self._settings.kafka_options())
        await self._consumer.start()
        self._consumer.subscribe([self._topic], listener=self)

    async def stop(self) -> None:
        if self._consumer is not None:
            await stop_client(self._consumer)
            self._consumer = None
        await self._sink.close()

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        assert self._consumer is not None
        fresh = [tp for tp in assigned if await self._consumer.committed(tp) is None]
        if fresh:
            await seek_to_time(self._consumer, fresh, self._started_at - BACKFILL_S)

    async def run(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        while True:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                for record in records:
                    await self._forward(record.value)
                    try:
                        await consumer.commit({tp: record.offset + 1})
                    except KafkaError as exc:  # a rebalance: the next owner may re-post it
                        log.warning("webhook offset not committed: %s", exc)

    async def _forward(self, value: bytes | None) -> None:
        if value is None:
            return
        try:
            payload = alert_json(decode_alert(value))
        except SchemaError as exc:
            log.warning("undecodable alert not posted: %s", exc)
            return
        ok = await self._sink.post(payload)
        self.delivered += int(ok)
        if self._metrics is not None:
            self._metrics.webhook.labels("delivered" if ok else "failed").inc()
