"""The one place that cancels background tasks and waits for them to end (and that stops
an aiokafka client without mistaking its stray cancellation for ours).

``task.cancel()`` then ``with suppress(CancelledError): await task`` was written a dozen
times, and it has a trap: when the *caller* is cancelled while it waits, the suppress
swallows the caller's own cancellation too. ``cancel_and_wait`` tells the two apart.

``wait_for`` replaces ``asyncio.wait_for``, which on Python 3.11 swallows a cancellation that
arrives as the awaited thing completes (python/cpython#86296, fixed in 3.12): a loop around
it then never ends, and neither does the stop that cancelled it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


async def wait_for(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """``await awaitable``, ``TimeoutError`` after ``timeout_s`` seconds (None: no limit).

    What 3.12's ``asyncio.wait_for`` is: built on ``asyncio.timeout``, which tells its own
    cancellation from the caller's, so the caller's is never lost. On timeout the awaitable
    is cancelled (a coroutine or task awaited here is cancelled with this task).
    """
    async with asyncio.timeout(timeout_s):
        return await awaitable


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None,
                          ignore_errors: bool = False) -> None:
    """Cancel each task (None is skipped) and wait until every one has ended.

    A task that had already failed re-raises its error, as awaiting it would, unless
    ``ignore_errors`` (a loop that died has said why in the log already). The caller's own
    cancellation propagates, never swallowed.
    """
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    for task in live:
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception:
            if not ignore_errors:
                raise


class _Stoppable(Protocol):
    async def stop(self) -> None: ...


async def stop_client(client: _Stoppable) -> None:
    """``await client.stop()`` of an aiokafka client, without its stray cancellation.

    aiokafka's ``stop()`` awaits internal tasks it has just cancelled and can let their
    ``CancelledError`` out (aio-libs/aiokafka#647, open), typically after a failed fetch:
    a loop that stops its consumer to retry would then end as if *it* had been cancelled,
    and its service with it. The client is closed either way; only the caller's own
    cancellation propagates.
    """
    try:
        await client.stop()
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
        log.warning("%s.stop() raised a stray CancelledError (aio-libs/aiokafka#647); "
                    "it is closed", type(client).__name__)
