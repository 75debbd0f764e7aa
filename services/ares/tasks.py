"""The one place that cancels background tasks and waits for them to end.

``task.cancel()`` then ``with suppress(CancelledError): await task`` was written a dozen
times, and it has a trap: when the *caller* is cancelled while it waits, the suppress
swallows the caller's own cancellation too. ``cancel_and_wait`` tells the two apart.
"""

from __future__ import annotations

import asyncio
from typing import Any


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
