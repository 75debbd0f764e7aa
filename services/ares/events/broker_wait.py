"""Waiting for the Kafka broker when a service starts.

A service started while its broker is down or restarting (a cluster coming up, a rolling
restart) waits for it instead of exiting: exiting would put a Kubernetes pod into
CrashLoopBackOff, whose back-off grows to five minutes, so the fleet would come back long
after the broker did. Liveness answers meanwhile and readiness says "not yet". Refused
credentials are not waited for: they are a setting to fix.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaError

from ares.config import Settings
from ares.errors import UnavailableError
from ares.events.kafka_errors import translate

log = logging.getLogger(__name__)
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 5.0


async def wait_for_broker(settings: Settings, what: str) -> None:
    """Return once the bootstrap servers answer a metadata request; raise ``UnavailableError``
    after ``settings.startup_timeout_s`` (at once when it is 0), ``AuthenticationError``
    at once."""
    deadline = time.monotonic() + settings.startup_timeout_s
    delay = FIRST_RETRY_S
    attempt = 0
    while True:
        attempt += 1
        failure = await _try_bootstrap(settings)
        if failure is None:
            if attempt > 1:
                log.info("%s: the Kafka broker at %s answers (attempt %d)", what,
                         settings.kafka_bootstrap, attempt)
            return
        error = translate(failure, what)
        if not isinstance(error, UnavailableError):
            raise error from failure
        left = deadline - time.monotonic()
        if left <= 0:
            if settings.startup_timeout_s > 0:
                raise UnavailableError(f"{error} (waited {settings.startup_timeout_s:g}s: "
                                       "ARES_STARTUP_TIMEOUT_S)") from failure
            raise error from failure
        pause = min(delay, left)
        log.warning("%s: waiting for the Kafka broker at %s (%s); next try in %.1fs, giving "
                    "up in %.0fs (ARES_STARTUP_TIMEOUT_S)", what, settings.kafka_bootstrap,
                    failure, pause, left)
        await asyncio.sleep(pause)
        delay = min(delay * 2, MAX_RETRY_S)


async def _try_bootstrap(settings: Settings) -> KafkaError | None:
    """None when the bootstrap servers answered a metadata request, else why not."""
    client = AIOKafkaClient(bootstrap_servers=settings.kafka_bootstrap,
                            request_timeout_ms=int(settings.request_timeout_s * 1000),
                            **settings.kafka_options())
    try:
        await client.bootstrap()
    except KafkaError as exc:
        return exc
    finally:
        await client.close()
    return None
