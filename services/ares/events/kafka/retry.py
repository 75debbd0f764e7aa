"""The one retry loop for Kafka operations that a broker answers with "not yet".

A broker that is starting, electing a leader or moving a coordinator answers for a while
with errors that mean "not yet": on a cluster formatted a moment ago ``__consumer_offsets``
does not exist until the first coordinator lookup creates it. ``kafka_errors.is_retriable``
alone decides which failures those are; callers wrap the operation in ``retry`` (or start
a client with ``connect``) and never keep a list of their own.

While it waits, ``retry`` says so once (a warning on the ``ares.notices`` logger, which
the CLI prints as one line and services log), not once per attempt; after its deadline
it raises ``UnavailableError`` (exit 4) naming the broker and what did not answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiokafka import errors as kafka

from ares.config import Settings
from ares.errors import UnavailableError
from ares.events.kafka.errors import is_retriable, reason, translate
from ares.logs import NOTICES
from ares.tasks import wait_for

T = TypeVar("T")
notices = logging.getLogger(NOTICES)
log = logging.getLogger(__name__)
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 2.0

async def retry(operation: Callable[[], Awaitable[T]], *, what: str, bootstrap: str,
                timeout_s: float, setting: str = "ARES_RETRY_TIMEOUT_S") -> T:
    """``await operation()``, again after each retriable failure, for up to ``timeout_s``.

    A failure that is not retriable propagates at once, unchanged (callers translate it).
    After the deadline: ``UnavailableError`` "``what``: the Kafka broker at ``bootstrap``
    did not answer ... (waited N s, ``setting``)", raised from the last failure.
    """
    deadline = time.monotonic() + timeout_s
    delay = FIRST_DELAY_S
    announced = False
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not is_retriable(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnavailableError(
                    f"{what}: the Kafka broker at {bootstrap} did not answer: {reason(exc)} "
                    f"(waited {timeout_s:g}s, {setting}); start one with `ares dev up` or "
                    "point ARES_KAFKA_BOOTSTRAP at yours") from exc
            if not announced:
                announced = True
                notices.warning("%s: waiting for the Kafka broker at %s (%s), up to %.0fs",
                                what, bootstrap, reason(exc), left)
            else:
                log.debug("%s: still waiting (%s)", what, reason(exc))
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, MAX_DELAY_S)


class _Connectable(Protocol):
    async def start(self) -> None: ...


C = TypeVar("C", bound=_Connectable)


async def connect(factory: Callable[[], C], *, what: str, settings: Settings,
                  timeout_s: float | None = None) -> C:
    """A started aiokafka client (producer, consumer, admin) from ``factory``, a fresh one
    per attempt (a client whose start failed is closed, not restarted), retried as
    ``retry`` does for ``timeout_s`` (default ``ARES_RETRY_TIMEOUT_S``); a failure that is
    not retriable is translated into the ares error tree."""

    async def attempt() -> C:
        client = factory()
        try:  # a start that hangs (a producer id never handed out) is one failed attempt
            await wait_for(client.start(), settings.request_timeout_s)
        except BaseException:
            await shut(client)
            raise
        return client

    timeout = settings.retry_timeout_s if timeout_s is None else timeout_s
    try:
        return await retry(attempt, what=what, bootstrap=settings.kafka_bootstrap,
                           timeout_s=timeout)
    except kafka.KafkaError as exc:
        raise translate(exc, what) from exc


async def shut(client: object) -> None:
    """Stop an aiokafka producer or consumer (``stop``) or admin client (``close``)."""
    stop = getattr(client, "stop", None) or getattr(client, "close")  # noqa: B009
    await stop()
