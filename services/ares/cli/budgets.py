"""``ares budgets``: fleet-wide LLM budgets per tenant.

``set`` writes a tenant's limits to the compacted ``ares.budget-limits`` (key tenant); the
budget keeper (``ares run budget-keeper``) picks them up and every runtime manager acts on
the states it publishes to ``ares.budgets``. ``status`` reads both topics (no group).

Exit codes: 0 ok, 1 no such tenant (status TENANT), 2 bad flag, 4 broker unreachable or
topics missing (`ares topics apply`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import click
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from rich import box
from rich.console import Console
from rich.table import Table

from ares.budgets.limits import apply_limits, apply_state, assign_all, read_to_end
from ares.budgets.model import BudgetLimits, BudgetState, check_tenant
from ares.budgets.windows import assess, current
from ares.cli.common import err_console, run_async, settings_of
from ares.config import Settings
from ares.errors import AresError
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import new_consumer
from ares.events.kafka.retry import connect
from ares.logs import quiet_aiokafka
from ares.topics import BUDGET_LIMITS, BUDGETS, load_topics

NONE = "none"


class NoSuchTenantError(AresError):
    exit_code = 1


@click.group()
def budgets() -> None:
    """Fleet-wide LLM budgets per tenant: tokens per minute, USD per UTC day.

    \b
    Example: at most 20,000 tokens a minute and $50 a day for tenant acme:
      ares budgets set acme --tokens-per-minute 20000 --usd-per-day 50
      ares budgets status acme
    \b
    An agent's LLM calls count for the tenant of its config key "tenant" ("default"
    without one). The budget keeper (`ares run budget-keeper`) adds up ares.usage and
    publishes each tenant's state to ares.budgets; before every provider call the runtime
    asks that state. Over budget, a call waits for the window to end (policy "wait", the
    default) or fails with BudgetExceeded (policy "fail": the agent config key
    "budget_policy", or ctx.llm(..., budget_policy="fail")).
    Exit codes: 0 ok, 1 no such tenant, 2 bad flag, 4 broker unreachable or topics
    missing.
    """


class _Remove:
    """``none`` on the command line: that limit removed (a missing flag is None)."""


REMOVE = _Remove()


class _Limit(click.ParamType):
    """A positive number, or "none" (that limit removed)."""

    def __init__(self, integer: bool) -> None:
        self.integer = integer
        self.name = "N|none" if integer else "USD|none"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | float | _Remove:
        text = str(value).strip().lower().replace("_", "")
        if text == NONE:
            return REMOVE
        try:
            number: int | float = int(text) if self.integer else float(text)
        except ValueError:
            kind = "a whole number" if self.integer else "an amount in USD"
            self.fail(f"{value!r} is not {kind} (or 'none')", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"must be > 0 (got {value!r}; 'none' removes the limit)", param, ctx)
        return number


@budgets.command("set")
@click.argument("tenant")
@click.option("--tokens-per-minute", type=_Limit(integer=True), default=None,
              help="prompt + completion tokens the tenant may spend per UTC minute "
                   "(tumbling windows), fleet-wide; 'none' removes this limit")
@click.option("--usd-per-day", type=_Limit(integer=False), default=None,
              help="USD the tenant may spend per UTC day (prices: ARES_LLM_PRICES_FILE); "
                   "'none' removes this limit")
@click.option("--clear", is_flag=True, help="remove both limits: the tenant is unlimited")
@click.pass_context
def set_(ctx: click.Context, tenant: str, tokens_per_minute: Any, usd_per_day: Any,
         clear: bool) -> None:
    """Set (or change, or --clear) the limits of TENANT.

    A flag left out keeps that limit as it is. Takes effect within a second on a running
    keeper and its runtimes; a call already admitted is not stopped.
    """
    try:
        check_tenant(tenant)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TENANT") from None
    given = {k: None if v is REMOVE else v
             for k, v in (("tokens_per_minute", tokens_per_minute), ("usd_per_day", usd_per_day))
             if v is not None}
    if clear and given:
        raise click.UsageError("--clear removes both limits: give it alone")
    if not clear and not given:
        raise click.UsageError("give --tokens-per-minute, --usd-per-day (or both), or --clear")
    settings = settings_of(ctx)
    with quiet_aiokafka():
        limits = run_async(_set(settings, tenant, None if clear else given))
    if limits is None or limits.unlimited:
        click.echo(f"{tenant}: no limits (unlimited)")
    else:
        click.echo(f"{tenant}: {_describe(limits)}")


@budgets.command()
@click.argument("tenant", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per tenant per line (JSON Lines)")
@click.pass_context
def status(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """Every tenant's limits and spending (or TENANT's): tokens this minute, USD today,
    over or ok.

    \b
    Limits come from ares.budget-limits, spending from the keeper's states on
    ares.budgets, judged at the current time (a minute that has ended counts 0).
    --json keys: tenant, tokens_per_minute, usd_per_day (null: unlimited),
    minute_start (epoch s), minute_tokens, day (UTC), day_usd, over, reason,
    updated_at (epoch s of the keeper's state; null: no state yet).
    """
    settings = settings_of(ctx)
    with quiet_aiokafka():
        limits, states = run_async(_read(settings))
    now = time.time()
    tenants = sorted(set(limits) | set(states))
    if tenant is not None:
        if tenant not in tenants:
            raise NoSuchTenantError(f"no limits and no usage known for tenant {tenant!r}")
        tenants = [tenant]
    rows = [_row(t, limits.get(t, BudgetLimits()), states.get(t), now) for t in tenants]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=True, separators=(",", ":")))
        return
    if not rows:
        err_console.print("no budgets: set one with `ares budgets set TENANT ...`",
                          markup=False, highlight=False, style="dim")
        return
    _stdout().print(_table(rows, now))


# -- Kafka --------------------------------------------------------------------------------


async def _set(settings: Settings, tenant: str,
               given: dict[str, Any] | None) -> BudgetLimits | None:
    """Merge ``given`` into the tenant's current limits and write them (None: a tombstone,
    the limits cleared); the limits written."""
    topic = load_topics(settings).name(BUDGET_LIMITS)
    value: BudgetLimits | None = None
    if given is not None:
        existing, _ = await _read(settings, states=False)
        base = existing.get(tenant, BudgetLimits()).to_json()
        base.update(given)
        value = BudgetLimits(**base)
        if value.unlimited:
            value = None
    producer = await connect(
        lambda: AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all",
                                 enable_idempotence=True, **settings.kafka_options()),
        what="connecting to Kafka", settings=settings)
    try:
        await producer.send_and_wait(topic, None if value is None else value.encode(),
                                     key=tenant.encode())
    except KafkaError as exc:
        raise translate(exc, f"writing {topic}") from exc
    finally:
        await producer.stop()
    return value


async def _read(settings: Settings, *, states: bool = True
                ) -> tuple[dict[str, BudgetLimits], dict[str, BudgetState]]:
    plan = load_topics(settings)
    consumer = await connect(lambda: new_consumer(settings, fetch_max_wait_ms=50),
                             what="connecting to Kafka", settings=settings)
    limits: dict[str, BudgetLimits] = {}
    found: dict[str, BudgetState] = {}
    try:
        await _read_topic(consumer, plan.name(BUDGET_LIMITS),
                          lambda r: apply_limits(limits, r), settings)
        if states:
            await _read_topic(consumer, plan.name(BUDGETS),
                              lambda r: apply_state(found, r), settings)
    finally:
        await consumer.stop()
    return limits, found


async def _read_topic(consumer: AIOKafkaConsumer, topic: str, apply: Any,
                      settings: Settings) -> None:
    try:
        tps = await assign_all(consumer, topic)
        await read_to_end(consumer, tps, apply, timeout_s=settings.request_timeout_s * 3)
    except (TimeoutError, KafkaError) as exc:
        raise translate(exc, f"reading {topic}") from exc


# -- output -------------------------------------------------------------------------------


def _row(tenant: str, limits: BudgetLimits, state: BudgetState | None,
         now: float) -> dict[str, Any]:
    row: dict[str, Any] = {"tenant": tenant, **limits.to_json(), "minute_start": None,
                           "minute_tokens": 0, "day": None, "day_usd": 0.0, "over": False,
                           "reason": "", "updated_at": None}
    if state is not None:
        state = current(state, now)  # an ended minute or day counts 0
        # Judged with the configured limits: the keeper may not have seen a change yet.
        which, reason = assess(limits, state.minute_start, state.minute_tokens, state.day,
                               state.day_usd)
        row.update(minute_start=state.minute_start, minute_tokens=state.minute_tokens,
                   day=state.day, day_usd=state.day_usd, over=which is not None,
                   reason=reason, updated_at=state.updated_at)
    return row


def _table(rows: list[dict[str, Any]], now: float) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for column in ("TENANT", "TOKENS/MIN", "USD/DAY", "TOKENS THIS MIN", "USD TODAY",
                   "STATUS", "UPDATED"):
        table.add_column(column, overflow="fold")
    for r in rows:
        tpm, usd = r["tokens_per_minute"], r["usd_per_day"]
        updated = "-" if r["updated_at"] is None else f"{max(now - r['updated_at'], 0):.0f}s ago"
        table.add_row(r["tenant"], "-" if tpm is None else str(tpm),
                      "-" if usd is None else f"{usd:g}", str(r["minute_tokens"]),
                      f"{r['day_usd']:.4f}", f"OVER: {r['reason']}" if r["over"] else "ok",
                      updated)
    return table


def _describe(limits: BudgetLimits) -> str:
    tpm = limits.tokens_per_minute
    usd = limits.usd_per_day
    return (f"{'unlimited' if tpm is None else tpm} tokens/minute, "
            f"{'unlimited' if usd is None else f'${usd:g}'} USD/day")


def _stdout() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else 240)
