"""``cancel_and_wait``: the one place that cancels background tasks and waits for them;
``wait_for``: a timeout that never loses the caller's cancellation."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from ares.tasks import cancel_and_wait, stop_client, wait_for


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


class _StrayCancellation:
    """A client whose ``stop()`` lets an internal task's cancellation out, as aiokafka's
    does (aio-libs/aiokafka#647); ``stopped`` once it got that far."""

    def __init__(self) -> None:
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True
        inner = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        inner.cancel()
        await inner  # raises CancelledError into the caller, which nobody cancelled


async def test_a_stray_cancellation_from_stop_does_not_end_the_caller() -> None:
    client = _StrayCancellation()
    await stop_client(client)
    assert client.stopped
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]


async def test_stop_client_lets_the_callers_own_cancellation_through() -> None:
    entered = asyncio.Event()

    class Slow:
        async def stop(self) -> None:
            entered.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(stop_client(Slow()))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_that_arrives_as_the_wait_completes_ends_the_loop() -> None:
    """The budget keeper's publisher hung a stop this way: on 3.11 ``asyncio.wait_for``
    returns the result instead of raising when the cancellation and the completion meet
    (python/cpython#86296), and the loop around it waits forever."""
    wake = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_for(wake.wait(), 60)
            wake.clear()
            rounds += 1

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    wake.set()  # the wait completes ...
    task.cancel()  # ... as the stop cancels the loop
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done == {task}, "the loop swallowed its cancellation"
    assert task.cancelled()


async def test_wait_for_times_out_and_cancels_what_it_awaited() -> None:
    started = asyncio.Event()
    ended: list[str] = []

    async def slow() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        return "late"

    with pytest.raises(TimeoutError):
        await wait_for(slow(), 0.01)
    assert started.is_set()
    assert ended == ["cancelled"]
    assert await wait_for(asyncio.sleep(0, "now"), None) == "now"
