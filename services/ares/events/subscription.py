"""A live subscription: registered when created, so no event after the call is missed."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from ares.events.model import Event


class Subscription:
    """An async iterator of events fed through a queue; ``aclose`` unregisters it."""

    def __init__(
        self, queue: asyncio.Queue[Event], on_close: Callable[[], Awaitable[None] | None]
    ) -> None:
        self._queue = queue
        self._on_close: Callable[[], Awaitable[None] | None] | None = on_close

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        if self._on_close is None:
            raise StopAsyncIteration
        return await self._queue.get()

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
