"""``BatchFuture``: what asyncio's tasks need of a future, and the group wake-up."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from ares.events.kafka.batch_future import BatchFuture, wake
from ares.tasks import wait_for


async def _await(future: BatchFuture) -> Any:
    return await future


async def test_a_task_resumes_with_the_value_once_woken() -> None:
    future = BatchFuture(asyncio.get_running_loop())
    task = asyncio.create_task(_await(future))
    await asyncio.sleep(0)  # the task now waits on the future
    assert future.settle(7, None)
    assert future.done()
    assert future.result() == 7
    await asyncio.sleep(0)
    assert not task.done()  # settled, not yet woken
    asyncio.get_running_loop().call_soon(wake, [future])
    assert await task == 7


async def test_a_settled_exception_is_raised_in_the_waiter() -> None:
    future = BatchFuture(asyncio.get_running_loop())
    task = asyncio.create_task(_await(future))
    await asyncio.sleep(0)
    future.settle(None, KeyError("gone"))
    asyncio.get_running_loop().call_soon(wake, [future])
    with pytest.raises(KeyError, match="gone"):
        await task
    assert isinstance(future.exception(), KeyError)


async def test_one_wake_resumes_every_waiter_in_order() -> None:
    loop = asyncio.get_running_loop()
    futures = [BatchFuture(loop) for _ in range(5)]
    resumed: list[int] = []

    async def waiter(i: int) -> None:
        resumed.append(await futures[i])

    tasks = [asyncio.create_task(waiter(i)) for i in range(5)]
    await asyncio.sleep(0)
    for i, future in enumerate(futures):
        future.settle(i, None)
    loop.call_soon(wake, futures)
    await asyncio.gather(*tasks)
    assert resumed == [0, 1, 2, 3, 4]


async def test_cancelling_the_waiting_task_cancels_the_future() -> None:
    future = BatchFuture(asyncio.get_running_loop())
    task = asyncio.create_task(_await(future))
    await asyncio.sleep(0)
    task.cancel("stop")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert future.cancelled()
    assert not future.settle(1, None)  # the writer skips a cancelled waiter
    with pytest.raises(asyncio.CancelledError):
        future.result()


async def test_wait_for_times_out_on_a_future_that_never_settles() -> None:
    future = BatchFuture(asyncio.get_running_loop())
    with pytest.raises(TimeoutError):
        await wait_for(_await(future), 0.01)
    assert future.cancelled()


async def test_set_result_and_set_exception_wake_their_own_waiters() -> None:
    loop = asyncio.get_running_loop()
    ok, failed = BatchFuture(loop), BatchFuture(loop)
    tasks = [asyncio.create_task(_await(ok)), asyncio.create_task(_await(failed))]
    await asyncio.sleep(0)
    ok.set_result("yes")
    failed.set_exception(ValueError("no"))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == "yes"
    assert isinstance(results[1], ValueError)


async def test_a_callback_added_after_settling_runs_soon_in_its_context() -> None:
    loop = asyncio.get_running_loop()
    future = BatchFuture(loop)
    future.settle(3, None)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outside")
    context = contextvars.copy_context()
    context.run(var.set, "inside")
    seen: list[tuple[int, str]] = []
    future.add_done_callback(lambda f: seen.append((f.result(), var.get())), context=context)
    assert seen == []
    await asyncio.sleep(0)
    assert seen == [(3, "inside")]


async def test_a_failing_callback_is_reported_and_the_others_still_run() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    first, second = BatchFuture(loop), BatchFuture(loop)
    ran: list[str] = []

    def broken(_: Any) -> None:
        raise RuntimeError("callback bug")

    first.add_done_callback(broken)
    second.add_done_callback(lambda _: ran.append("second"))
    first.settle(1, None)
    second.settle(2, None)
    wake([first, second])
    loop.set_exception_handler(None)
    assert ran == ["second"]
    assert [type(r["exception"]) for r in reported] == [RuntimeError]


async def test_it_is_a_future_to_asyncio_and_refuses_an_early_result() -> None:
    future = BatchFuture(asyncio.get_running_loop())
    assert asyncio.isfuture(future)
    assert future.get_loop() is asyncio.get_running_loop()
    with pytest.raises(asyncio.InvalidStateError):
        future.result()
    future.add_done_callback(print)
    assert future.remove_done_callback(print) == 1
    assert future.cancel()
    assert not future.cancel()
