"""ProbeServer on a real socket: what the kubelet and Prometheus see."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter

from ares.errors import ConfigError
from ares.probes import ProbeServer


class Flag:
    def __init__(self) -> None:
        self.value = False

    def __call__(self) -> bool:
        return self.value


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("ares_test_things", "Things counted by the probe test.", ["kind"],
            registry=registry).labels(kind="widget").inc(3)
    return registry


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        yield session


async def get(http: aiohttp.ClientSession, server: ProbeServer, path: str,
              **headers: str) -> tuple[int, str, str]:
    async with http.get(f"http://127.0.0.1:{server.port}{path}", headers=headers) as response:
        return response.status, response.headers["Content-Type"], await response.text()


async def test_probes_follow_the_service(http: aiohttp.ClientSession,
                                         registry: CollectorRegistry) -> None:
    ready = Flag()
    server = ProbeServer(0, ready, registry, host="127.0.0.1")
    await server.start()
    try:
        assert server.port > 0
        assert (await get(http, server, "/healthz"))[0] == 200
        status, content_type, body = await get(http, server, "/readyz")
        assert (status, content_type) == (503, "application/json; charset=utf-8")
        assert body == '{"status": "not ready"}'

        ready.value = True
        assert (await get(http, server, "/readyz"))[0] == 200

        server.set_draining()  # shutdown begins: out of rotation, still alive
        assert (await get(http, server, "/readyz"))[:3:2] == (503, '{"status": "draining"}')
        assert (await get(http, server, "/healthz"))[0] == 200
        assert (await get(http, server, "/nope"))[0] == 404
    finally:
        await server.stop()


async def test_metrics_are_the_registry_exposition(http: aiohttp.ClientSession,
                                                   registry: CollectorRegistry) -> None:
    server = ProbeServer(0, lambda: True, registry, host="127.0.0.1")
    await server.start()
    try:
        status, content_type, body = await get(http, server, "/metrics")
        assert status == 200
        assert content_type.startswith("text/plain; version=0.0.4")
        assert 'ares_test_things_total{kind="widget"} 3.0' in body

        status, content_type, body = await get(
            http, server, "/metrics", Accept="application/openmetrics-text; version=1.0.0")
        assert content_type.startswith("application/openmetrics-text")
        assert body.rstrip().endswith("# EOF")
    finally:
        await server.stop()


async def test_a_failing_check_is_a_503_not_a_500(http: aiohttp.ClientSession,
                                                  registry: CollectorRegistry) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    server = ProbeServer(0, broken, registry, host="127.0.0.1", alive=broken)
    await server.start()
    try:
        assert (await get(http, server, "/readyz"))[0] == 503
        assert (await get(http, server, "/healthz"))[0] == 503
    finally:
        await server.stop()


async def test_stop_releases_the_port_and_is_idempotent(registry: CollectorRegistry) -> None:
    server = ProbeServer(0, lambda: True, registry, host="127.0.0.1")
    await server.start()
    await server.start()  # no second listener
    port = server.port
    await server.stop()
    await server.stop()
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.port
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


async def test_a_taken_port_fails_start(registry: CollectorRegistry) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ProbeServer(taken.getsockname()[1], lambda: True, registry,
                             host="127.0.0.1")
        # A setting to change, not a crash: ConfigError (exit 2) naming the variable.
        with pytest.raises(ConfigError, match=r"in use.*ARES_HTTP_PORT"):
            await server.start()
        with pytest.raises(RuntimeError):
            _ = server.port
