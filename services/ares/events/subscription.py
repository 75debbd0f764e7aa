"""A live subscription: registered when created, so no event after the call is missed."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ares.events.model import Event


class Subscription:
    """An async iterator of events fed through a queue; ``aclose`` unregisters it."""

    def __init__(
        self, queue: asyncio.Queue[Event] | asyncio.Queue[Event | BaseException],
        on_close: Callable[[], Awaitable[None] | None],
    ) -> None:
        self._queue: asyncio.Queue[Any] = queue
        self._on_close: Callable[[], Awaitable[None] | None] | None = on_close

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        if self._on_close is None:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, BaseException):  # the feeding side failed: say so, don't hang
            raise item
        event: Event = item
        return event

    async def aclose(self) -> None:
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            result = on_close()
            if inspect.isawaitable(result):
                await result

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
