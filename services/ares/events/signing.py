"""Signed events: each partition writer signs what it appends, an auditor needs only public keys.

The SHA-256 chain alone proves that nothing changed *by accident*: anyone who may write to
``ares.events`` can read the head of a stream and append a correctly chained forgery. So a
writer with a signing key signs every event it seals, with Ed25519 (the ``cryptography``
package, OpenSSL underneath), over the 32 bytes of the event's hash. The hash already
commits to the event's canonical bytes (every field but the signature fields, its stream,
version and predecessor: ``ares.events.chain``), so signing it signs all of that; the
signature and the key's id travel in the record (``signature``, ``key_id``: the last fields
of ``ares.v1.Event``, which the hash does not cover).

Keys:

* **signing key** — one Ed25519 private key per writer principal (the runtime managers
  of one deployment share theirs), a PEM file named by ``ARES_SIGNING_KEY_FILE`` (a mounted
  secret). ``ares keys create`` makes one.
* **keyring** — the public keys an auditor trusts, a JSON (or YAML) file named by
  ``ARES_KEYRING_FILE``: ``{"since": ISO time, "keys": [{"key_id", "public_key" (PEM),
  "principal", "created", "retired"}]}``. Rotation (``ares keys rotate``) adds the new key
  and marks the old one retired, never removes it: old events stay verifiable.
* **key id** — ``ed25519:`` + the first 16 hex digits of the SHA-256 of the raw public key:
  stable, derived from the key alone.

Policy (``SignaturePolicy``): no keyring configured, no signature is checked (the zero
configuration of the dev environment, the demo and the tests: events are then written
unsigned unless a signing key is configured). A keyring configured, every event must carry a
signature that verifies with a key of the keyring, except *legacy* events: unsigned events
dated before the keyring's ``since`` (written before signing was turned on), and only while
no signed event preceded them in their stream (no downgrade). A failure is a ``ChainError``
of kind ``signature``: the audit exits 5 on it, recovery quarantines the agent as for a
broken chain.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ares.errors import ConfigError
from ares.events.model import Event
from ares.events.wire.envelope import string_bytes

SIGNING_KEY_ENV: Final = "ARES_SIGNING_KEY_FILE"
KEYRING_ENV: Final = "ARES_KEYRING_FILE"
# The ChainError kind of an unsigned, unknown-key or wrongly signed event.
SIGNATURE: Final = "signature"
KEY_ID_PREFIX: Final = "ed25519:"
SIGNATURE_BYTES: Final = 64
KEYRING_FORMAT: Final = "ares-keyring-1"


class SigningError(ConfigError):
    """A signing key or keyring that cannot be used (missing, malformed, inconsistent)."""


def key_id_of(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KEY_ID_PREFIX + hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(serialization.Encoding.PEM,
                               serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")


def private_pem(private: Ed25519PrivateKey) -> bytes:
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())


class Signer:
    """A writer's signing key: ``sign`` the 32 bytes of an event's hash.

    ``tail`` is the Avro encoding of ``key_id`` as the record carries it (union branch 1,
    then the string), made once: sealing appends it to every signed event's body.
    """

    __slots__ = ("key_id", "principal", "private_key", "public_key", "sign", "tail")

    def __init__(self, private: Ed25519PrivateKey, principal: str | None = None) -> None:
        self.private_key = private
        self.public_key = private.public_key()
        self.key_id = key_id_of(self.public_key)
        self.principal = principal
        self.sign = private.sign  # the bound C method: one call per event, nothing around it
        self.tail = b"\x02" + string_bytes(self.key_id)

    @classmethod
    def generate(cls, principal: str | None = None) -> Signer:
        return cls(Ed25519PrivateKey.generate(), principal)

    @classmethod
    def from_pem(cls, data: bytes, source: str = "the key") -> Signer:
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise SigningError(f"{source}: not an unencrypted PEM private key: {exc}") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise SigningError(f"{source}: an Ed25519 key is needed, got "
                               f"{type(private).__name__}")
        return cls(private)

    @classmethod
    def load(cls, path: Path | str) -> Signer:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SigningError(f"{SIGNING_KEY_ENV}={path}: cannot read it: {exc}") from None
        return cls.from_pem(data, f"{SIGNING_KEY_ENV}={path}")


@dataclass(frozen=True, slots=True)
class KeyEntry:
    key_id: str
    public_key: Ed25519PublicKey = field(compare=False)
    principal: str | None = None
    created: datetime | None = None
    retired: datetime | None = None  # rotated out: verifies old events, signs no new one

    def to_json(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "public_key": public_pem(self.public_key),
                "principal": self.principal, "created": _iso(self.created),
                "retired": _iso(self.retired)}


@dataclass(frozen=True, slots=True)
class Keyring:
    """The public keys events may be signed with, and since when signatures are required."""

    keys: Mapping[str, KeyEntry] = field(default_factory=dict)
    since: datetime | None = None  # None: every event must be signed
    source: str = "the keyring"

    def get(self, key_id: str) -> KeyEntry | None:
        return self.keys.get(key_id)

    def with_key(self, entry: KeyEntry) -> Keyring:
        return replace(self, keys={**self.keys, entry.key_id: entry})

    def retire(self, key_id: str, when: datetime) -> Keyring:
        entry = self.keys.get(key_id)
        if entry is None:
            raise SigningError(f"{self.source}: no key {key_id}")
        if entry.retired is not None:
            return self
        return replace(self, keys={**self.keys, key_id: replace(entry, retired=when)})

    def to_json(self) -> dict[str, Any]:
        return {"format": KEYRING_FORMAT, "since": _iso(self.since),
                "keys": [k.to_json() for k in self.keys.values()]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    def save(self, path: Path) -> None:
        """Write atomically (a reader never sees half a keyring)."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.dumps(), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def parse(cls, data: Any, source: str = "the keyring") -> Keyring:
        if not isinstance(data, Mapping) or not isinstance(data.get("keys", []), list):
            raise SigningError(f"{source}: expected an object with a 'keys' list")
        keys: dict[str, KeyEntry] = {}
        for i, raw in enumerate(data.get("keys", [])):
            where = f"{source}: keys[{i}]"
            if not isinstance(raw, Mapping) or not isinstance(raw.get("public_key"), str):
                raise SigningError(f"{where}: expected an object with a PEM 'public_key'")
            public = _public_key(raw["public_key"], where)
            key_id = key_id_of(public)
            if raw.get("key_id") not in (None, key_id):
                raise SigningError(f"{where}: key_id {raw['key_id']!r} is not the key's own id "
                                   f"({key_id})")
            principal = raw.get("principal")
            keys[key_id] = KeyEntry(key_id, public,
                                    str(principal) if principal is not None else None,
                                    _time(raw.get("created"), f"{where}.created"),
                                    _time(raw.get("retired"), f"{where}.retired"))
        return cls(keys, _time(data.get("since"), f"{source}: since"), source)

    @classmethod
    def load(cls, path: Path | str) -> Keyring:
        path = Path(path)
        source = f"{KEYRING_ENV}={path}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SigningError(f"{source}: cannot read it: {exc}") from None
        yaml_file = path.suffix in (".yaml", ".yml")
        try:
            data = yaml.safe_load(text) if yaml_file else json.loads(text)
        except (ValueError, yaml.YAMLError) as exc:
            kind = "YAML" if yaml_file else "JSON"
            raise SigningError(f"{source}: not valid {kind}: {exc}") from None
        return cls.parse(data, source)


def _public_key(pem: str, where: str) -> Ed25519PublicKey:
    try:
        public = serialization.load_pem_public_key(pem.encode("ascii"))
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise SigningError(f"{where}: not a PEM public key: {exc}") from None
    if not isinstance(public, Ed25519PublicKey):
        raise SigningError(f"{where}: an Ed25519 key is needed, got {type(public).__name__}")
    return public


def _time(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            raise SigningError(f"{where}: not an ISO 8601 time: {value!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


class SignaturePolicy:
    """What signatures a reader of the log requires, and what it met.

    ``check`` is called by ``chain.verify_chain`` on each event whose chain verified;
    ``signed``/``legacy`` count the events checked (each (stream, version) once, though a
    failed run is checked again event by event).
    """

    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring
        self.active = keyring is not None
        self.signed = 0
        self.legacy = 0
        self.keys_seen: dict[str, int] = {}
        self._counted: dict[str, int] = {}  # stream -> highest version counted

    def check(self, event: Event, after_signed: bool) -> str | None:
        """None if ``event`` is acceptable, else what is wrong with its signature.

        ``after_signed``: an earlier event of its stream was signed (no downgrade)."""
        keyring = self.keyring
        if keyring is None:
            return None
        signature = event.signature
        if signature is None:
            since = keyring.since
            if since is None:
                return "unsigned event: the keyring requires every event to be signed"
            if after_signed:
                return ("unsigned event after a signed one of the same stream (a signed "
                        "stream never goes back to unsigned)")
            if event.timestamp >= since:
                return (f"unsigned event dated {event.timestamp.isoformat()}: the keyring "
                        f"requires signatures since {since.isoformat()}")
            self._count(event, None)
            return None
        key_id = event.key_id
        entry = keyring.get(key_id) if key_id is not None else None
        if entry is None:
            return (f"signed with key {key_id!r}, which {keyring.source} does not hold "
                    f"({len(keyring.keys)} key(s))")
        try:
            entry.public_key.verify(signature, bytes.fromhex(event.hash))
        except (InvalidSignature, ValueError):
            return f"the signature does not verify with key {key_id} (event {event.id})"
        self._count(event, key_id)
        return None

    def _count(self, event: Event, key_id: str | None) -> None:
        if event.version <= self._counted.get(event.stream_id, 0):
            return
        self._counted[event.stream_id] = event.version
        if key_id is None:
            self.legacy += 1
        else:
            self.signed += 1
            self.keys_seen[key_id] = self.keys_seen.get(key_id, 0) + 1

    def summary(self) -> dict[str, Any]:
        keyring = self.keyring
        return {"checked": self.active, "signed": self.signed, "unsigned_legacy": self.legacy,
                "keys": dict(self.keys_seen),
                "since": None if keyring is None else _iso(keyring.since),
                "keyring": None if keyring is None else keyring.source}

    def line(self) -> str:
        keyring = self.keyring
        if keyring is None:
            return (f"signatures: not checked (no keyring: set {KEYRING_ENV} to require "
                    "them)")
        legacy = ""
        if self.legacy:
            legacy = (f", {self.legacy} unsigned (legacy, before "
                      f"{_iso(keyring.since)})")
        return f"signatures: {self.signed} verified{legacy} ({keyring.source})"


UNCHECKED: Final = SignaturePolicy(None)


@cache
def configured_keyring() -> Keyring | None:
    """The keyring ``ARES_KEYRING_FILE`` names, loaded once; None when unset."""
    path = os.environ.get(KEYRING_ENV)
    return Keyring.load(path) if path else None


@cache
def default_policy() -> SignaturePolicy:
    """The process's policy: the configured keyring's (``UNCHECKED`` without one).
    ``reset`` after changing the environment (tests)."""
    keyring = configured_keyring()
    return UNCHECKED if keyring is None else SignaturePolicy(keyring)


@cache
def configured_signer() -> Signer | None:
    """The writer's signing key from ``ARES_SIGNING_KEY_FILE``; None when unset.

    With a keyring configured too, the key must be one of it, not retired: a writer whose
    own events its own recovery would refuse fails at start instead."""
    path = os.environ.get(SIGNING_KEY_ENV)
    signer = Signer.load(path) if path else None
    keyring = configured_keyring()
    if keyring is not None:
        if signer is None:
            raise SigningError(
                f"{KEYRING_ENV} is set but {SIGNING_KEY_ENV} is not: this writer's events "
                "would be unsigned, and the keyring refuses them (ares keys create)")
        entry = keyring.get(signer.key_id)
        if entry is None:
            raise SigningError(f"{SIGNING_KEY_ENV}: key {signer.key_id} is not in "
                               f"{keyring.source} (ares keys list)")
        if entry.retired is not None:
            raise SigningError(f"{SIGNING_KEY_ENV}: key {signer.key_id} was retired on "
                               f"{_iso(entry.retired)} (ares keys rotate made a new one)")
    return signer


def reset() -> None:
    """Forget the loaded key and keyring (after the environment changed: tests, rotation)."""
    configured_keyring.cache_clear()
    default_policy.cache_clear()
    configured_signer.cache_clear()


__all__ = [
    "KEYRING_ENV",
    "SIGNATURE",
    "SIGNING_KEY_ENV",
    "UNCHECKED",
    "KeyEntry",
    "Keyring",
    "SignaturePolicy",
    "Signer",
    "SigningError",
    "configured_keyring",
    "configured_signer",
    "default_policy",
    "key_id_of",
    "private_pem",
    "public_pem",
    "reset",
]
