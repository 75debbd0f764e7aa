"""Every ``ares`` subcommand against a stopped broker: exit 4, one clear line, no traceback.

The "broker" is a port nothing listens on; the waits are shortened (``ARES_RETRY_TIMEOUT_S``,
``ARES_STARTUP_TIMEOUT_S``) so the sweep takes seconds, not minutes. The list is checked
against the command tree itself: a new subcommand that talks to Kafka must be added here.
"""

from __future__ import annotations

import os

import click
import pytest

from ares.chaos.toxiproxy import free_port
from ares.cli import cli
from tests.support.processes import ares

# One invocation per subcommand that needs the broker (or the database).
COMMANDS: dict[str, tuple[str, ...]] = {
    "agents start": ("a1", "--kind", "example.pipeline"),
    "agents stop": ("a1",),
    "agents kill": ("a1",),
    "agents resume": ("a1",),
    "agents task": ("a1", "--task-id", "t1", "--input", "{}"),
    "agents resolve": ("a1", "--call", "c1", "--as", "skip"),
    "agents snapshot": ("a1",),
    "agents signal": ("a1", "approved", "--signal-id", "s1"),
    "schedules create": ("s1", "--agent", "a1", "--cron", "0 9 * * *"),
    "schedules list": (),
    "schedules pause": ("s1",),
    "schedules resume": ("s1",),
    "schedules delete": ("s1",),
    "agents status": (),
    "agents genealogy": ("a1",),
    "agents tree": ("a1",),
    "agents tail": ("a1", "--tokens"),
    "alerts tail": (),
    "events read": ("s1",),
    "events tail": (),
    "events dump": ("--topic", "ares.events"),
    "events append": ("s1", "--type", "note.added", "--payload", "{}"),
    "topics apply": (),
    "topics list": (),
    "acls apply": (),
    "replay": ("s1", "--to", "1", "--json"),
    "audit verify": ("--all",),
    "projections rebuild": (),
    "projections migrate": (),
    "projections status": (),
    "compaction status": (),
    "compaction run": ("--once",),
    "demo": ("--agents", "1"),
    "bench": ("--only", "append"),
    "run runtime-manager": (),
    "run health-checker": (),
    "run compactor": (),
    "run replay-reader": (),
    "run budget-keeper": (),
    "budgets set": ("acme", "--tokens-per-minute", "1000"),
    "budgets status": (),
}
# Those that need neither, and why.
OFFLINE = {
    "dev up": "starts the local broker itself (tests/integration/test_devenv.py)",
    "dev down": "stops the local environment",
    "dev status": "reads pid files; asks only a running local broker (quorum, replication)",
    "schemas list": "reads schemas/",
    "schemas check": "compares schemas/ with the released ones",
    "schemas sync": "copies schemas/ into the package",
    "schemas export": "renders schemas/ as documents for other languages",
    "chaos": "starts a broker of its own",
    "keys create": "writes a key file and the keyring",
    "keys list": "reads the keyring file",
    "keys rotate": "rewrites a key file and the keyring",
    "acls plan": "derives the ACLs from topics.yaml and the services' needs",
}
# Lines a command may print before its error: the demo's and bench's progress, the JSON
# log of `ares run` services.
PROGRESS_PREFIXES = ("▸", "{")


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> set[str]:
    names: set[str] = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            names |= _leaves(command, (*path, name))
        else:
            names.add(" ".join((*path, name)))
    return names


def test_the_sweep_covers_every_subcommand() -> None:
    assert _leaves(cli) == set(COMMANDS) | set(OFFLINE)


@pytest.fixture(scope="module")
def stopped_env() -> dict[str, str]:
    port = free_port()  # free: nothing listens there
    return {**os.environ, "ARES_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
            "ARES_POSTGRES_DSN": f"postgresql://ares:ares@127.0.0.1:{free_port()}/ares",
            "ARES_RETRY_TIMEOUT_S": "1", "ARES_STARTUP_TIMEOUT_S": "1",
            "ARES_HTTP_PORT": "0"}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_stopped_broker_is_exit_4_and_one_line(command: str,
                                                 stopped_env: dict[str, str]) -> None:
    done = ares(*command.split(), *COMMANDS[command], env=stopped_env, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert lines, "nothing on stderr"
    assert lines[-1].startswith("error: "), done.stderr
    assert [line for line in lines[:-1] if not line.startswith(PROGRESS_PREFIXES)] == []
    needs_postgres = command in {"projections rebuild", "projections migrate"}
    address = stopped_env["ARES_POSTGRES_DSN" if needs_postgres else "ARES_KAFKA_BOOTSTRAP"]
    if needs_postgres:
        address = address.rsplit("@", 1)[1].split("/")[0]
    assert address.split(":")[-1] in lines[-1], f"the error names no address: {lines[-1]}"
