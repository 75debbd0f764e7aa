"""``ares events``: the event log from the command line — read, tail, dump.

Every command here only reads: it owns no partition and joins no consumer group, so it can
run beside the runtime managers at any time without moving or fencing anything. Records
are read with ``read_committed``: what an aborted or open transaction wrote is never shown.

Output: one human line per record, or with ``--json`` one JSON object per line (JSON Lines,
for jq and scripts). Data goes to stdout, notes to stderr, so a pipe only sees data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncGenerator, Iterator

import click
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ares.cli import render
from ares.cli.common import err_console, run_async, settings_of
from ares.config import Settings
from ares.errors import UnavailableError
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import PartitionScanner, new_consumer
from ares.events.kafka.retry import connect
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Direction, Event, EventFilter
from ares.logs import quiet_aiokafka
from ares.summaries.reader import SummarisedReader
from ares.topics import DLQ, EVENTS, TopicPlan, load_topics

_FETCH_TIMEOUT_MS = 500

_JSON_HELP = "one JSON object per line (JSON Lines)"


@click.group()
def events() -> None:
    """The event log: read a stream, follow live events, dump any ares topic.

    \b
    read, tail and dump only read (read_committed, no consumer group, no partition
    ownership): they are safe to run beside running services. append goes through the
    stream's owner (`ares run runtime-manager`).
    Exit codes: 0 ok, 1 error, 2 bad flag, 3 version conflict (append),
    4 broker unreachable, topics missing (`ares topics apply`) or no owner answered.
    """


# -- read ------------------------------------------------------------------------------------


@events.command()
@click.argument("stream")
@click.option("--from-version", type=click.IntRange(min=1), metavar="N",
              help="first version to show (with --backward: the last, counting down)")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="at most N events")
@click.option("--backward", is_flag=True, help="newest first")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.pass_context
def read(ctx: click.Context, *, stream: str, from_version: int | None, limit: int | None,
         backward: bool, as_json: bool) -> None:
    """Events of one STREAM (an agent id), oldest first.

    \b
    Human output: version, time, type, [module], payload (cut to one line).
    --json fields: id, stream_id, type, module, version, timestamp, payload, metadata,
    prev_hash, hash.
    A stream with no events prints nothing on stdout and a note on stderr (exit 0).
    """
    settings = settings_of(ctx)
    topic = load_topics(settings).name(EVENTS)
    direction = Direction.BACKWARD if backward else Direction.FORWARD
    with _quiet_broken_pipe():
        run_async(_read(settings, topic, stream, from_version, limit, direction, as_json))


async def _read(settings: Settings, topic: str, stream: str, from_version: int | None,
                limit: int | None, direction: Direction, as_json: bool) -> None:
    # Trimmed history reads as the compactor's anchored summaries (event.summary).
    store = await SummarisedReader.wrap(await _open_reader(settings, topic), settings)
    try:
        found = await store.read(stream, from_version, limit, direction)
        for event in found:
            click.echo(_event_text(event, as_json))
        if found:
            return
        if from_version is None:
            _note(f"stream {stream!r} has no events in {topic}")
            return
        version = await store.stream_version(stream)
        if version == 0:
            _note(f"stream {stream!r} has no events in {topic}")
        else:
            _note(f"stream {stream!r} is at version {version}: no event "
                  + (f"at or below version {from_version}" if direction is Direction.BACKWARD
                     else f"from version {from_version}"))
    except KafkaError as exc:
        raise translate(exc, f"reading stream {stream!r} from {topic}") from exc
    finally:
        await store.close()


# -- tail ------------------------------------------------------------------------------------


@events.command()
@click.option("--stream", metavar="S", help="only this stream (agent id)")
@click.option("--type", "type_prefix", metavar="PREFIX",
              help="only event types starting with PREFIX (e.g. tool.call.)")
@click.option("--module", metavar="M", help="only events emitted by module M")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.option("--max", "max_events", type=click.IntRange(min=1), metavar="N",
              help="stop after N events")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="stop after SECONDS, events or not")
@click.pass_context
def tail(ctx: click.Context, *, stream: str | None, type_prefix: str | None,
         module: str | None, as_json: bool, max_events: int | None,
         timeout: float | None) -> None:
    """Follow live events (appended from now on) until Ctrl-C, --max or --timeout.

    Each event shows its stream, then as `read` does. Ctrl-C (SIGINT) or SIGTERM ends it
    cleanly with exit 0, as do --max and --timeout.
    """
    settings = settings_of(ctx)
    topic = load_topics(settings).name(EVENTS)
    event_filter = EventFilter(stream_id=stream, type_prefix=type_prefix, module=module)
    with _quiet_broken_pipe(), contextlib.suppress(KeyboardInterrupt):
        run_async(_tail(settings, topic, event_filter, as_json, max_events, timeout))


async def _tail(settings: Settings, topic: str, event_filter: EventFilter, as_json: bool,
                max_events: int | None, stop_after_s: float | None) -> None:
    terminated = _stop_on_sigterm()
    try:
        await _follow(settings, topic, event_filter, as_json, max_events, stop_after_s)
    except asyncio.CancelledError:
        if not terminated.is_set():
            raise  # Ctrl-C: asyncio.run turns it into KeyboardInterrupt, which tail ends


async def _follow(settings: Settings, topic: str, event_filter: EventFilter, as_json: bool,
                  max_events: int | None, stop_after_s: float | None) -> None:
    store = await _open_reader(settings, topic)
    try:
        async with store.subscribe(event_filter) as subscription:
            _note(f"following {topic}{_describe(event_filter)}; Ctrl-C to stop")
            shown = 0
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(stop_after_s):
                    async for event in subscription:
                        click.echo(_event_text(event, as_json, with_stream=True))
                        shown += 1
                        if max_events is not None and shown >= max_events:
                            break
    finally:
        await store.close()


def _describe(event_filter: EventFilter) -> str:
    parts = [f"{label} {value!r}" for label, value in (
        ("stream", event_filter.stream_id), ("type prefix", event_filter.type_prefix),
        ("module", event_filter.module)) if value is not None]
    return f" ({', '.join(parts)})" if parts else ""


def _stop_on_sigterm() -> asyncio.Event:
    """SIGTERM ends a tail like Ctrl-C does: cancel the main task, clean up, exit 0."""
    terminated = asyncio.Event()
    task = asyncio.current_task()

    def on_sigterm() -> None:
        terminated.set()
        if task is not None:
            task.cancel()

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
    return terminated


# -- dump ------------------------------------------------------------------------------------


@events.command()
@click.option("--topic", "topic_name", required=True, metavar="T",
              help="logical name (ares.events, ares.commands, ares.replies, ares.snapshots, "
                   "ares.heartbeats, ares.alerts, ares.dlq, ...) or a topic's full name")
@click.option("--partition", type=click.IntRange(min=0), metavar="P",
              help="only partition P  [default: every partition, in order]")
@click.option("--from-offset", type=click.IntRange(min=0), metavar="O",
              help="start at offset O (of each partition scanned)  [default: the log start]")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="at most N records")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.pass_context
def dump(ctx: click.Context, *, topic_name: str, partition: int | None,
         from_offset: int | None, limit: int | None, as_json: bool) -> None:
    """Decode the records of any ares topic, the dead-letter queue included.

    Reads every partition (or P) from the log start (or O) up to its end at start
    (read_committed), prints each record and stops. Needs only the schemas: no owner.

    \b
    Per record: partition:offset, timestamp, key, then the decoded record. On ares.dlq
    also the dead-letter headers (reason, detail, source topic/partition/offset, time)
    and the original bytes. A record that does not decode is shown with the codec's
    reason and its bytes; it never stops the dump.

    \b
    --json keys (null where not relevant): topic, partition, offset, timestamp, key,
    key_base64, headers, size, record, value, error, value_base64, dead_letter.
    """
    settings = settings_of(ctx)
    plan = load_topics(settings)
    topic, known = _resolve_topic(plan, topic_name)
    dead_letters = topic.endswith(DLQ)  # this environment's DLQ, or another's by full name
    with _quiet_broken_pipe():
        run_async(_dump(settings, topic, known, partition, from_offset, limit, as_json,
                        dead_letters))


def _resolve_topic(plan: TopicPlan, name: str) -> tuple[str, bool]:
    """(the cluster name, whether it is one of this environment's ares topics)."""
    for spec in plan.topics:
        if name in (spec.logical, spec.name):
            return spec.name, True
    return name, False


async def _dump(settings: Settings, topic: str, known: bool, partition: int | None,
                from_offset: int | None, limit: int | None, as_json: bool,
                dead_letters: bool) -> None:
    with quiet_aiokafka():
        consumer = await connect(lambda: new_consumer(settings, fetch_max_wait_ms=5),
                                 what="connecting the dump reader", settings=settings)
    try:
        count = await _partition_count(consumer, topic, known)
        if partition is not None and partition >= count:
            raise click.BadParameter(f"{topic} has {count} partition(s): 0..{count - 1}",
                                     param_hint="'--partition'")
        shown = 0
        for p in [partition] if partition is not None else range(count):
            scan = _scan(consumer, settings, TopicPartition(topic, p), from_offset)
            async with contextlib.aclosing(scan):
                async for raw in scan:
                    dumped = render.inspect_record(raw, dead_letters=dead_letters)
                    if as_json:
                        click.echo(render.json_line(render.dumped_json(dumped)))
                    else:
                        click.echo("\n".join(render.dumped_lines(dumped)))
                    shown += 1
                    if limit is not None and shown >= limit:
                        return
        if shown == 0:
            where = f"partition {partition} of {topic}" if partition is not None else topic
            _note(f"no records in {where}" + (f" from offset {from_offset}"
                                              if from_offset is not None else ""))
    except KafkaError as exc:
        raise translate(exc, f"reading {topic}") from exc
    finally:
        await consumer.stop()


async def _partition_count(consumer: AIOKafkaConsumer, topic: str, known: bool) -> int:
    """Partitions of ``topic``; a missing ares topic is exit 4, any other name a usage error."""
    try:
        return await PartitionScanner(consumer).partitions(topic)
    except UnavailableError:
        if known:
            raise
    except KafkaError as exc:
        raise translate(exc, f"reading the metadata of {topic}") from exc
    raise click.BadParameter(
        f"no topic {topic!r} on the cluster, and it is not an ares topic of this environment "
        "(give a logical name such as ares.events, or a topic's full name)",
        param_hint="'--topic'")


async def _scan(consumer: AIOKafkaConsumer, settings: Settings, tp: TopicPartition,
                start: int | None) -> AsyncGenerator[render.RawRecord, None]:
    """Raw records of ``tp`` from ``start`` to its last stable offset at the time of call."""
    first = int((await consumer.beginning_offsets([tp]))[tp])
    end = int((await consumer.end_offsets([tp]))[tp])
    # Clamp: the fetcher would answer an offset out of range by resetting to the log start,
    # and a start beyond the end would dump the whole partition instead of nothing.
    position = first if start is None else max(start, first)
    if position >= end:
        return
    consumer.assign([tp])
    consumer.seek(tp, position)
    progress_at = time.monotonic()
    while position < end:
        batch = await consumer.getmany(tp, timeout_ms=_FETCH_TIMEOUT_MS)
        for record in batch.get(tp, ()):
            if record.offset >= end:
                return
            yield render.RawRecord(
                topic=tp.topic, partition=tp.partition, offset=record.offset,
                timestamp_ms=record.timestamp, key=record.key, value=record.value,
                headers=tuple(record.headers or ()))
        now, before = time.monotonic(), position
        position = await consumer.position(tp)
        if position != before:
            progress_at = now
        elif now - progress_at > settings.request_timeout_s:
            raise UnavailableError(
                f"{tp.topic}/{tp.partition}: no progress at offset {position} (end {end}) for "
                f"{settings.request_timeout_s:.0f}s; is the broker still up? (`ares dev status`)")


# -- shared ----------------------------------------------------------------------------------


async def _open_reader(settings: Settings, topic: str) -> KafkaEventStore:
    """A store that owns no partition: it scans the stream's partition, filtering by key."""
    with quiet_aiokafka():
        return await KafkaEventStore.open(settings, owned=[], topic=topic)


def _event_text(event: Event, as_json: bool, *, with_stream: bool = False) -> str:
    if as_json:
        return render.json_line(render.event_json(event))
    return render.event_line(event, with_stream=with_stream)


def _note(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, style="dim")


@contextlib.contextmanager
def _quiet_broken_pipe() -> Iterator[None]:
    """`ares events dump ... | head` closes stdout early: stop quietly, no traceback."""
    try:
        yield
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that fails quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, sys.stdout.fileno())
