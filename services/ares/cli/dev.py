"""``ares dev``: the local development environment."""

from __future__ import annotations

import click
from rich.console import Console
from rich.status import Status
from rich.table import Table

from ares.devenv import DevEnvironment, ServiceStatus

console = Console()


@click.group()
def dev() -> None:
    """A local Apache Kafka (KRaft) broker and PostgreSQL, like `temporal server start-dev`.

    \b
    Data and logs live under ARES_DEV_HOME (default ~/.local/share/ares-mesh/dev, or
    /var/lib/ares-mesh/dev as root); broker jars are resolved once through Maven and
    cached. Ports: ARES_DEV_KAFKA_PORT (9092), ARES_DEV_POSTGRES_PORT (5432).
    """


@dev.command()
def up() -> None:
    """Start the broker and the database (idempotent) and wait until they answer."""
    env = DevEnvironment.default()
    with console.status("starting Apache Kafka and PostgreSQL ...") as spinner:
        statuses = env.up(progress=lambda stage: _waiting(spinner, stage))
    _print_status(statuses)
    kafka, pg = statuses
    console.print(f"\nexport ARES_KAFKA_BOOTSTRAP={kafka.address}", highlight=False)
    console.print(f"export ARES_POSTGRES_DSN={pg.address}", highlight=False)


@dev.command()
def down() -> None:
    """Stop the broker and the database; no process of ours is left running."""
    stopped = DevEnvironment.default().down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@dev.command()
def status() -> None:
    """Versions, addresses, pids, data directories and log files."""
    statuses = DevEnvironment.default().status()
    _print_status(statuses)
    if not all(s.running for s in statuses):
        raise SystemExit(1)


def _waiting(spinner: Status, stage: str) -> None:
    """One line per stage: in the spinner on a terminal, printed where there is none."""
    spinner.update(stage)
    if not console.is_terminal:
        console.print(f"▸ {stage}", highlight=False, soft_wrap=True)


def _print_status(statuses: list[ServiceStatus]) -> None:
    for s in statuses:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        state = "[green]running[/]" if s.running else "[red]stopped[/]"
        table.add_row(s.name, state)
        for label, value in (("version", s.version), ("address", s.address),
                             ("pid", str(s.pid or "-")), ("data", str(s.data_dir)),
                             ("log", str(s.log_file))):
            table.add_row(f"  {label}", value)
        console.print(table, highlight=False)
