"""Stopping the chaos load: requests that no owner ever answers become violations of their
own and the run still reaches its checks and its report (it used to end in a TimeoutError
traceback with no report when a hanging transaction held a probe's partition)."""

from __future__ import annotations

import asyncio
from typing import Any

from ares.chaos.load import Load, LoadShape
from ares.chaos.runner import _stop_load
from ares.config import Settings
from ares.errors import UnavailableError
from ares.topics import load_topics


class _Silent:
    """A client whose owner never answers (every send times out, quickly)."""

    async def append(self, stream_id: str, events: list[Any]) -> int:
        await asyncio.sleep(0.01)
        raise UnavailableError("no owner answered")


def _load() -> Load:
    settings = Settings(kafka_bootstrap="127.0.0.1:1", topic_prefix="stop-load.")
    load = Load(settings, load_topics(settings), LoadShape(agents=0, probes=1))

    async def silent() -> Any:
        return _Silent()

    load._ensure_client = silent  # type: ignore[method-assign]
    return load


async def test_unanswered_requests_are_reported_and_the_load_is_stopped() -> None:
    load = _load()
    task = asyncio.create_task(load.run())
    await asyncio.sleep(0.3)  # a few failed attempts
    load.stop()
    progress: list[str] = []
    violations = await _stop_load(load, task, 0.5, progress.append)
    assert task.cancelled()
    [violation] = violations
    assert violation.startswith("request_unanswered: append to chaos-probe-1 (unanswered "
                                "after ")
    assert "1 request(s) still unanswered" in progress[0]


async def test_a_load_that_stops_in_time_has_nothing_unanswered() -> None:
    load = _load()
    load.stop()
    task = asyncio.create_task(load.run())
    assert await _stop_load(load, task, 5.0, lambda _: None) == []
    assert task.done()
    assert not task.cancelled()
    assert load.unanswered() == []
