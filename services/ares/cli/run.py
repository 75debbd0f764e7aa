"""``ares run <service>``: the long-running services."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import click

from ares import logs
from ares.budgets.keeper import BudgetKeeper
from ares.cli.common import run_async, settings_of
from ares.cli.compaction import compaction_config, compaction_options
from ares.compactor.service import CompactorService
from ares.config import Settings
from ares.events.kafka import internals
from ares.events.kafka.broker_wait import wait_for_broker
from ares.events.signing import configured_signer
from ares.gc_policy import apply_gc_policy
from ares.health_checker.cli import health_checker_options, health_config
from ares.health_checker.service import HealthChecker
from ares.probes import DEFAULT_PORTS
from ares.replay_reader.service import ReplayReaderService
from ares.replay_reader.wiring import ENV_SCHEMA
from ares.runtime_manager.host import HostConfig
from ares.runtime_manager.service import RuntimeManager
from ares.runtime_manager.shutdown import ShutdownBudget
from ares.service import Service, serve
from ares.topics import load_topics

log = logging.getLogger(__name__)
BUDGET_KEEPER_PORT = 8084
# Sub-second failover out of the box (docs/health.md, "Worker failover"): with the health
# checker's lost-worker removal, a SIGKILLed worker is silent for 0.75 s, removed from the
# group, and the survivors hear of the rebalance within 250 ms.
FAST_FAILOVER_HEARTBEAT_S = 0.25
FAST_FAILOVER_GROUP_HEARTBEAT_MS = 250


@click.group()
def run() -> None:
    """Run one of the ares services in the foreground (SIGTERM/Ctrl-C stops it gracefully;
    a second signal forces)."""


@run.command("runtime-manager")
@click.option("--instance-id", envvar="ARES_INSTANCE_ID", show_envvar=True,
              help="Stable member identity (e.g. the pod name) for Kafka static membership: "
                   "a restart with the same id gets its partitions back without a rebalance.")
@click.option("--session-timeout-ms", envvar="ARES_SESSION_TIMEOUT_MS", show_envvar=True,
              type=click.IntRange(1000, 300_000), default=10_000, show_default=True,
              help="How long a silent worker keeps its partitions before they move, unless "
                   "the health checker removes it sooner (a lost worker: docs/health.md); a "
                   "gracefully stopped one gets them back if it returns within it.")
@click.option("--agents", "agent_specs", multiple=True, envvar="ARES_AGENTS",
              show_envvar=True,
              help="Agent kinds to host, as package.module:REGISTRY (repeatable; the built-in "
                   "example.* kinds and the `ares.agents` entry points are always there).")
@click.option("--heartbeat-interval", type=click.FloatRange(0.1, 60),
              default=FAST_FAILOVER_HEARTBEAT_S, envvar="ARES_HEARTBEAT_INTERVAL_S",
              show_envvar=True, show_default=True,
              help="Seconds between the batched heartbeats of this worker's agents. The "
                   "health checker declares the worker lost after 3 silent intervals and "
                   "removes it from the group: a longer interval tolerates longer event-loop "
                   "stalls and fails over later (docs/health.md).")
@click.option("--group-heartbeat-ms", type=click.IntRange(100, 10_000),
              default=FAST_FAILOVER_GROUP_HEARTBEAT_MS, envvar="ARES_GROUP_HEARTBEAT_MS",
              show_envvar=True, show_default=True,
              help="Consumer-group heartbeat: how soon this worker hears of a rebalance, so "
                   "the floor of a failover (docs/health.md).")
@click.option("--leave-group-on-stop", is_flag=True, envvar="ARES_LEAVE_GROUP_ON_STOP",
              show_envvar=True,
              help="On a graceful stop, leave the consumer group by the instance id, so the "
                   "partitions move at once: for a scale in. Without it a static member's "
                   "partitions wait out --session-timeout-ms, so that a restart gets them "
                   "back without a rebalance (docs/operations.md).")
@click.option("--snapshot-every", type=click.IntRange(1), default=200, show_default=True,
              envvar="ARES_SNAPSHOT_EVERY", show_envvar=True,
              help="Events of an agent between automatic snapshots.")
@click.option("--arena", is_flag=True, default=None,
              help="Honour the arena's worker.crash (exit abruptly on request, for a "
                   "dashboard's Crash worker button; ARES_ARENA=1). Never in production.")
@click.option("--log-level", envvar="ARES_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def runtime_manager(ctx: click.Context, instance_id: str | None, session_timeout_ms: int,
                    agent_specs: tuple[str, ...], heartbeat_interval: float,
                    group_heartbeat_ms: int, leave_group_on_stop: bool, snapshot_every: int,
                    arena: bool | None, log_level: str) -> None:
    """Owns partitions of the event log and hosts their agents.

    Every instance joins the consumer group <prefix>ares-runtime; the owner of partition p
    is the only, fenced, writer of the streams on p: it validates commands from
    ares.commands, runs the agents whose ids hash to p, resurrects them when they die and,
    when a worker dies, takes over its partitions and resumes its agents.
    """
    logs.configure(log_level)
    settings = settings_of(ctx).with_overrides(arena=arena or None)
    # ARES_SIGNING_KEY_FILE / ARES_KEYRING_FILE: a key this writer cannot sign with is a
    # setting to fix now (exit 2), not a partition takeover failing every 10 s.
    configured_signer()
    manager = RuntimeManager(settings, load_topics(settings), agents=agent_specs,
                             instance_id=instance_id, session_timeout_ms=session_timeout_ms,
                             heartbeat_interval_s=heartbeat_interval,
                             group_heartbeat_ms=group_heartbeat_ms,
                             leave_group_on_stop=leave_group_on_stop,
                             host_config=HostConfig(snapshot_every=snapshot_every),
                             # ARES_SHUTDOWN_<PHASE>_S, as the Helm chart sets them
                             shutdown=ShutdownBudget.from_env())
    _serve(ctx, manager, settings)


@run.command("health-checker")
@health_checker_options
@click.option("--log-level", envvar="ARES_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def health_checker(ctx: click.Context, /, log_level: str, **flags: Any) -> None:
    """Declares hung and silent agents dead, tracks their resurrections, alerts on loops.

    Reads ares.heartbeats and ares.events in the group <prefix>ares-health-checker and
    rebuilds its state from them on start (nothing to lose when it is killed). Verdicts
    (agent.declare_dead) and quarantines go to the agents' owners; death_loop, worker_lost
    and resurrection_late alerts go to ares.alerts (`ares alerts tail`) and, with
    ARES_ALERT_WEBHOOK_URL, every alert is posted to that webhook as JSON.
    """
    logs.configure(log_level)
    settings = settings_of(ctx)
    checker = HealthChecker(settings, load_topics(settings), health_config(**flags))
    _serve(ctx, checker, settings)


@run.command("compactor")
@compaction_options
@click.option("--interval", metavar="DURATION",
              help="time between passes, e.g. 60s (ARES_COMPACTION_INTERVAL)  [default: 60s]")
@click.option("--log-level", envvar="ARES_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def compactor(ctx: click.Context, /, log_level: str, **flags: Any) -> None:
    """Summarises long streams into ares.summaries and, with --trim, trims ares.events.

    Every interval: a rule-based summary of each stream with more than --threshold events
    since its last summary (all but its --keep-recent newest), a snapshot requested from
    the owner where one is older than the summaries, then DeleteRecords up to each
    partition's safe point (never past what every stream of the partition has both
    snapshotted and summarised). Run one compactor per environment: a second one fences
    the first. `ares compaction status` shows what holds each partition back.
    """
    logs.configure(log_level)
    settings = settings_of(ctx)
    service = CompactorService(settings, load_topics(settings), compaction_config(**flags))
    _serve(ctx, service, settings)


@run.command("replay-reader")
@click.option("--http-port", type=click.IntRange(0, 65535), envvar="ARES_HTTP_PORT",
              show_envvar=True, default=DEFAULT_PORTS["replay-reader"], show_default=True,
              help="Port of the HTTP API, /openapi.json, /healthz, /readyz and /metrics "
                   "(0: any free port).")
@click.option("--schema", envvar=ENV_SCHEMA, show_envvar=True, metavar="NAME",
              help="PostgreSQL schema of the projections  [default: ares_projections]")
@click.option("--no-projector", is_flag=True,
              help="Serve the API only; another replica projects.")
@click.option("--agents", "agent_specs", multiple=True, envvar="ARES_AGENTS", show_envvar=True,
              help="Agent kinds whose state the API folds, as package.module:REGISTRY.")
@click.option("--arena", is_flag=True, default=None,
              help="The arena: the dashboard offers Crash worker (the worker.crash command, "
                   "honoured by runtime managers run with --arena; ARES_ARENA=1). Never in "
                   "production.")
@click.option("--log-level", envvar="ARES_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def replay_reader(ctx: click.Context, http_port: int, schema: str | None, no_projector: bool,
                  agent_specs: tuple[str, ...], arena: bool | None, log_level: str) -> None:
    """The read side: PostgreSQL projections and the HTTP API (with SSE) over them.

    Projects ares.events and ares.alerts into PostgreSQL (ARES_POSTGRES_DSN; the schema's
    migrations are applied at start) exactly once: the rows and the Kafka offsets are
    written in one transaction. One replica projects per schema, the others stand by and
    serve reads; reads fall back to scanning Kafka while PostgreSQL is down.
    """
    logs.configure(log_level)
    settings = settings_of(ctx).with_overrides(arena=arena or None)
    if settings.metrics_port == http_port:
        raise click.UsageError(f"ARES_METRICS_PORT and --http-port are both {http_port}: the "
                               "metrics listener needs a port of its own")
    service = ReplayReaderService(settings, http_port=http_port, schema=schema,
                                  project=not no_projector, agents=agent_specs)
    # Its API serves /healthz, /readyz and /metrics, unless ARES_METRICS_PORT moves them.
    _serve(ctx, service, settings, probes=settings.metrics_port is not None,
           probe_port=settings.metrics_port)


@run.command("budget-keeper")
@click.option("--publish-interval", type=click.FloatRange(0.01, 60), default=0.1,
              show_default=True, envvar="ARES_BUDGET_PUBLISH_INTERVAL_S", show_envvar=True,
              metavar="SECONDS",
              help="At most one state per tenant this often on ares.budgets (a tenant going "
                   "over or back under its budget is published at once).")
@click.option("--log-level", envvar="ARES_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def budget_keeper(ctx: click.Context, publish_interval: float, log_level: str) -> None:
    """Adds up LLM usage per tenant and publishes each tenant's budget state.

    \b
    Reads ares.usage in the group <prefix>ares-budget-keeper (run several: the tenants
    are shared out by partition) and the limits on ares.budget-limits (`ares budgets
    set`); publishes to ares.budgets each tenant's tokens in the current UTC minute, USD
    in the current UTC day and whether it is over, which every runtime manager consults
    before each LLM call (`ares budgets status` shows it). Nothing to lose when killed:
    on start it re-reads the day's usage (counting each usage_id once). Records that are
    not usage records go to ares.dlq, once. Probes on port 8084 (ARES_HTTP_PORT).
    """
    logs.configure(log_level)
    # Its own default probe port, beside the other services' (ares.probes.DEFAULT_PORTS).
    settings = settings_of(ctx)
    if settings.http_port is None:
        settings = settings.with_overrides(http_port=BUDGET_KEEPER_PORT)
    keeper = BudgetKeeper(settings, load_topics(settings), publish_interval_s=publish_interval)
    _serve(ctx, keeper, settings)


def _serve(ctx: click.Context, service: Service, settings: Settings, *,
           probes: bool = True, probe_port: int | None = None) -> None:
    """Wait for the broker (ARES_STARTUP_TIMEOUT_S), run ``service``, exit with its code.

    First of all, before anything is logged: the installed aiokafka must have every private
    attribute ares reaches for (``internals.check``), or the process exits 2 with one line
    naming what is missing, instead of a service running with a safety feature off."""
    internals.check()
    young, _, _ = apply_gc_policy(settings.gc_threshold)
    log.info("garbage collector: young-generation threshold %d (ARES_GC_THRESHOLD)", young)
    wait = partial(wait_for_broker, settings, f"starting the {service.name.replace('-', ' ')}")
    port = DEFAULT_PORTS[service.name] if settings.http_port is None else settings.http_port
    port = port if probe_port is None else probe_port
    ctx.exit(run_async(serve(service, http_port=(port or None) if probes else None,
                             wait_for=wait)))
