"""The built-in proxy (the fallback when toxiproxy cannot be built) on real local sockets:
it forwards, holds data through a partition, resets connections, and heals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from ares.chaos.proxy import BuiltinProxies
from ares.chaos.toxiproxy import free_port


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.fixture
async def proxied(echo_port: int) -> AsyncIterator[tuple[BuiltinProxies, int]]:
    proxies = BuiltinProxies()
    port = free_port()
    await proxies.create("svc", port, echo_port)
    yield proxies, port
    await proxies.close()


async def _round_trip(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await reader.readexactly(len(payload))
    finally:
        writer.close()


async def test_it_forwards_both_ways_and_with_latency(proxied: tuple[BuiltinProxies, int]
                                                      ) -> None:
    proxies, port = proxied
    assert await _round_trip(port, b"hello") == b"hello"
    await proxies.latency("svc", 200)
    assert await _round_trip(port, b"slow") == b"slow"
    await proxies.heal("svc")
    assert await _round_trip(port, b"again") == b"again"


async def test_a_partition_holds_the_data_until_healed(proxied: tuple[BuiltinProxies, int]
                                                       ) -> None:
    proxies, port = proxied
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await proxies.partition("svc")
        writer.write(b"held")
        await writer.drain()
        answer = asyncio.ensure_future(reader.readexactly(4))
        await asyncio.sleep(0.3)  # plenty for a local echo: nothing may cross the partition
        assert not answer.done()
        await proxies.heal("svc")
        assert await answer == b"held"
    finally:
        writer.close()


async def test_a_reset_breaks_every_connection(proxied: tuple[BuiltinProxies, int]) -> None:
    proxies, port = proxied
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"x")
    await writer.drain()
    assert await reader.readexactly(1) == b"x"
    await proxies.reset("svc")
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await reader.readexactly(1)
    writer.close()
    assert await _round_trip(port, b"new") == b"new"  # new connections work again
