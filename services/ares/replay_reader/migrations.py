"""Versioned SQL migrations of the projections schema (``migrations/NNNN_name.sql``).

The projector applies them at start: the missing versions in order, in one transaction
(all or nothing), each recorded in ``schema_migrations`` with the file's SHA-256. A file
changed after it was applied is an error, never silently re-run: migrations only ever move
forward (add a new file). Concurrent starters serialise on an advisory lock, so a version
is applied once.

Where the files are (the first that exists wins), as for topics.yaml:
  1. ``ARES_MIGRATIONS_DIR``;
  2. ``migrations/`` at the root of the checkout this package runs from;
  3. the copy shipped in the package (``ares/replay_reader/sql``; a unit test keeps it
     identical to the checkout's).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ares.errors import ConfigError

ENV_DIR = "ARES_MIGRATIONS_DIR"
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def checkout_dir() -> Path:
    return Path(__file__).resolve().parents[3] / "migrations"


def packaged_dir() -> Path:
    return Path(__file__).resolve().parent / "sql"


def migrations_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    configured = env.get(ENV_DIR)
    if configured:
        path = Path(configured)
        if not path.is_dir():
            raise ConfigError(f"{ENV_DIR}={configured!r} is not a directory")
        return path
    return checkout_dir() if checkout_dir().is_dir() else packaged_dir()


def load_migrations(directory: Path | None = None) -> list[Migration]:
    directory = directory or migrations_dir()
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_RE.match(path.name)
        if match is None:
            raise ConfigError(f"{path}: a migration is named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise ConfigError(f"{path}: version {version} is defined twice")
        found[version] = Migration(version, match.group(2), path.read_text())
    if not found:
        raise ConfigError(f"no migrations in {directory}")
    return [found[v] for v in sorted(found)]


def check_schema_name(schema: str) -> str:
    if not _SCHEMA_RE.match(schema):
        raise ConfigError(f"ARES_PROJECTIONS_SCHEMA {schema!r}: use lower-case letters, digits "
                          "and _ (a PostgreSQL identifier, at most 63 characters)")
    return schema


async def migrate(conn: Any, schema: str, migrations: list[Migration] | None = None) -> list[int]:
    """Bring ``schema`` up to the latest migration; the versions applied now."""
    check_schema_name(schema)
    migrations = migrations if migrations is not None else load_migrations()
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"{schema}:migrate")
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(f'''CREATE TABLE IF NOT EXISTS "{schema}".schema_migrations (
            version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now())''')
        rows = await conn.fetch(f'SELECT version, checksum FROM "{schema}".schema_migrations')
        applied = {int(r["version"]): str(r["checksum"]) for r in rows}
        for migration in migrations:
            if migration.version in applied:
                if applied[migration.version] != migration.checksum:
                    raise ConfigError(
                        f"migration {migration.version:04d}_{migration.name}.sql changed after "
                        f"it was applied to schema {schema!r}: add a new migration instead "
                        "(or `ares projections rebuild`)")
                continue
            await conn.execute(f'SET LOCAL search_path TO "{schema}"')
            await conn.execute(migration.sql)
            await conn.execute(
                f'INSERT INTO "{schema}".schema_migrations (version, name, checksum) '
                "VALUES ($1, $2, $3)", migration.version, migration.name, migration.checksum)
            applied_now.append(migration.version)
    return applied_now


async def drop_schema(conn: Any, schema: str) -> None:
    check_schema_name(schema)
    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
