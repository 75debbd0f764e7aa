"""The webhook sink against a real local HTTP server: retries with backoff, refusals, and
a URL that never reaches the logs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from ares.health_checker.webhook import WebhookSink, redacted

SECRET = "T000/B000/XXXXsecretXXXX"


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)  # answered in order, then 200
    received: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    state = Receiver()

    async def hook(request: web.Request) -> web.Response:
        state.received.append(await request.json())
        status = state.statuses.pop(0) if state.statuses else 200
        return web.Response(status=status, headers={"Retry-After": "0"})

    app = web.Application()
    app.router.add_post("/services/{tail:.*}", hook)
    runner = web.AppRunner(app, access_log=None)  # the receiver's log is not ours
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{port}/services/{SECRET}?token=also-secret"
    yield state
    await runner.cleanup()


ALERT = {"id": "a-1", "kind": "death_loop", "stream_id": "c1", "message": "loop"}


async def test_server_errors_are_retried_with_growing_delays(
        receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    receiver.statuses = [500, 503, 429]
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    sink = WebhookSink(receiver.url, attempts=5, rand=lambda: 1.0, sleep=sleep)
    caplog.set_level(logging.DEBUG)
    try:
        assert await sink.post(ALERT)
    finally:
        await sink.close()
    assert len(receiver.received) == 4
    assert receiver.received[-1] == ALERT
    assert delays == [0.5, 1.0, 2.0]  # exponential (full jitter at its cap here)
    ours = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in ours
    assert "also-secret" not in ours
    assert "http://127.0.0.1" in ours  # where it went, without the secret parts


async def test_a_refusal_is_not_retried_and_spent_attempts_give_up(
        receiver: Receiver) -> None:
    async def sleep(seconds: float) -> None:
        return None

    receiver.statuses = [400]
    sink = WebhookSink(receiver.url, attempts=3, sleep=sleep)
    try:
        assert not await sink.post(ALERT)
        assert len(receiver.received) == 1
        receiver.statuses = [500, 500, 500]
        assert not await sink.post(ALERT)
        assert len(receiver.received) == 4
    finally:
        await sink.close()


async def test_an_unreachable_hook_gives_up_without_naming_it(
        caplog: pytest.LogCaptureFixture) -> None:
    async def sleep(seconds: float) -> None:
        return None

    sink = WebhookSink(f"http://127.0.0.1:9/{SECRET}", attempts=2, sleep=sleep)
    try:
        assert not await sink.post(ALERT)
    finally:
        await sink.close()
    assert SECRET not in caplog.text
    assert redacted(f"https://h.example:8443/{SECRET}") == "https://h.example:8443/***"
