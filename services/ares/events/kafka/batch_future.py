"""A future whose waiters a group commit wakes all at once.

A partition writer settles every append of a transaction together. With ``asyncio.Future``
each ``set_result`` schedules its waiter's wake-up through the loop's ``call_soon``, which
CPython's asyncio runs as interpreted code (four calls and a ``Handle``, then the
``Handle``'s own call in the next turn): about a tenth of a fleet's append path, once per
append. A ``BatchFuture`` is settled without scheduling anything, and ``wake`` then runs
the waiters of a whole transaction from a single loop callback.

It is what asyncio's tasks accept as a Future (``asyncio.isfuture``: the
``_asyncio_future_blocking`` flag, ``get_loop``, ``add_done_callback``, ``result``,
``cancel``), so a coroutine awaits it like any future, and cancelling the task cancels it.
It is not a full ``asyncio.Future``: it never logs an exception that nobody retrieved, and
it is meant for the writer's own queue (``PartitionWriter`` hands out coroutines, never
these).

Compiled with the append path (``ares.native``); as Python it behaves the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Iterable
from contextvars import Context
from typing import Any, Final

_PENDING: Final = 0
_RESULT: Final = 1
_EXCEPTION: Final = 2
_CANCELLED = 3

Callback = Callable[[Any], object]


class BatchFuture:
    """A future settled by ``settle`` (no wake-up yet) and woken by ``wake``.

    ``set_result`` and ``set_exception`` settle it and schedule its own waiters at once, as
    ``asyncio.Future`` does: the writer's rare paths (a failed transaction, a stop).
    """

    __slots__ = ("_asyncio_future_blocking", "_callbacks", "_error", "_loop", "_state",
                 "_value")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._state = _PENDING
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[tuple[Callback, Context | None]] = []
        # Set by whoever yields this future to a task (``__await__``), cleared by the task.
        self._asyncio_future_blocking = False

    # -- what asyncio's Task and helpers call ----------------------------------------------

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> Any:
        state = self._state
        if state == _RESULT:
            return self._value
        if state == _EXCEPTION:
            assert self._error is not None
            raise self._error
        if state == _CANCELLED:
            raise asyncio.CancelledError(*(() if self._value is None else (self._value,)))
        raise asyncio.InvalidStateError("Result is not ready.")

    def exception(self) -> BaseException | None:
        if self._state in (_CANCELLED, _PENDING):
            self.result()  # raises CancelledError or InvalidStateError
        return self._error

    def add_done_callback(self, fn: Callback, *, context: Context | None = None) -> None:
        if self._state == _PENDING:
            self._callbacks.append((fn, context))
        else:
            self._loop.call_soon(fn, self, context=context)

    def remove_done_callback(self, fn: Callback) -> int:
        kept = [(f, c) for f, c in self._callbacks if f != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def cancel(self, msg: Any = None) -> bool:
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._value = msg
        self._schedule()
        return True

    def __await__(self) -> Generator[Any, None, Any]:
        if self._state == _PENDING:
            self._asyncio_future_blocking = True
            yield self  # the task registers its wake-up and suspends
        if self._state == _PENDING:
            raise RuntimeError("await wasn't used with future")
        return self.result()

    # -- what the writer calls -------------------------------------------------------------

    def settle(self, value: Any, error: BaseException | None) -> bool:
        """Set the outcome without waking anyone (``wake`` does); False if already done
        (a cancelled waiter)."""
        if self._state != _PENDING:
            return False
        if error is None:
            self._state = _RESULT
            self._value = value
        else:
            self._state = _EXCEPTION
            self._error = error
        return True

    def set_result(self, value: Any) -> None:
        if self.settle(value, None):
            self._schedule()

    def set_exception(self, error: BaseException) -> None:
        if self.settle(None, error):
            self._schedule()

    def _schedule(self) -> None:
        if self._callbacks:
            self._loop.call_soon(wake, (self,))


def wake(futures: Iterable[BatchFuture]) -> None:
    """Run the waiters of every settled future in ``futures``, in order.

    Called from the loop (``loop.call_soon(wake, futures)``), never from inside a task: a
    waiter is a task's wake-up, which cannot run while another task is running. A callback
    that raises is reported like asyncio reports a failed ``Handle``, and the rest run.
    """
    for future in futures:
        callbacks = future._callbacks
        if not callbacks or future._state == _PENDING:
            continue
        future._callbacks = []
        for fn, context in callbacks:
            try:
                if context is None:
                    fn(future)
                else:
                    context.run(fn, future)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                future._loop.call_exception_handler({
                    "message": f"Exception in callback {fn!r} of a batch future",
                    "exception": exc,
                    "future": future,
                })
