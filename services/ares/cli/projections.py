"""``ares projections``: the PostgreSQL read models of the replay reader.

\b
They hold only derived data: `rebuild` drops the schema and projects everything again from
Kafka (ares.events, ares.alerts), then exits once it reached the log end it saw at start.
A running replay reader projects into the same schema: rebuild refuses while one leads it
(stop it first), and `--schema` rebuilds into another schema beside it.
Exit codes: 0 ok, 1 another projector holds the schema, 2 usage, 4 PostgreSQL or the broker
unreachable.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from aiokafka import TopicPartition
from rich.console import Console

from ares.cli.common import err_console, run_async, settings_of
from ares.config import Settings
from ares.errors import AresError, UnavailableError
from ares.replay_reader.kafka_source import RangeScanner
from ares.replay_reader.pg_store import ProjectionUnavailableError
from ares.replay_reader.projector import Projector
from ares.replay_reader.wiring import ENV_SCHEMA, Topics, default_schema, projection_store

_SCHEMA_HELP = "PostgreSQL schema of the projections  [default: ares_projections]"


class ProjectorBusyError(AresError):
    """Another projector leads the schema."""


@click.group()
def projections() -> None:
    """The read models in PostgreSQL: rebuild, migrate, status."""


@projections.command()
@click.option("--schema", envvar=ENV_SCHEMA, show_envvar=True, metavar="NAME", help=_SCHEMA_HELP)
@click.pass_context
def rebuild(ctx: click.Context, schema: str | None) -> None:
    """Drop every projection table and project everything again from Kafka."""
    settings = settings_of(ctx)
    run_async(_rebuild(settings, schema or default_schema()))


async def _rebuild(settings: Settings, schema: str) -> None:
    topics = Topics.of(settings)
    store = projection_store(settings, topics, schema)
    projector = Projector(settings, store, topics.events, topics.alerts)
    started = time.monotonic()
    try:
        if not await projector.lead(wait=False):
            raise ProjectorBusyError(f"a projector (`ares run replay-reader`) leads schema "
                                     f"{schema!r}: stop it first, or rebuild into another "
                                     "--schema")
        await store.drop()
        await store.close()  # new connections: nothing cached from the dropped tables
        await store.migrate()
        last = [time.monotonic()]

        def progress(p: Projector) -> None:
            if time.monotonic() - last[0] > 2:
                last[0] = time.monotonic()
                err_console.print(f"projected {p.projected} event(s)...", highlight=False)

        await projector.run(until_caught_up=True, on_progress=progress)
    except ProjectionUnavailableError as exc:
        raise UnavailableError(str(exc)) from exc
    finally:
        await store.close()
    click.echo(f"rebuilt schema {schema!r}: {projector.projected} event(s) from "
               f"{topics.events} in {time.monotonic() - started:.1f}s")


@projections.command()
@click.option("--schema", envvar=ENV_SCHEMA, show_envvar=True, metavar="NAME", help=_SCHEMA_HELP)
@click.pass_context
def migrate(ctx: click.Context, schema: str | None) -> None:
    """Apply the SQL migrations that are missing (the projector does it at start too)."""
    settings = settings_of(ctx)
    applied = run_async(_migrate(settings, schema or default_schema()))
    click.echo(f"applied {', '.join(f'{v:04d}' for v in applied)}" if applied
               else "up to date")


async def _migrate(settings: Settings, schema: str) -> list[int]:
    store = projection_store(settings, Topics.of(settings), schema)
    try:
        return await store.migrate()
    except ProjectionUnavailableError as exc:
        raise UnavailableError(str(exc)) from exc
    finally:
        await store.close()


@projections.command()
@click.option("--schema", envvar=ENV_SCHEMA, show_envvar=True, metavar="NAME", help=_SCHEMA_HELP)
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
@click.pass_context
def status(ctx: click.Context, schema: str | None, as_json: bool) -> None:
    """Where the projector is on each partition, and how far behind the log end."""
    settings = settings_of(ctx)
    doc = run_async(_status(settings, schema or default_schema()))
    if as_json:
        click.echo(json.dumps(doc))
        return
    console = Console()
    console.print(f"schema {doc['schema']!r}: {doc['agents']} agent(s), {doc['streams']} "
                  f"stream(s), {doc['lag']} record(s) behind")
    for p in doc["partitions"]:
        console.print(f"  {p['topic']}/{p['partition']}: at {p['next_offset']} of "
                      f"{p['end_offset']} (lag {p['lag']})", highlight=False)


async def _status(settings: Settings, schema: str) -> dict[str, Any]:
    topics = Topics.of(settings)
    store = projection_store(settings, topics, schema)
    scanner = RangeScanner(settings)
    await scanner.start()
    try:
        stored = {(r["topic"], r["partition"]): r["next_offset"] for r in await store.offsets()}
        async with store.connection() as conn:
            agents = await conn.fetchval("SELECT count(*) FROM agents")
            streams = await conn.fetchval("SELECT count(*) FROM streams")
        partitions = []
        for topic in (topics.events, topics.alerts):
            for p in range(await scanner.partitions(topic)):
                end = await scanner.end(TopicPartition(topic, p))
                at = stored.get((topic, p), 0)
                partitions.append({"topic": topic, "partition": p, "next_offset": at,
                                   "end_offset": end, "lag": max(end - at, 0)})
    except ProjectionUnavailableError as exc:
        raise UnavailableError(str(exc)) from exc
    finally:
        await scanner.close()
        await store.close()
    return {"schema": schema, "agents": agents, "streams": streams,
            "lag": sum(int(p["lag"]) for p in partitions), "partitions": partitions}
