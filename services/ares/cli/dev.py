"""``ares dev``: the local development environment."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.status import Status
from rich.table import Table

from ares.devenv import DevEnvironment, ServiceStatus
from ares.devenv.quorum import ClusterHealth, describe

console = Console()
F = TypeVar("F", bound=Callable[..., Any])


@click.group()
def dev() -> None:
    """A local Apache Kafka (KRaft) broker and PostgreSQL, like `temporal server start-dev`.

    \b
    Data and logs live under ARES_DEV_HOME (default ~/.local/share/ares-mesh/dev, or
    /var/lib/ares-mesh/dev as root); broker jars are resolved once through Maven and
    cached. Ports: ARES_DEV_KAFKA_PORT (9092), ARES_DEV_POSTGRES_PORT (5432).
    `ares dev up --brokers 3` starts a three-node cluster instead (9092, 9094, 9096).
    """


def _where(fn: F) -> F:
    """--home and --base-port: which environment (for a second one beside the default)."""
    fn = click.option("--base-port", type=click.IntRange(1, 65535), default=None,
                      help="client port of the first Kafka node; node i takes base+2(i-1), "
                           "its controller the next  [default: $ARES_DEV_KAFKA_PORT, else "
                           "9092]")(fn)
    return click.option("--home", type=click.Path(path_type=Path), default=None,
                        help="the dev home  [default: $ARES_DEV_HOME, else the per-user "
                             "data directory]")(fn)


@dev.command()
@click.option("--brokers", type=click.IntRange(1, 9), default=1, show_default=True,
              help="Kafka nodes: 1, or 3 for a cluster (KRaft, each node broker and "
                   "controller) whose topics take the `cluster` environment of topics.yaml "
                   "(RF 3, min.insync.replicas 2)")
@_where
def up(brokers: int, home: Path | None, base_port: int | None) -> None:
    """Start the broker(s) and the database (idempotent) and wait until they answer."""
    env = DevEnvironment.default(brokers, home=home, base_port=base_port)
    what = "Apache Kafka" if brokers == 1 else f"a {brokers}-node Apache Kafka cluster"
    with console.status(f"starting {what} and PostgreSQL ...") as spinner:
        statuses = env.up(progress=lambda stage: _waiting(spinner, stage))
    _print_status(statuses, _health(env) if brokers > 1 else None)
    console.print()
    for name, value in env.exports().items():
        console.print(f"export {name}={value}", highlight=False, soft_wrap=True)


@dev.command()
@_where
def down(home: Path | None, base_port: int | None) -> None:
    """Stop every Kafka node and the database; no process of ours is left running."""
    stopped = DevEnvironment.default(home=home, base_port=base_port).down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@dev.command()
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object: nodes, controller quorum, under-replicated partitions, "
                   "PostgreSQL")
@_where
def status(as_json: bool, home: Path | None, base_port: int | None) -> None:
    """Versions, addresses, pids, data directories and log files; for Kafka also the
    controller quorum and the under-replicated partitions. Exit 1 if anything is stopped."""
    env = DevEnvironment.default(home=home, base_port=base_port)
    statuses = env.status()
    kafka_up = any(s.running for s in statuses if s.node_id is not None)
    health = _health(env) if kafka_up else None
    if as_json:
        click.echo(json.dumps(_as_json(env, statuses, health), indent=2))
    else:
        _print_status(statuses, health)
    if not all(s.running for s in statuses):
        raise SystemExit(1)


def _health(env: DevEnvironment) -> ClusterHealth:
    return asyncio.run(describe(env.bootstrap))


def _as_json(env: DevEnvironment, statuses: list[ServiceStatus],
             health: ClusterHealth | None) -> dict[str, Any]:
    nodes = [s for s in statuses if s.node_id is not None]
    pg = next(s for s in statuses if s.node_id is None)
    quorum = None if health is None or health.quorum is None else asdict(health.quorum)
    return {
        "home": str(env.root),
        "kafka": {
            "brokers": env.brokers,
            "bootstrap": env.bootstrap,
            "topic_environment": env.topic_environment,
            "version": nodes[0].version,
            "nodes": [{"id": s.node_id, "port": int(s.address.rpartition(":")[2]),
                       "controller_port": s.controller_port, "address": s.address,
                       "pid": s.pid, "alive": s.running, "data_dir": str(s.data_dir),
                       "log": str(s.log_file)} for s in nodes],
            "registered_brokers": None if health is None else list(health.brokers),
            "quorum": quorum,
            "under_replicated": (None if health is None
                                 else [asdict(u) for u in health.under_replicated]),
            "error": None if health is None else health.error,
        },
        "postgres": {"running": pg.running, "version": pg.version, "address": pg.address,
                     "pid": pg.pid, "data_dir": str(pg.data_dir), "log": str(pg.log_file)},
    }


def _waiting(spinner: Status, stage: str) -> None:
    """One line per stage: in the spinner on a terminal, printed where there is none."""
    spinner.update(stage)
    if not console.is_terminal:
        console.print(f"▸ {stage}", highlight=False, soft_wrap=True)


def _print_status(statuses: list[ServiceStatus], health: ClusterHealth | None) -> None:
    for s in statuses:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        state = "[green]running[/]" if s.running else "[red]stopped[/]"
        table.add_row(s.name, state)
        rows = [("version", s.version), ("address", s.address)]
        if s.controller_port is not None and len(statuses) > 2:
            rows.append(("controller", f"127.0.0.1:{s.controller_port}"))
        rows += [("pid", str(s.pid or "-")), ("data", str(s.data_dir)), ("log", str(s.log_file))]
        for label, value in rows:
            table.add_row(f"  {label}", value)
        console.print(table, highlight=False)
    if health is not None:
        console.print(_health_table(health), highlight=False)


def _health_table(health: ClusterHealth) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("kafka cluster", "[red]did not answer[/]" if health.error else "")
    if health.error:
        table.add_row("  error", health.error)
        return table
    table.add_row("  brokers", ", ".join(str(b) for b in health.brokers))
    if health.quorum is not None:
        q = health.quorum
        leader = str(q.leader) if q.leader >= 0 else "[red]none[/]"
        table.add_row("  quorum", f"leader {leader} (epoch {q.leader_epoch}), voters "
                                  f"{', '.join(str(v) for v in q.voters)}")
    urps = health.under_replicated
    table.add_row("  under-replicated", str(len(urps)) + "".join(
        f"\n    {u.topic}-{u.partition}: replicas {list(u.replicas)}, isr {list(u.isr)}"
        for u in urps[:10]) + (f"\n    ... {len(urps) - 10} more" if len(urps) > 10 else ""))
    return table
