"""``ares run <service>``: the long-running services."""

from __future__ import annotations

import click

from ares import logs
from ares.cli.common import run_async, settings_of
from ares.runtime_manager import PartitionOwner
from ares.service import serve
from ares.topics import load_topics


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
              help="How long a silent worker keeps its partitions before they move.")
@click.option("--log-level", envvar="ARES_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def runtime_manager(ctx: click.Context, instance_id: str | None, session_timeout_ms: int,
                    log_level: str) -> None:
    """The partition owner: validates commands from ares.commands and appends events.

    Every instance joins the consumer group <prefix>ares-runtime; the owner of partition p
    is the only, fenced, writer of the streams on p.
    """
    logs.configure(log_level)
    settings = settings_of(ctx)
    owner = PartitionOwner(settings, load_topics(settings), instance_id=instance_id,
                           session_timeout_ms=session_timeout_ms)
    ctx.exit(run_async(serve(owner)))
