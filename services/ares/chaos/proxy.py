"""Network faults between a service and the broker, through a real TCP proxy.

Each proxied service reaches the broker only through its own proxy (the broker advertises
the proxy's address on that service's listener, so metadata never routes it around the
proxy). Two implementations of one small port:

* ``Toxiproxy`` drives a toxiproxy server (Shopify's, built from the Go module proxy by
  ``ares.chaos.toxiproxy``) through its HTTP API: ``latency`` toxics, ``reset_peer`` and a
  ``timeout`` toxic of 0 (data held, connections kept: a black hole) for partitions;
* ``BuiltinProxies`` does the same in-process with asyncio when no toxiproxy can be built.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

LOCALHOST = "127.0.0.1"


class Proxies(Protocol):
    """Named TCP proxies and the faults they can inject."""

    name: str  # "toxiproxy" or "builtin": which implementation ran (in the report)

    async def create(self, proxy: str, listen_port: int, upstream_port: int) -> None: ...

    async def latency(self, proxy: str, latency_ms: int) -> None: ...

    async def reset(self, proxy: str) -> None: ...

    async def partition(self, proxy: str) -> None: ...

    async def heal(self, proxy: str) -> None:
        """Remove every fault of ``proxy``."""
        ...

    async def close(self) -> None: ...


class Toxiproxy:
    """A toxiproxy server's HTTP API (https://github.com/Shopify/toxiproxy#http-api)."""

    name = "toxiproxy"

    def __init__(self, api_port: int) -> None:
        self._base = f"http://{LOCALHOST}:{api_port}"
        self._session: aiohttp.ClientSession | None = None
        self._toxics: dict[str, list[str]] = {}
        self._made = 0

    async def _call(self, method: str, path: str, body: object | None = None) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        async with self._session.request(method, self._base + path, json=body) as response:
            if response.status >= 300:
                text = await response.text()
                raise RuntimeError(f"toxiproxy {method} {path}: {response.status} {text}")

    async def create(self, proxy: str, listen_port: int, upstream_port: int) -> None:
        await self._call("POST", "/proxies", {
            "name": proxy, "listen": f"{LOCALHOST}:{listen_port}",
            "upstream": f"{LOCALHOST}:{upstream_port}", "enabled": True})
        self._toxics[proxy] = []

    async def _toxic(self, proxy: str, toxic: str, kind: str, stream: str,
                     attributes: dict[str, int]) -> None:
        # Faults may overlap on one proxy (a service's own and its broker's): each toxic
        # gets a name of its own, and the first heal ends them all.
        self._made += 1
        name = f"{toxic}-{self._made}"
        await self._call("POST", f"/proxies/{proxy}/toxics", {
            "name": name, "type": kind, "stream": stream, "toxicity": 1.0,
            "attributes": attributes})
        self._toxics[proxy].append(name)

    async def latency(self, proxy: str, latency_ms: int) -> None:
        for stream in ("upstream", "downstream"):
            await self._toxic(proxy, f"latency-{stream}", "latency", stream,
                              {"latency": latency_ms // 2, "jitter": latency_ms // 8})

    async def reset(self, proxy: str) -> None:
        # reset_peer RSTs every connection that carries data while it is present; Kafka
        # clients talk constantly (fetches, heartbeats), so a moment is enough.
        await self._toxic(proxy, "reset", "reset_peer", "upstream", {"timeout": 0})
        await asyncio.sleep(0.5)
        await self.heal(proxy)

    async def partition(self, proxy: str) -> None:
        for stream in ("upstream", "downstream"):
            await self._toxic(proxy, f"blackhole-{stream}", "timeout", stream, {"timeout": 0})

    async def heal(self, proxy: str) -> None:
        toxics, self._toxics[proxy] = self._toxics.get(proxy, []), []
        for toxic in toxics:
            await self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass(slots=True, eq=False)  # hashed by identity: kept in a set
class _Pipe:
    """One proxied connection: the client's socket and ours to the broker."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        """Close both sides with a TCP RST (SO_LINGER 0), not a polite FIN."""
        for writer in (self.client, self.upstream):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


@dataclass(slots=True)
class _Proxy:
    upstream_port: int
    server: asyncio.base_events.Server | None = None
    latency_s: float = 0.0
    open: asyncio.Event = field(default_factory=asyncio.Event)
    pipes: set[_Pipe] = field(default_factory=set)


class BuiltinProxies:
    """The same faults without toxiproxy: an asyncio TCP proxy per service.

    Latency delays every chunk in both directions; a partition holds all data (the
    connections stay open, as behind a black-holing switch) until healed; a reset aborts
    every connection with an RST.
    """

    name = "builtin"

    def __init__(self) -> None:
        self._proxies: dict[str, _Proxy] = {}

    async def create(self, proxy: str, listen_port: int, upstream_port: int) -> None:
        state = _Proxy(upstream_port)
        state.open.set()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._connect(state, reader, writer)

        state.server = await asyncio.start_server(accept, LOCALHOST, listen_port)
        self._proxies[proxy] = state

    async def _connect(self, state: _Proxy, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(LOCALHOST, state.upstream_port)
        except OSError:
            writer.transport.abort()  # the broker is down: refused, as it would be
            return
        pipe = _Pipe(writer, up_writer)
        pipe.tasks = [asyncio.create_task(self._pump(state, reader, up_writer, pipe)),
                      asyncio.create_task(self._pump(state, up_reader, writer, pipe))]
        state.pipes.add(pipe)

    async def _pump(self, state: _Proxy, source: asyncio.StreamReader,
                    sink: asyncio.StreamWriter, pipe: _Pipe) -> None:
        try:
            while chunk := await source.read(65536):
                await state.open.wait()
                if state.latency_s:
                    await asyncio.sleep(state.latency_s)
                sink.write(chunk)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            state.pipes.discard(pipe)
            pipe.abort()

    async def latency(self, proxy: str, latency_ms: int) -> None:
        self._proxies[proxy].latency_s = latency_ms / 2000  # each way: half the round trip

    async def reset(self, proxy: str) -> None:
        state = self._proxies[proxy]
        for pipe in list(state.pipes):
            pipe.abort()
        state.pipes.clear()

    async def partition(self, proxy: str) -> None:
        self._proxies[proxy].open.clear()

    async def heal(self, proxy: str) -> None:
        state = self._proxies[proxy]
        state.latency_s = 0.0
        state.open.set()

    async def close(self) -> None:
        for state in self._proxies.values():
            state.open.set()
            if state.server is not None:
                state.server.close()
            for pipe in list(state.pipes):
                pipe.abort()
        self._proxies.clear()
