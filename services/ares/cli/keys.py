"""``ares keys``: the Ed25519 keys partition writers sign events with, and the keyring.

\b
A writer signs with its private key (ARES_SIGNING_KEY_FILE, a PEM file: a mounted secret);
the audit and recovery verify with the public keys of the keyring (ARES_KEYRING_FILE, JSON).
With a keyring configured, every event dated from the keyring's `since` on must be signed by
one of its keys (ares.events.signing; docs/operations.md "Signing keys").
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ares.cli.common import err_console
from ares.events.signing import (
    KEYRING_ENV,
    SIGNING_KEY_ENV,
    KeyEntry,
    Keyring,
    Signer,
    SigningError,
    private_pem,
)

_KEYRING = click.option(
    "--keyring", "keyring_path", envvar=KEYRING_ENV, show_envvar=True, required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="the keyring file (JSON) of public keys")


def _key_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--key", "key_path", envvar=SIGNING_KEY_ENV, show_envvar=True,
                        required=True, type=click.Path(dir_okay=False, path_type=Path),
                        help=help_text)


@click.group()
def keys() -> None:
    """Signing keys of the event log (Ed25519) and the keyring that verifies them."""


def _since(value: str, now: datetime) -> datetime | None:
    if value == "now":
        return now
    if value == "always":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r}: 'now', 'always' or an ISO 8601 time",
                                 param_hint="--since") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _write_private(path: Path, signer_pem: bytes, *, replace: bool) -> None:
    """The PEM, readable by its owner only; never overwrites unless ``replace``."""
    if replace:
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(signer_pem)
        os.replace(tmp, path)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SigningError(f"{path} exists: a signing key is never overwritten (ares keys "
                           "rotate replaces one and keeps it verifiable)") from None
    with os.fdopen(fd, "wb") as out:
        out.write(signer_pem)


def _load_or_new(path: Path, since: datetime | None) -> Keyring:
    if path.exists():
        return Keyring.load(path)
    return Keyring({}, since, f"{KEYRING_ENV}={path}")


@keys.command()
@_key_option("where to write the new private key (PEM, mode 0600)")
@_KEYRING
@click.option("--principal", default="runtime-manager", show_default=True,
              help="the writer principal the key belongs to")
@click.option("--since", "since_text", default="now", show_default=True, metavar="TIME",
              help="for a new keyring: signatures are required on events from this time on "
                   "('now', an ISO 8601 time, or 'always': no unsigned legacy events)")
def create(key_path: Path, keyring_path: Path, principal: str, since_text: str) -> None:
    """Create a signing key and add its public key to the keyring (created if missing)."""
    now = datetime.now(UTC)
    keyring = _load_or_new(keyring_path, _since(since_text, now))
    signer = Signer.generate(principal)
    _write_private(key_path, private_pem_of(signer), replace=False)
    keyring = keyring.with_key(KeyEntry(signer.key_id, signer.public_key, principal, now))
    keyring.save(keyring_path)
    click.echo(f"created {signer.key_id} ({principal}): private key {key_path}, "
               f"public key in {keyring_path}")


@keys.command("list")
@_KEYRING
@click.option("--json", "as_json", is_flag=True, help="the keyring as JSON")
def list_(keyring_path: Path, as_json: bool) -> None:
    """List the keyring's keys: id, principal, created, retired."""
    keyring = Keyring.load(keyring_path)
    if as_json:
        click.echo(json.dumps({**keyring.to_json(), "keys": [
            {k: v for k, v in entry.to_json().items() if k != "public_key"}
            for entry in keyring.keys.values()]}))
        return
    since = keyring.since.isoformat() if keyring.since else "always (no legacy events)"
    table = Table(title=f"{keyring_path}: signatures required since {since}")
    for column in ("key id", "principal", "created", "status"):
        table.add_column(column)
    for entry in keyring.keys.values():
        status = (f"retired {entry.retired.isoformat(timespec='seconds')}"
                  if entry.retired else "active")
        created = entry.created.isoformat(timespec="seconds") if entry.created else "-"
        table.add_row(entry.key_id, entry.principal or "-", created, status)
    Console(width=max(err_console.width, 120)).print(table)


@keys.command()
@_key_option("the current private key (PEM): replaced by the new one")
@_KEYRING
def rotate(key_path: Path, keyring_path: Path) -> None:
    """Replace the signing key: a new key, the old one retired but kept in the keyring.

    \b
    Events signed with the old key stay verifiable. Writers pick the new key up when they
    restart; a writer never starts with a retired key.
    """
    old = Signer.load(key_path)
    keyring = Keyring.load(keyring_path)
    entry = keyring.get(old.key_id)
    if entry is None:
        raise SigningError(f"{key_path}: key {old.key_id} is not in {keyring_path}: nothing "
                           "to rotate (ares keys create)")
    now = datetime.now(UTC)
    new = Signer.generate(entry.principal)
    keyring = keyring.with_key(KeyEntry(new.key_id, new.public_key, entry.principal, now))
    keyring = keyring.retire(old.key_id, now)
    keyring.save(keyring_path)  # first: a key in use must always be in the keyring
    _write_private(key_path, private_pem_of(new), replace=True)
    click.echo(f"rotated {old.key_id} -> {new.key_id}: the old key is retired and stays "
               f"in {keyring_path}; restart the writers to sign with the new one")


def private_pem_of(signer: Signer) -> bytes:
    return private_pem(signer.private_key)
