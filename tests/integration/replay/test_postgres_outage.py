"""PostgreSQL goes away under a running projector and comes back: reads scan Kafka in the
meantime, and the projector catches up without a duplicate or a gap."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import pytest

from ares.config import Settings
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projector import Projector
from ares.replay_reader.wiring import Topics, open_reader
from ares.tasks import wait_for
from ares.topics import TopicPlan
from tests.integration.replay.conftest import chat_events, write_streams
from tests.integration.replay.test_projector_crash import differences
from tests.support.runtime import read_stream


class TcpProxy:
    """127.0.0.1:port -> target; ``down()`` cuts every connection and stops listening."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._pipes):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        pipes = [asyncio.create_task(self._pipe(reader, up_writer)),
                 asyncio.create_task(self._pipe(up_reader, writer))]
        self._pipes.update(pipes)
        await asyncio.gather(*pipes, return_exceptions=True)
        self._pipes.difference_update(pipes)
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()


@pytest.fixture
async def proxy(postgres_dsn: str) -> AsyncIterator[TcpProxy]:
    parts = urlsplit(postgres_dsn)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.up()
    yield proxy
    await proxy.down()


async def total_projected(dsn: str, schema: str) -> tuple[int, int]:
    conn = await asyncpg.connect(dsn)
    try:
        # One statement, so one snapshot: the projector keeps committing other tests' events
        # from the shared topic, and two statements could straddle one of its transactions.
        indexed, counted = await conn.fetchrow(
            f'SELECT (SELECT count(*) FROM "{schema}".stream_index),'
            f' (SELECT sum(events) FROM "{schema}".streams)')
        return int(indexed), int(counted or 0)
    finally:
        await conn.close()


async def test_the_projector_catches_up_after_an_outage_and_reads_survive_it(
        rp_settings: Settings, plan: TopicPlan, schema: str, proxy: TcpProxy) -> None:
    run = uuid.uuid4().hex[:6]
    before = {f"out-{run}-{i}": chat_events(5) for i in range(20)}
    during = {f"out-{run}-{i}": chat_events(3) for i in range(20, 40)}
    parts = urlsplit(rp_settings.postgres_dsn)
    via_proxy = rp_settings.with_overrides(postgres_dsn=parts._replace(
        netloc=f"{parts.username}:{parts.password}@127.0.0.1:{proxy.port}").geturl())
    topics = Topics.of(rp_settings)
    store = ProjectionStore(via_proxy.postgres_dsn, schema, events_topic=topics.events)
    projector = Projector(via_proxy, store, topics.events, topics.alerts)
    task = asyncio.create_task(projector.run())
    try:
        await write_streams(rp_settings, plan, before)
        await wait_for(projector.caught_up.wait(), 60)
        await proxy.down()
        await write_streams(rp_settings, plan, during)
        async with open_reader(via_proxy, topics, schema=schema) as reader:
            stream = f"out-{run}-25"
            found = await reader.read(stream, 1, 100)
            assert found == await read_stream(rp_settings, plan, stream)
            assert reader.fallbacks > 0
            assert reader.degraded
        await asyncio.sleep(2)  # the projector retries meanwhile
        await proxy.up()
        expected = sum(len(e) for e in (*before.values(), *during.values()))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ours = await _count_ours(rp_settings.postgres_dsn, schema, run)
            if ours >= expected:
                break
            await asyncio.sleep(0.2)
        assert ours == expected
        indexed, counted = await total_projected(rp_settings.postgres_dsn, schema)
        assert indexed == counted  # every indexed event counted once in streams
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()
    rebuilt = f"{schema}_again"
    again = ProjectionStore(rp_settings.postgres_dsn, rebuilt, events_topic=topics.events)
    try:
        await Projector(rp_settings, again, topics.events, topics.alerts).run(
            until_caught_up=True)
        assert await differences(rp_settings.postgres_dsn, schema, rebuilt) == {}
    finally:
        await again.drop()
        await again.close()


async def _count_ours(dsn: str, schema: str, run: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(
            f'SELECT count(*) FROM "{schema}".stream_index WHERE stream_id LIKE $1',
            f"out-{run}-%"))
    finally:
        await conn.close()
