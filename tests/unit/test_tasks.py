"""``cancel_and_wait``: the one place that cancels background tasks and waits for them."""

from __future__ import annotations

import asyncio

import pytest

from ares.tasks import cancel_and_wait


async def _forever() -> None:
    await asyncio.Event().wait()


async def _fail() -> None:
    raise ValueError("boom")


async def test_every_task_is_cancelled_and_has_ended() -> None:
    tasks = [asyncio.create_task(_forever()) for _ in range(3)]
    await asyncio.sleep(0)
    await cancel_and_wait(*tasks, None)
    assert all(task.cancelled() for task in tasks)


async def test_a_task_that_had_failed_reraises_unless_told_to_ignore() -> None:
    failed = asyncio.create_task(_fail())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="boom"):
        await cancel_and_wait(failed)
    other = asyncio.create_task(_fail())
    await asyncio.sleep(0)
    await cancel_and_wait(other, ignore_errors=True)
    assert other.done()


async def test_the_callers_own_cancellation_is_not_swallowed() -> None:
    stubborn_started = asyncio.Event()

    async def stubborn() -> None:
        stubborn_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(10)  # takes its time to end

    child = asyncio.create_task(stubborn())
    await stubborn_started.wait()
    caller = asyncio.create_task(cancel_and_wait(child))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert caller.cancelled()
    child.cancel()
    with pytest.raises(asyncio.CancelledError):
        await child
