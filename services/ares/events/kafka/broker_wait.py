"""Waiting for the Kafka broker when a service starts.

A service started while its broker is down or restarting (a cluster coming up, a rolling
restart) waits for it instead of exiting: exiting would put a Kubernetes pod into
CrashLoopBackOff, whose back-off grows to five minutes, so the fleet would come back long
after the broker did. Liveness answers meanwhile and readiness says "not yet". Refused
credentials are not waited for: they are a setting to fix.

"Answers" means more than an open port: a broker formatted a moment ago serves metadata
before it has a group coordinator (``__consumer_offsets`` is created by the first lookup)
or a transaction coordinator, and every service needs one or both. The wait ends when
FindCoordinator answers for both kinds.
"""

from __future__ import annotations

import contextlib

from aiokafka import AIOKafkaClient
from aiokafka import errors as kafka
from aiokafka.client import CoordinationType

from ares.config import Settings
from ares.events.kafka.errors import translate
from ares.events.kafka.retry import retry

PROBE_KEY = "ares-startup-probe"  # looked up, never joined nor initialised


async def wait_for_broker(settings: Settings, what: str) -> None:
    """Return once the bootstrap servers answer and both coordinators exist; raise
    ``UnavailableError`` after ``settings.startup_timeout_s`` (at once when it is 0), an
    ``AuthenticationError`` at once."""
    try:
        await retry(lambda: _coordinators_answer(settings), what=what,
                    bootstrap=settings.kafka_bootstrap, timeout_s=settings.startup_timeout_s,
                    setting="ARES_STARTUP_TIMEOUT_S")
    except kafka.KafkaError as exc:
        raise translate(exc, what) from exc


async def _coordinators_answer(settings: Settings) -> None:
    client = AIOKafkaClient(bootstrap_servers=settings.kafka_bootstrap,
                            request_timeout_ms=int(settings.request_timeout_s * 1000),
                            **settings.kafka_options())
    try:
        await client.bootstrap()
        for kind in (CoordinationType.GROUP, CoordinationType.TRANSACTION):
            # Refused is an answer: this principal may not look up the probe's id.
            with contextlib.suppress(kafka.GroupAuthorizationFailedError,
                                     kafka.TransactionalIdAuthorizationFailed):
                await client.coordinator_lookup(kind, PROBE_KEY)
    finally:
        await client.close()
