"""``ares alerts``: operator alerts on ``ares.alerts`` (death loops, lost workers, late
resurrections, quarantines, integrity failures, tool calls in doubt).

Read-only: no consumer group, ``read_committed`` (an alert raised inside an aborted
transaction never shows).

Exit codes: 0 ok (also when --timeout ends it), 2 bad flag, 4 broker unreachable or topic
missing (`ares topics apply`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import click
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ares.cli import render
from ares.cli.common import err_console, run_async, settings_of
from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.health_checker.alerts import alert_json, decode_alert, seek_to_time
from ares.tasks import wait_for
from ares.topics import ALERTS, load_topics

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@click.group()
def alerts() -> None:
    """Operator alerts on ares.alerts: `ares alerts tail`."""


@alerts.command()
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per line: id, stream_id, kind, severity, message, source, "
                   "timestamp, details")
@click.option("--kind", "kinds", multiple=True, metavar="K",
              help="only alerts of kind K (repeatable): death_loop, worker_lost, "
                   "resurrection_late, agent_quarantined, integrity_failure, tool_in_doubt")
@click.option("--max", "max_alerts", type=click.IntRange(min=1), metavar="N",
              help="stop after N alerts")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="stop after SECONDS, alerts or not")
@click.option("--since", default="1h", show_default=True, metavar="DURATION",
              help="first show the alerts of the last DURATION (30s, 10m, 1h, 7d; 0: none)")
@click.pass_context
def tail(ctx: click.Context, *, as_json: bool, kinds: tuple[str, ...],
         max_alerts: int | None, timeout: float | None, since: str) -> None:
    """The recent alerts, oldest first, then new ones as they come, until Ctrl-C, --max or
    --timeout.

    Human lines: time, severity, kind, agent (or worker), message.
    """
    settings = settings_of(ctx)
    since_s = _duration(since)
    with contextlib.suppress(KeyboardInterrupt):
        run_async(_tail(settings, load_topics(settings).name(ALERTS), set(kinds), as_json,
                        max_alerts, timeout, since_s))


async def _tail(settings: Settings, topic: str, kinds: set[str], as_json: bool,
                max_alerts: int | None, stop_after_s: float | None, since_s: float) -> None:
    consumer = new_consumer(settings, fetch_max_wait_ms=200, **settings.kafka_options())
    try:
        await _follow(consumer, settings, topic, kinds, as_json, max_alerts, stop_after_s,
                      since_s)
    finally:
        await consumer.stop()


async def _follow(consumer: AIOKafkaConsumer, settings: Settings, topic: str,
                  kinds: set[str], as_json: bool, max_alerts: int | None,
                  stop_after_s: float | None, since_s: float) -> None:
    try:
        await wait_for(consumer.start(), settings.request_timeout_s)
        partitions = await topic_partitions(consumer, topic)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        ends = await seek_to_time(consumer, tps, time.time() - since_s)
    except (KafkaError, TimeoutError) as exc:
        raise translate(exc, f"reading {topic}") from exc
    shown = 0

    def show(record: dict[str, Any]) -> bool:
        nonlocal shown
        if kinds and record.get("kind") not in kinds:
            return False
        click.echo(_line(record, as_json))
        shown += 1
        return max_alerts is not None and shown >= max_alerts

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(stop_after_s):
            backlog = await _backlog(consumer, tps, ends)
            for record in sorted(backlog, key=lambda r: r["timestamp"]):
                if show(record):
                    return
            described = f" ({', '.join(sorted(kinds))})" if kinds else ""
            _note(f"following {topic}{described}; Ctrl-C to stop")
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    for value in (r.value for r in records):
                        fresh = _decode(value)
                        if fresh is not None and show(fresh):
                            return


async def _backlog(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                   ends: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    """The alerts up to the ends at the start (shown sorted by time across partitions)."""
    found: list[dict[str, Any]] = []
    while (open_tps := [tp for tp in tps if await consumer.position(tp) < ends[tp]]):
        batch = await consumer.getmany(*open_tps, timeout_ms=500)
        for records in batch.values():
            for record in records:
                end = ends[TopicPartition(record.topic, record.partition)]
                if record.offset < end and (alert := _decode(record.value)) is not None:
                    found.append(alert)
    return found


def _decode(value: bytes | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        return decode_alert(value)
    except SchemaError as exc:
        _note(f"skipping an undecodable record: {exc}")
        return None


def _line(record: dict[str, Any], as_json: bool) -> str:
    data = alert_json(record)
    if as_json:
        return render.json_line(data)
    who = data["stream_id"] or data["details"].get("worker", "-")
    return render.one_line(f"{render.format_time(record.get('timestamp'))} "
                           f"{data['severity']:<8} {data['kind']:<18} {who}: {data['message']}")


def _duration(text: str) -> float:
    value = text.strip().lower()
    unit = _DURATION_UNITS.get(value[-1:]) if value else None
    number = value[:-1] if unit is not None else value
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration (30s, 10m, 1h, 7d)",
                                 param_hint="--since") from None
    if seconds < 0:
        raise click.BadParameter("must not be negative", param_hint="--since")
    return seconds


def _note(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, style="dim")
