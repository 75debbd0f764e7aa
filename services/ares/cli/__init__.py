"""The ``ares`` command line.

Exit codes (a contract): 0 ok, 1 error, 2 usage or configuration, 3 version conflict,
4 unavailable (broker unreachable or no owner answered), 5 integrity failure.
"""

from __future__ import annotations

import logging
import os
import sys
from importlib.metadata import version

import click

from ares import native
from ares.cli.acls import acls
from ares.cli.agents import agents
from ares.cli.alerts import alerts
from ares.cli.audit import audit
from ares.cli.bench import bench
from ares.cli.budgets import budgets
from ares.cli.chaos import chaos
from ares.cli.common import AppContext, run_cli
from ares.cli.compaction import compaction
from ares.cli.demo import demo
from ares.cli.dev import dev
from ares.cli.events import events
from ares.cli.events_write import append
from ares.cli.keys import keys
from ares.cli.projections import projections
from ares.cli.replay import replay
from ares.cli.run import run
from ares.cli.schedules import schedules
from ares.cli.schemas import schemas
from ares.cli.topics import topics
from ares.logs import show_notices


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"ares, version {version('ares-mesh')}\n{native.summary()}")
    ctx.exit()


CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS)
@click.option("--bootstrap-servers", envvar="ARES_KAFKA_BOOTSTRAP", show_envvar=True,
              help="Kafka bootstrap servers, host:port[,host:port]  [default: 127.0.0.1:9092]")
@click.option("--postgres-dsn", envvar="ARES_POSTGRES_DSN", show_envvar=True,
              help="PostgreSQL DSN for the read models (projections).")
@click.option("--topic-prefix", envvar="ARES_TOPIC_PREFIX", show_envvar=True,
              help="Prefix of every topic name, one per environment sharing a cluster.")
@click.option("--debug", is_flag=True, envvar="ARES_DEBUG", show_envvar=True,
              expose_value=False, is_eager=True,
              help="Print the full trace of an unexpected error (otherwise saved to a file).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="Show the version, and whether the append path runs compiled; exit.")
@click.pass_context
def cli(ctx: click.Context, bootstrap_servers: str | None, postgres_dsn: str | None,
        topic_prefix: str | None) -> None:
    """ares-mesh: crash-proof long-running agents on Apache Kafka.

    \b
    Start here:
      ares dev up          a local Kafka broker and PostgreSQL on 127.0.0.1
      ares dev status      what runs where, with versions, pids and log files
      ares dev down        stop both

    Every command reads ARES_* environment variables; flags override them.
    """
    ctx.obj = AppContext(overrides={
        "kafka_bootstrap": bootstrap_servers,
        "postgres_dsn": postgres_dsn,
        "topic_prefix": topic_prefix,
    })


cli.add_command(agents)
cli.add_command(schedules)
cli.add_command(alerts)
cli.add_command(dev)
cli.add_command(events)
cli.add_command(schemas)
cli.add_command(topics)
cli.add_command(acls)
cli.add_command(run)
cli.add_command(replay)
cli.add_command(audit)
cli.add_command(projections)
cli.add_command(compaction)
cli.add_command(demo)
cli.add_command(bench)
cli.add_command(chaos)
cli.add_command(budgets)
cli.add_command(keys)
events.add_command(append)


def main() -> None:
    # The CLI speaks for itself: aiokafka's retry chatter (a topic created a moment ago, a
    # broker restarting) is not for the user unless asked for (ARES_LOG_LEVEL=debug).
    if os.environ.get("ARES_LOG_LEVEL", "").lower() != "debug":
        logging.getLogger("aiokafka").propagate = False  # still recorded for our errors
    show_notices()  # "▸ waiting for the Kafka broker ..." once, not per attempt
    debug = "--debug" in sys.argv[1:] or os.environ.get("ARES_DEBUG", "") not in ("", "0")
    sys.exit(run_cli(cli, debug=debug))
