"""The ``Service`` base: declared tasks, one idempotent stop, a crashed task ends the service."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import pytest

from ares.service import Service
from ares.tasks import wait_for


class _Probe(Service):
    """A service whose hooks say when they ran; its loops are given."""

    name = "probe"

    def __init__(self, **loops: Coroutine[Any, Any, None]) -> None:
        super().__init__()
        self.loops = loops
        self.calls: list[str] = []
        self.drained = asyncio.Event()

    async def on_start(self) -> None:
        self.calls.append("on_start")

    def background(self) -> dict[str, Coroutine[Any, Any, None]]:
        self.calls.append("background")
        return self.loops

    async def on_stop(self) -> None:
        running = sorted(t.get_name() for t in self._background if not t.done())
        self.calls.append(f"on_stop (running: {','.join(running)})")
        await asyncio.sleep(0.01)  # a drain that takes a while: a second stop must wait
        self.drained.set()

    async def on_shutdown(self) -> None:
        running = [t for t in asyncio.all_tasks() if t.get_name().startswith("loop-")
                   and not t.done()]
        self.calls.append(f"on_shutdown (running: {len(running)})")


async def _forever(ended: list[str], name: str) -> None:
    try:
        await asyncio.Event().wait()
    finally:
        ended.append(name)


async def _fail(after_s: float = 0.0) -> None:
    await asyncio.sleep(after_s)
    raise ValueError("boom")


async def test_start_runs_on_start_then_launches_the_declared_tasks() -> None:
    ended: list[str] = []
    service = _Probe(**{"loop-a": _forever(ended, "a"), "loop-b": _forever(ended, "b")})
    assert not service.ready
    await service.start()
    assert service.calls == ["on_start", "background"]
    assert service.ready
    assert service.running
    assert not service.ended
    await service.stop()
    assert not service.ready
    assert service.ended


async def test_stop_drains_then_cancels_and_awaits_every_task_then_shuts_down() -> None:
    ended: list[str] = []
    service = _Probe(**{"loop-a": _forever(ended, "a"), "loop-b": _forever(ended, "b")})
    await service.start()
    tasks = list(service._background)
    await asyncio.sleep(0)
    await service.stop()
    assert service.calls[2:] == ["on_stop (running: loop-a,loop-b)", "on_shutdown (running: 0)"]
    assert sorted(ended) == ["a", "b"]  # each task's own cleanup ran before stop returned
    assert all(task.cancelled() for task in tasks)


async def test_stop_is_idempotent() -> None:
    service = _Probe(**{"loop-a": _forever([], "a")})
    await service.start()
    await service.stop()
    await service.stop()
    assert [c for c in service.calls if c.startswith("on_")] == [
        "on_start", "on_stop (running: loop-a)", "on_shutdown (running: 0)"]


async def test_concurrent_stops_share_one_and_all_wait_for_it() -> None:
    service = _Probe(**{"loop-a": _forever([], "a")})
    await service.start()
    first = asyncio.create_task(service.stop())
    await asyncio.sleep(0)
    second = asyncio.create_task(service.stop())
    await asyncio.sleep(0)
    assert not second.done()  # the drain is not over: the second caller waits for it
    await asyncio.gather(first, second)
    assert service.drained.is_set()
    assert service.calls.count("on_shutdown (running: 0)") == 1


async def test_a_cancelled_caller_does_not_cut_the_stop_short() -> None:
    service = _Probe(**{"loop-a": _forever([], "a")})
    await service.start()
    caller = asyncio.create_task(service.stop())
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await service.stop()  # waits for the stop that was already under way
    assert service.calls[-1] == "on_shutdown (running: 0)"


async def test_a_crashed_task_ends_the_service_with_its_error(
        caplog: pytest.LogCaptureFixture) -> None:
    ended: list[str] = []
    service = _Probe(**{"loop-a": _forever(ended, "a"), "loop-bad": _fail()})
    await service.start()
    with caplog.at_level(logging.ERROR, "ares.service"), pytest.raises(ValueError, match="boom"):
        await wait_for(service.wait_stopped(), 5)
    assert isinstance(service.error, ValueError)
    assert "loop-bad failed: ValueError('boom'); stopping" in caplog.text
    assert not service.ready
    assert ended == []
    await service.stop()  # the caller (serve) stops it; the error is not raised again
    assert ended == ["a"]


async def test_a_task_that_returns_ends_the_service() -> None:
    async def done() -> None:
        return None

    service = _Probe(**{"loop-once": done()})
    await service.start()
    await wait_for(service.wait_stopped(), 5)
    assert service.error is None
    assert service.ended
    await service.stop()


async def test_wait_stopped_returns_once_stopped() -> None:
    service = _Probe(**{"loop-a": _forever([], "a")})
    await service.start()
    waiting = asyncio.create_task(service.wait_stopped())
    await asyncio.sleep(0)
    assert not waiting.done()
    await service.stop()
    await wait_for(waiting, 5)


async def test_a_crash_during_the_drain_is_still_raised_by_wait_stopped() -> None:
    class Fragile(_Probe):
        async def on_stop(self) -> None:
            await asyncio.sleep(0.05)  # the loop crashes meanwhile

    service = Fragile(**{"loop-bad": _fail(after_s=0.01)})
    await service.start()
    await service.stop()
    with pytest.raises(ValueError, match="boom"):
        await service.wait_stopped()


async def test_a_failed_drain_still_cancels_the_tasks_and_shuts_down() -> None:
    class Broken(_Probe):
        async def on_stop(self) -> None:
            raise RuntimeError("drain failed")

    ended: list[str] = []
    service = Broken(**{"loop-a": _forever(ended, "a")})
    await service.start()
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="drain failed"):
        await service.stop()
    assert ended == ["a"]
    assert service.calls[-1] == "on_shutdown (running: 0)"
    assert service.ended


async def test_a_failed_start_launches_nothing() -> None:
    class NoBroker(_Probe):
        async def on_start(self) -> None:
            raise ConnectionError("no broker")

    service = NoBroker(**{"loop-a": _forever([], "a")})
    with pytest.raises(ConnectionError):
        await service.start()
    assert "background" not in service.calls
    assert not service.ready
    service.loops["loop-a"].close()  # never launched: no "never awaited" warning
