"""A local PostgreSQL cluster from the machine's Debian binaries, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ares.devenv import process
from ares.devenv.paths import is_root
from ares.errors import InfrastructureError

PREFERRED_MAJOR = "15"
DB_USER = DB_PASSWORD = DB_NAME = "ares"


@dataclass(frozen=True, slots=True)
class PostgresLayout:
    """Files of the local database under the dev home."""

    root: Path
    port: int

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_file(self) -> Path:
        return self.root / "postgres.log"

    @property
    def lock_file(self) -> Path:
        return self.data_dir / "postmaster.pid"

    @property
    def dsn(self) -> str:
        return f"postgresql://{DB_USER}:{DB_PASSWORD}@127.0.0.1:{self.port}/{DB_NAME}"

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


def bindir() -> Path:
    """The PostgreSQL server binaries: ``ARES_DEV_PG_BINDIR``, else Debian's, 15 preferred."""
    if override := os.environ.get("ARES_DEV_PG_BINDIR"):
        if not (Path(override) / "postgres").is_file():
            raise InfrastructureError(
                f"ARES_DEV_PG_BINDIR={override} holds no `postgres` binary: point it at the "
                "bin directory of a PostgreSQL installation (e.g. /usr/lib/postgresql/15/bin)"
            )
        return Path(override)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    preferred = [c for c in candidates if f"/{PREFERRED_MAJOR}/" in c]
    chosen = (preferred or candidates)[-1:]
    if not chosen:
        raise InfrastructureError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql: install them "
            "(Debian: apt-get install postgresql-15) or set ARES_DEV_PG_BINDIR"
        )
    return Path(chosen[0]).parent


def server_version() -> str:
    out = subprocess.run([str(bindir() / "postgres"), "--version"], capture_output=True,
                         text=True, check=False).stdout
    match = re.search(r"\(PostgreSQL\) (\S+)", out)
    return match.group(1) if match else "unknown"


def _as_db_owner(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its binaries as the ``postgres`` user then."""
    if not is_root():
        return cmd
    runuser = shutil.which("runuser")
    if runuser is None:
        raise InfrastructureError(
            "running as root needs `runuser` (util-linux) to drop to the postgres user"
        )
    return [runuser, "-u", "postgres", "--", *cmd]


def _prepare_dirs(layout: PostgresLayout) -> None:
    layout.socket_dir.mkdir(parents=True, exist_ok=True)
    if is_root():
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise InfrastructureError(
                "running as root needs a `postgres` system user (created by the Debian "
                "postgresql packages)"
            ) from None
        # Every parent must be traversable by the postgres user.
        for parent in [layout.root, *layout.root.parents]:
            if parent == Path("/"):
                break
            parent.chmod(parent.stat().st_mode | 0o711)
        for path in (layout.root, layout.socket_dir):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        if not layout.log_file.exists():
            layout.log_file.touch()
        os.chown(layout.log_file, owner.pw_uid, owner.pw_gid)


def _run(cmd: list[str], what: str) -> None:
    result = subprocess.run(_as_db_owner(cmd), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise InfrastructureError(f"{what} failed:\n{(result.stdout + result.stderr)[-3000:]}")


def running_pid(layout: PostgresLayout) -> int | None:
    # pg_ctl starts the postmaster with ``-D <data dir>``: a recycled pid lacks it.
    return process.read_pid(layout.lock_file, expect=str(layout.data_dir))


def _remove_stale_lock(layout: PostgresLayout) -> None:
    """A lock file whose pid now belongs to another process: PostgreSQL would refuse to
    start ("lock file already exists") until someone deletes it, so we do."""
    if layout.lock_file.exists() and running_pid(layout) is None:
        layout.lock_file.unlink(missing_ok=True)


def start(layout: PostgresLayout, timeout_s: float = 60.0) -> int:
    """initdb once, start (idempotent), wait for ``SELECT 1``, create the ares role and db."""
    _prepare_dirs(layout)
    bins = bindir()
    if not (layout.data_dir / "PG_VERSION").exists():
        _run([str(bins / "initdb"), "-D", str(layout.data_dir), "-U", "postgres",
              "--auth-local=trust", "--auth-host=trust", "-E", "UTF8", "--no-instructions"],
             "initdb")
    if running_pid(layout) is None:
        _remove_stale_lock(layout)
        options = (f"-c listen_addresses=127.0.0.1 -p {layout.port} "
                   f"-k {layout.socket_dir} -c fsync=off -c max_connections=200")
        _run([str(bins / "pg_ctl"), "-D", str(layout.data_dir), "-l", str(layout.log_file),
              "-o", options, "-w", "-t", str(int(timeout_s)), "start"], "pg_ctl start")
    _wait_ready(layout, timeout_s)
    asyncio.run(_ensure_database(layout))
    pid = running_pid(layout)
    if pid is None:
        raise InfrastructureError(f"PostgreSQL is not running; see {layout.log_file}")
    return pid


def _wait_ready(layout: PostgresLayout, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            asyncio.run(probe(layout.admin_dsn))
            return
        except Exception as exc:  # not ready yet: retry until the deadline
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.3)
    raise InfrastructureError(
        f"PostgreSQL on 127.0.0.1:{layout.port} was not ready after {timeout_s:.0f}s "
        f"({last_error}); last lines of {layout.log_file}:\n{process.tail(layout.log_file)}"
    )


async def probe(dsn: str, timeout_s: float = 5.0) -> str:
    """``SELECT 1`` over a real connection; returns the server version string."""
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=timeout_s)
    try:
        await conn.fetchval("SELECT 1")
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


async def _ensure_database(layout: PostgresLayout) -> None:
    import asyncpg

    conn = await asyncpg.connect(layout.admin_dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", DB_USER):
            await conn.execute(f"CREATE ROLE {DB_USER} LOGIN PASSWORD '{DB_PASSWORD}' CREATEDB")
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DB_NAME):
            await conn.execute(f"CREATE DATABASE {DB_NAME} OWNER {DB_USER}")
    finally:
        await conn.close()


def stop(layout: PostgresLayout) -> bool:
    if running_pid(layout) is None:
        return False
    _run([str(bindir() / "pg_ctl"), "-D", str(layout.data_dir), "-m", "fast", "-w", "stop"],
         "pg_ctl stop")
    return True
