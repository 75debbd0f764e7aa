"""``ares dev up | status | down`` as a user runs it, on an isolated second environment.

The default environment (127.0.0.1:9092/9093/5432) is shared by every other test, so this
test never touches it: it roots a second environment in a temporary ``ARES_DEV_HOME`` on
free ports and drives it through the real command line (``python -m ares``). The fixture
always brings it down again. Nothing here skips: without Java, Maven or PostgreSQL,
``dev up`` exits non-zero and the test fails with its message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ares.devenv import kafka as dev_kafka
from ares.devenv import postgres as dev_postgres
from ares.devenv.process import pid_alive, tail
from ares.logs import quiet_aiokafka

# The first `dev up` of a fresh home runs initdb and formats Kafka storage; jars come from
# the cache (ARES_CACHE_DIR) that the default environment already filled.
CLI_TIMEOUT_S = 300.0
LOCALHOST_V4 = "0100007F"  # 127.0.0.1 as /proc/net/tcp prints it
LOCALHOST_V4_MAPPED = "0000000000000000FFFF00000100007F"  # ::ffff:127.0.0.1 (Java's socket)


@dataclass(frozen=True, slots=True)
class IsolatedEnv:
    home: Path
    kafka_port: int
    controller_port: int
    postgres_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def dsn(self) -> str:
        return f"postgresql://ares:ares@127.0.0.1:{self.postgres_port}/ares"

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "ARES_DEV_HOME": str(self.home),
            "ARES_DEV_KAFKA_PORT": str(self.kafka_port),
            "ARES_DEV_KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "ARES_DEV_POSTGRES_PORT": str(self.postgres_port),
            # Wide enough that rich never folds a path in the status table we parse.
            "COLUMNS": "200",
        })
        return env

    def ares(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``python -m ares <args>`` against this environment, from outside the repo."""
        return subprocess.run(
            [sys.executable, "-m", "ares", *args], env=self.environ(), cwd=self.home,
            capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False,
        )

    def logs(self) -> str:
        return "".join(
            f"\n--- tail of {log} ---\n{tail(log, 60)}"
            for log in (self.home / "kafka" / "broker.log", self.home / "kafka" / "broker.out",
                        self.home / "postgres" / "postgres.log")
        )


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out as free right now (held together so they differ)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _traversable_base() -> Path:
    """A temp base the ``postgres`` user can traverse when we are root.

    pytest's own tmp dirs live under /tmp/pytest-of-root (mode 0700) as root; the database
    runs as ``postgres`` and must reach its data directory, so use /var/tmp there.
    """
    if os.geteuid() != 0:
        return Path(tempfile.gettempdir())
    base = Path("/var/tmp")
    for directory in (base, *base.parents):
        assert directory.stat().st_mode & 0o001, f"{directory} is not traversable by others"
    return base


def _processes_in(home: Path) -> dict[int, tuple[str, str]]:
    """Live processes whose command line names ``home`` or whose cwd lies in it.

    PostgreSQL's auxiliary processes (checkpointer, walwriter, ...) rewrite their command
    line but keep the data directory as their working directory, hence both checks.
    Returns pid -> (comm, cmdline).
    """
    found: dict[int, tuple[str, str]] = {}
    prefix = str(home)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8",
                                                                                   "replace")
        except OSError:  # exited while we looked
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":  # a zombie runs nothing
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            cwd = ""
        if prefix in cmdline or cwd == prefix or cwd.startswith(prefix + os.sep):
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            found[int(entry.name)] = (comm, cmdline.strip())
    return found


def _listen_addresses(port: int) -> set[str]:
    """Local addresses (as /proc/net prints them) of the TCP sockets listening on ``port``."""
    addresses: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            next(handle)
            for line in handle:
                fields = line.split()
                address, _, hex_port = fields[1].partition(":")
                if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    addresses.add(address)
    return addresses


def _pids(status_output: str) -> list[int | None]:
    """The pid rows of the status table, kafka first then postgres."""
    rows = re.findall(r"^\s*pid\s+(\d+|-)\s*$", status_output, flags=re.MULTILINE)
    return [int(row) if row.isdigit() else None for row in rows]


def _pid_file(path: Path) -> int:
    return int(path.read_text().split()[0])


def _kill_leftovers(home: Path) -> None:
    """Last resort after a failed ``dev down``: SIGKILL what still runs in our temp home."""
    for pid in _processes_in(home):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def isolated_env() -> Iterator[IsolatedEnv]:
    home = Path(tempfile.mkdtemp(prefix="ares-devenv-test-", dir=_traversable_base()))
    kafka_port, controller_port, postgres_port = _free_ports(3)
    env = IsolatedEnv(home, kafka_port, controller_port, postgres_port)
    try:
        yield env
    finally:
        env.ares("dev", "down")
        _kill_leftovers(home)
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def _logs_on_failure(env: IsolatedEnv) -> Iterator[None]:
    """Print the environment's log tails when the test fails (pytest shows captured output)."""
    try:
        yield
    except BaseException:
        print(env.logs())
        raise


def _expect(result: subprocess.CompletedProcess[str], code: int, what: str) -> str:
    assert result.returncode == code, (
        f"`ares {what}` exited {result.returncode}, expected {code}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


@pytest.mark.timeout(900)
def test_dev_up_status_down_on_an_isolated_environment(isolated_env: IsolatedEnv) -> None:
    env = isolated_env
    with _logs_on_failure(env):
        started = time.monotonic()
        up = _expect(env.ares("dev", "up"), 0, "dev up")
        up_seconds = time.monotonic() - started
        print(f"isolated `ares dev up` took {up_seconds:.1f}s")
        assert f"export ARES_KAFKA_BOOTSTRAP={env.bootstrap}" in up
        assert f"export ARES_POSTGRES_DSN={env.dsn}" in up

        # Ready means answering real requests, on the addresses printed.
        with quiet_aiokafka():
            assert asyncio.run(dev_kafka.probe(env.bootstrap)) == 1
        assert asyncio.run(dev_postgres.probe(env.dsn)).startswith("15")
        for port in (env.kafka_port, env.controller_port, env.postgres_port):
            addresses = _listen_addresses(port)
            assert addresses, f"nothing listens on port {port}"
            assert addresses <= {LOCALHOST_V4, LOCALHOST_V4_MAPPED}, (
                f"port {port} listens beyond 127.0.0.1: {addresses}")

        status = _expect(env.ares("dev", "status"), 0, "dev status")
        assert "Apache Kafka 4." in status
        assert "PostgreSQL 15" in status
        assert status.count("running") == 2
        kafka_pid = _pid_file(env.home / "kafka" / "broker.pid")
        postgres_pid = _pid_file(env.home / "postgres" / "data" / "postmaster.pid")
        assert _pids(status) == [kafka_pid, postgres_pid]
        assert str(env.home / "kafka" / "broker.log") in status

        again = _expect(env.ares("dev", "up"), 0, "dev up (second time)")
        assert _pids(again) == [kafka_pid, postgres_pid], "a second `dev up` restarted something"

        # The scan must see our processes now, or its silence after `dev down` proves nothing.
        running = {comm for comm, _ in _processes_in(env.home).values()}
        assert {"java", "postgres"} <= running, f"scan found only {running}"

        down = _expect(env.ares("dev", "down"), 0, "dev down")
        assert "kafka" in down
        assert "postgres" in down
        assert not pid_alive(kafka_pid)
        assert not pid_alive(postgres_pid)
        assert _processes_in(env.home) == {}, "processes of the environment survived `dev down`"

        stopped = _expect(env.ares("dev", "status"), 1, "dev status (after down)")
        assert stopped.count("stopped") == 2
        assert _pids(stopped) == [None, None]


def test_stale_pid_files_naming_a_recycled_pid_are_not_ours(isolated_env: IsolatedEnv) -> None:
    """After a reboot the pid files outlive their processes and the numbers get reused:
    `status` must not report the stranger as our broker or database, and `down` must not
    signal it."""
    env = isolated_env
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        for pid_file in (env.home / "kafka" / "broker.pid",
                         env.home / "postgres" / "data" / "postmaster.pid"):
            pid_file.parent.mkdir(parents=True)
            pid_file.write_text(f"{stranger.pid}\n")

        status = _expect(env.ares("dev", "status"), 1, "dev status")
        assert _pids(status) == [None, None]
        down = _expect(env.ares("dev", "down"), 0, "dev down")
        assert "nothing was running" in down
        assert stranger.poll() is None, "`dev down` signalled a process that is not ours"
    finally:
        stranger.kill()
        stranger.wait()
