"""``ares schedules``: tasks assigned to an agent on every tick of a cron expression.

create, pause, resume and delete are commands (``schedule.*`` on ``ares.commands``, keyed
``schedule:<name>``) answered by the owner of that key's partition, which keeps the schedule
on the compacted ``ares.schedules`` and fires its ticks; list only reads ``ares.schedules``.

Exit codes: 0 ok, 1 refused by the owner (its message: no such schedule, another definition
under that name) or no such agent, 2 bad flag (a cron expression, time zone, name or JSON that
does not parse), 4 broker unreachable, topics missing or no owner answered.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import click
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from rich import box
from rich.console import Console
from rich.table import Table

from ares.cli.common import err_console, run_async, settings_of
from ares.cli.send import ISSUER, send_command
from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.store import KafkaEventStore
from ares.events.wire.canonical import canonical_json
from ares.lifecycle.state import AGENT_STARTED
from ares.logs import quiet_aiokafka
from ares.schedules import model as sm
from ares.schedules.model import Cron, Schedule, ScheduleError
from ares.tasks import wait_for
from ares.topics import EVENTS, SCHEDULES, load_topics
from ares.views.agents import NoSuchAgentError

_TOPIC_WAIT_S = 5.0

_TIMEOUT_HELP = "seconds to wait for the owner's reply  [default: ARES_REQUEST_TIMEOUT_S]"
_timeout = click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
                        metavar="SECONDS", help=_TIMEOUT_HELP)


@click.group()
def schedules() -> None:
    """Schedules: assign a task to an agent on every tick of a cron expression.

    \b
    Example, every weekday at 9:00 in Paris:
      ares schedules create digest --agent mailer-1 --cron "0 9 * * MON-FRI" \\
          --timezone Europe/Paris --input '{"kind": "daily"}'
    \b
    Each tick assigns one task, id "schedule:NAME:<tick time, UTC>" (ares agents status
    shows it). Schedules are owned like agents: the runtime manager that owns the
    partition of "schedule:NAME" fires them; when it dies another takes over, and a tick
    fires once, never twice. Ticks missed while no owner ran follow --catchup.
    create, pause, resume and delete go through that owner (`ares run runtime-manager`);
    list only reads the ares.schedules topic.
    Exit codes: 0 ok, 1 refused by the owner (its message) or no such agent,
    2 bad flag (e.g. a cron expression that does not parse),
    4 broker unreachable, topics missing or no owner answered.
    """


@schedules.command()
@click.argument("name")
@click.option("--agent", "agent_id", required=True, metavar="ID",
              help="the agent each tick assigns a task to (it must exist)")
@click.option("--cron", "cron", required=True, metavar="EXPR",
              help="when: 5 fields 'minute hour day-of-month month day-of-week' "
                   "(e.g. '0 9 * * MON-FRI', '*/15 * * * *'), 6 with seconds first "
                   "('*/5 * * * * *': every 5 seconds), or @hourly, @daily, @weekly, "
                   "@monthly, @yearly")
@click.option("--input", "input_json", default="null", show_default=True, metavar="JSON",
              help="the input of every task it assigns, any JSON value")
@click.option("--catchup", type=click.Choice(sm.CATCHUPS), default=sm.ONCE,
              show_default=True,
              help="ticks missed while no owner ran (every worker down, a takeover): "
                   "once fires one tick, for the latest missed time; skip fires none "
                   "and waits for the next")
@click.option("--timezone", default=sm.DEFAULT_TIMEZONE, show_default=True, metavar="TZ",
              help="the IANA time zone the cron expression is read in, e.g. Europe/Paris "
                   "(daylight saving time included)")
@_timeout
@click.pass_context
def create(ctx: click.Context, name: str, agent_id: str, cron: str, input_json: str,
           catchup: str, timezone: str, timeout: float | None) -> None:
    """Create schedule NAME: a task for agent ID on every tick of --cron.

    Its first tick is the first after now. Creating the same schedule again is a no-op;
    another definition under an existing NAME is refused (delete it first).
    """
    try:
        sm.check_name(name)
    except ScheduleError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    try:
        sm.zone(timezone)
    except ScheduleError as exc:
        raise click.BadParameter(str(exc), param_hint="--timezone") from None
    try:
        Cron.parse(cron, timezone)
    except ScheduleError as exc:
        raise click.BadParameter(str(exc), param_hint="--cron") from None
    task_input = _json_value(input_json, "--input")
    settings = settings_of(ctx)
    with quiet_aiokafka():
        run_async(_check_agent(settings, agent_id))
    reply = send_command(ctx, lambda c: c.command(
        sm.CREATE, sm.key_of(name), agent_id=agent_id, cron=cron,
        input_json=canonical_json(task_input), catchup=catchup, timezone=timezone), timeout)
    click.echo(f"{name}: {reply.message or 'created'} (agent {agent_id}, cron {cron!r}, "
               f"{timezone}, catch-up {catchup})")


@schedules.command()
@click.argument("name")
@_timeout
@click.pass_context
def pause(ctx: click.Context, name: str, timeout: float | None) -> None:
    """Pause schedule NAME: no tick fires until `ares schedules resume NAME` (the ticks of
    the pause are not caught up)."""
    reply = send_command(ctx, lambda c: c.command(sm.PAUSE, _key(name), reason=ISSUER), timeout)
    click.echo(f"{name}: {reply.message or 'paused'}")


@schedules.command()
@click.argument("name")
@_timeout
@click.pass_context
def resume(ctx: click.Context, name: str, timeout: float | None) -> None:
    """Resume schedule NAME: it fires again from the next tick after now."""
    reply = send_command(ctx, lambda c: c.command(sm.RESUME, _key(name), reason=ISSUER), timeout)
    click.echo(f"{name}: {reply.message or 'resumed'}")


@schedules.command()
@click.argument("name")
@_timeout
@click.pass_context
def delete(ctx: click.Context, name: str, timeout: float | None) -> None:
    """Delete schedule NAME: no tick fires after it (the tasks it assigned stay)."""
    reply = send_command(ctx, lambda c: c.command(sm.DELETE, _key(name), reason=ISSUER), timeout)
    click.echo(f"{name}: {reply.message or 'deleted'}")


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per schedule per line (JSON Lines)")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every schedule: agent, cron, time zone, catch-up, state, last and next tick.

    \b
    --json keys: name, key, agent_id, cron, timezone, catchup, input, paused, issuer,
    created_at, since, last_tick, ticks, fired_by (the worker of the last tick),
    updated_at, next_tick (as its owner would decide now; null when paused).
    No schedule at all prints nothing on stdout (exit 0).
    """
    settings = settings_of(ctx)
    with quiet_aiokafka():
        found = run_async(_read_schedules(settings))
    now = datetime.now(UTC)
    if as_json:
        for schedule in found:
            click.echo(json.dumps(schedule.to_json(now), sort_keys=True,
                                  separators=(",", ":")))
    elif found:
        _stdout().print(_table(found, now))
    if not found:
        _note(f"no schedules in {load_topics(settings).name(SCHEDULES)}")


# -- helpers ----------------------------------------------------------------------------


def _key(name: str) -> str:
    try:
        return sm.key_of(name)
    except ScheduleError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None


def _json_value(raw: str, flag: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=flag) from None
    except RecursionError:
        raise click.BadParameter("JSON nested too deeply", param_hint=flag) from None


async def _check_agent(settings: Settings, agent_id: str) -> None:
    """Refuse a schedule for an agent that was never started (its ticks would be refused)."""
    topic = load_topics(settings).name(EVENTS)
    what = "connecting the event reader"
    try:
        store = await wait_for(KafkaEventStore.open(settings, owned=[], topic=topic),
                                       settings.request_timeout_s + _TOPIC_WAIT_S + 1)
    except (KafkaError, TimeoutError) as exc:
        raise translate(exc, what) from exc
    try:
        events = await store.read(agent_id)
    except KafkaError as exc:
        raise translate(exc, f"reading stream {agent_id!r} from {topic}") from exc
    finally:
        await store.close()
    if not any(e.type == AGENT_STARTED for e in events):
        raise NoSuchAgentError(agent_id)


async def _read_schedules(settings: Settings) -> list[Schedule]:
    """The latest record of every schedule (read_committed, no group, no ownership)."""
    topic = load_topics(settings).name(SCHEDULES)
    try:
        scanner = await PartitionScanner.open(settings)
    except (KafkaError, TimeoutError) as exc:
        raise translate(exc, "connecting the schedules reader") from exc
    latest: dict[str, Schedule] = {}
    try:
        for partition in range(await scanner.partitions(topic)):
            async for record in scanner.scan_records(TopicPartition(topic, partition)):
                key = record.key.decode(errors="replace") if record.key is not None else ""
                if record.value is None:
                    latest.pop(key, None)
                    continue
                try:
                    latest[key] = Schedule.decode(record.value)
                except SchemaError as exc:
                    latest.pop(key, None)
                    _note(f"unreadable schedule record {topic}/{partition}@{record.offset} "
                          f"(key {key!r}): {exc}")
    except KafkaError as exc:
        raise translate(exc, f"reading {topic}") from exc
    finally:
        await scanner.close()
    return sorted(latest.values(), key=lambda s: s.name)


def _table(found: list[Schedule], now: datetime) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for column in ("NAME", "AGENT", "CRON", "TZ", "CATCHUP", "STATE", "LAST TICK",
                   "NEXT TICK", "TICKS", "FIRED BY"):
        table.add_column(column, overflow="fold")
    for s in found:
        try:
            next_tick = s.next_tick(now)
        except ScheduleError:
            next_tick = None
        table.add_row(s.name, s.agent_id, s.cron, s.timezone, s.catchup,
                      "paused" if s.paused else "active", _when(s.last_tick),
                      _when(next_tick), str(s.ticks), s.fired_by or "-")
    return table


def _when(when: datetime | None) -> str:
    return "-" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _stdout() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else 240)


def _note(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, style="dim")
