"""The Avro schemas of ares: found once, parsed once, fingerprinted once.

Where the .avsc files come from (first match wins):

1. ``ARES_SCHEMA_DIR`` — an operator's explicit choice (a mounted ConfigMap, a test);
2. the repository's ``schemas/`` (``Path(__file__).parents[4] / "schemas"``, only when a
   ``pyproject.toml`` sits next to it) — in a checkout, the files a developer edits are the
   ones that run, with no copy step;
3. ``ares/events/wire/avsc/`` shipped as package data — what a non-editable install (wheel,
   container image) has. It is a plain copy of ``schemas/`` made by ``ares schemas sync``;
   a unit test fails when the copy drifts, so the copy can never silently diverge.

A symlink would avoid the copy but breaks on Windows checkouts and in sdists; a build hook
would hide the files from reviewers. A checked copy guarded by a test is boring and robust.

Each .avsc file is self-contained (its payload records are defined inline): any Avro
implementation, schema registry or ``avro-tools`` can parse one file on its own, and a
file's fingerprint is the fingerprint of exactly that file. ``schemas/released/<vN>/``
holds every released version; their fingerprints are registered too, so records written by
an old writer stay readable (writer → reader resolution) for as long as Kafka retains them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, Final

from fastavro.schema import fingerprint as _fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form

from ares.errors import SchemaError
from ares.events.wire.foreign import foreign_fingerprints

Schema = dict[str, Any]

SCHEMA_DIR_ENV = "ARES_SCHEMA_DIR"
RELEASED_DIR = "released"
CURRENT = "current"

EVENT: Final = "ares.v1.Event"
COMMAND: Final = "ares.v1.Command"
REPLY: Final = "ares.v1.Reply"
SNAPSHOT: Final = "ares.v1.Snapshot"
HEARTBEAT: Final = "ares.v1.Heartbeat"
ALERT: Final = "ares.v1.Alert"
SCHEDULE: Final = "ares.v1.Schedule"

JSON_PAYLOAD: Final = "ares.v1.event.JsonPayload"

# The fields of ares.v1.Event after ``hash``, the only ones the hash does not cover (it is
# what they sign): written null in the canonical encoding (``chain``).
SIGNATURE_FIELDS: Final = ("signature", "key_id")

# Event type -> payload record. Every other type is written as JSON_PAYLOAD.
EVENT_PAYLOADS: Mapping[str, str] = {
    "agent.started": "ares.v1.event.AgentStarted",
    "agent.stopped": "ares.v1.event.AgentStopped",
    "agent.dead": "ares.v1.event.AgentDead",
    "agent.resurrecting": "ares.v1.event.AgentResurrecting",
    "agent.resurrected": "ares.v1.event.AgentResurrected",
    "agent.quarantined": "ares.v1.event.AgentQuarantined",
    "task.assigned": "ares.v1.event.TaskAssigned",
    "task.completed": "ares.v1.event.TaskCompleted",
    "task.failed": "ares.v1.event.TaskFailed",
    "step.completed": "ares.v1.event.StepCompleted",
    "llm.call": "ares.v1.event.LlmCall",
    "tool.call.intent": "ares.v1.event.ToolCallIntent",
    "tool.call.completed": "ares.v1.event.ToolCallCompleted",
    "tool.call.failed": "ares.v1.event.ToolCallFailed",
    "tool.in_doubt": "ares.v1.event.ToolInDoubt",
    "snapshot.taken": "ares.v1.event.SnapshotTaken",
    "heartbeat": "ares.v1.event.AgentHeartbeat",
    "summary": "ares.v1.event.SummaryWritten",
    "alert": "ares.v1.event.AlertRaised",
}

# Command type -> payload record. Commands are a closed set: an unknown type is rejected.
COMMAND_PAYLOADS: Mapping[str, str] = {
    "agent.start": "ares.v1.command.StartAgent",
    "agent.stop": "ares.v1.command.StopAgent",
    "agent.kill": "ares.v1.command.KillAgent",
    "agent.resume": "ares.v1.command.ResumeAgent",
    "agent.declare_dead": "ares.v1.command.DeclareDead",
    "agent.quarantine": "ares.v1.command.QuarantineAgent",
    "task.assign": "ares.v1.command.AssignTask",
    "snapshot.request": "ares.v1.command.RequestSnapshot",
    "events.append": "ares.v1.command.AppendEvents",
    "agent.signal": "ares.v1.command.SignalAgent",
    "schedule.create": "ares.v1.command.CreateSchedule",
    "schedule.pause": "ares.v1.command.PauseSchedule",
    "schedule.resume": "ares.v1.command.ResumeSchedule",
    "schedule.delete": "ares.v1.command.DeleteSchedule",
    "worker.crash": "ares.v1.command.CrashWorker",
}

_RELEASE_NAME = re.compile(r"^v(\d+)$")

REASONS = ("bad_magic", "unknown_fingerprint", "truncated", "schema_mismatch", "invalid_payload")


class CodecError(SchemaError):
    """A record that cannot be encoded or decoded; ``reason`` is one of ``REASONS``.

    The reason is a short stable code (the DLQ's reason header); the message adds detail.
    """

    def __init__(self, reason: str, detail: str) -> None:
        if len(detail) > 300:
            detail = detail[:300] + "..."
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class SchemaFile:
    """One parsed .avsc file: the top-level record it defines and how to recognise it."""

    name: str  # full name of the top-level record, e.g. ares.v1.Event
    release: str  # "current" or a released version ("v1", ...)
    path: Path
    parsed: Schema  # fastavro-parsed: ready for schemaless_writer/reader
    canonical_form: str  # Parsing Canonical Form (what the fingerprint covers)
    fingerprint: bytes  # CRC-64-AVRO, 8 bytes little-endian, as in single-object encoding
    # What other Avro libraries write for it, to the variant's name (wire/foreign.py).
    foreign: Mapping[bytes, str] = field(default_factory=dict)

    @property
    def named_types(self) -> Mapping[str, Schema]:
        """Every named type the file defines, by full name (payload records included)."""
        named: Mapping[str, Schema] = self.parsed.get("__named_schemas", {})
        return named


@dataclass(frozen=True, slots=True)
class SchemaRegistry:
    """Current schemas by name, and every known writer schema by fingerprint."""

    directory: Path
    current: Mapping[str, SchemaFile]
    releases: Mapping[str, Mapping[str, SchemaFile]] = field(default_factory=dict)
    by_fingerprint: Mapping[bytes, SchemaFile] = field(default_factory=dict)
    # Fingerprints other libraries compute for the same schemas: (writer, variant name).
    by_foreign_fingerprint: Mapping[bytes, tuple[SchemaFile, str]] = field(default_factory=dict)

    def get(self, name: str) -> SchemaFile:
        try:
            return self.current[name]
        except KeyError:
            raise SchemaError(
                f"no schema named {name!r} in {self.directory} (known: {sorted(self.current)})"
            ) from None

    def schema(self, name: str) -> Schema:
        return self.get(name).parsed

    def fingerprint(self, name: str) -> bytes:
        return self.get(name).fingerprint

    def writer(self, fingerprint: bytes) -> SchemaFile | None:
        return self.by_fingerprint.get(fingerprint)

    def versions_of(self, name: str) -> list[SchemaFile]:
        """Current first, then released versions newest first, distinct fingerprints only."""
        seen: set[bytes] = set()
        out: list[SchemaFile] = []
        candidates = [self.current.get(name)]
        candidates += [self.releases[r].get(name) for r in sorted_releases(self.releases)[::-1]]
        for sf in candidates:
            if sf is not None and sf.fingerprint not in seen:
                seen.add(sf.fingerprint)
                out.append(sf)
        return out


def repo_schema_dir() -> Path:
    return Path(__file__).resolve().parents[4] / "schemas"


def package_schema_dir() -> Path:
    return Path(__file__).resolve().parent / "avsc"


def schema_dir() -> Path:
    """The directory the schemas are loaded from; see the module docstring for the order."""
    configured = os.environ.get(SCHEMA_DIR_ENV)
    if configured:
        path = Path(configured)
        if not any(path.glob("*.avsc")):
            raise SchemaError(f"{SCHEMA_DIR_ENV}={configured}: no .avsc file in that directory")
        return path
    repo = repo_schema_dir()
    if (repo.parent / "pyproject.toml").is_file() and any(repo.glob("*.avsc")):
        return repo
    if any(package_schema_dir().glob("*.avsc")):
        return package_schema_dir()
    raise SchemaError(
        f"no .avsc files found in {repo_schema_dir()} or {package_schema_dir()}; "
        f"set {SCHEMA_DIR_ENV}"
    )


def sorted_releases(names: Mapping[str, Any] | list[str]) -> list[str]:
    """Release directory names oldest first (v2 before v10)."""
    valid = [n for n in names if _RELEASE_NAME.match(n)]
    return sorted(valid, key=lambda n: int(n[1:]))


def load_file(path: Path, release: str = CURRENT) -> SchemaFile:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SchemaError(f"{path}: cannot read the schema: {e}") from e
    try:
        # A fresh named-types dict per file: files are self-contained, and two releases of
        # the same record must not collide.
        parsed = parse_schema(raw, named_schemas={})
        canonical = to_parsing_canonical_form(parsed)
    except Exception as e:  # fastavro raises SchemaParseException, ValueError, KeyError
        raise SchemaError(f"{path}: invalid Avro schema: {e}") from e
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise SchemaError(f"{path}: a schema file must define one top-level record")
    return SchemaFile(
        name=parsed["name"],
        release=release,
        path=path,
        parsed=parsed,
        canonical_form=canonical,
        fingerprint=bytes.fromhex(_fingerprint(canonical, "CRC-64-AVRO")),
        foreign=foreign_fingerprints(raw),
    )


def load_directory(directory: Path, release: str = CURRENT) -> dict[str, SchemaFile]:
    """Every .avsc file of one directory (not recursive), by record name."""
    out: dict[str, SchemaFile] = {}
    for path in sorted(directory.glob("*.avsc")):
        sf = load_file(path, release)
        if sf.name in out:
            raise SchemaError(f"{path} and {out[sf.name].path} both define {sf.name}")
        out[sf.name] = sf
    return out


def load_releases(directory: Path) -> dict[str, dict[str, SchemaFile]]:
    base = directory / RELEASED_DIR
    if not base.is_dir():
        return {}
    names = sorted_releases([p.name for p in base.iterdir() if p.is_dir()])
    return {name: load_directory(base / name, name) for name in names}


def load_registry(directory: Path | None = None) -> SchemaRegistry:
    """Parse the current schemas and every release; index all fingerprints."""
    directory = directory if directory is not None else schema_dir()
    current = load_directory(directory)
    if not current:
        raise SchemaError(f"no .avsc file in {directory}")
    releases = load_releases(directory)
    by_fp: dict[bytes, SchemaFile] = {}
    # Oldest first so that the current file wins for a fingerprint shared with a release
    # (same parsing form; the current file carries the current docs and defaults).
    for release in releases.values():
        for sf in release.values():
            _register(by_fp, sf)
    for sf in current.values():
        by_fp[sf.fingerprint] = sf
    by_foreign: dict[bytes, tuple[SchemaFile, str]] = {}
    for sf in [*(f for r in releases.values() for f in r.values()), *current.values()]:
        for fp, variant in sf.foreign.items():
            if fp not in by_fp:  # a spec fingerprint always means its own schema
                by_foreign[fp] = (sf, variant)
    return SchemaRegistry(directory, current, releases, by_fp, by_foreign)


def _register(by_fp: dict[bytes, SchemaFile], sf: SchemaFile) -> None:
    other = by_fp.get(sf.fingerprint)
    if other is not None and other.name != sf.name:
        raise SchemaError(
            f"fingerprint collision: {sf.path} ({sf.name}) and {other.path} ({other.name})"
        )
    by_fp[sf.fingerprint] = sf


@cache
def registry() -> SchemaRegistry:
    """The process-wide registry, loaded on first use (cache_clear() to reload in tests)."""
    return load_registry()


# -- typed payloads ------------------------------------------------------------------------

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (int, float),
    "double": (int, float),
    "string": (str,),
    "bytes": (bytes, bytearray),
    "fixed": (bytes, bytearray),
    "enum": (str,),
    "array": (list, tuple),
    "map": (Mapping,),
    "record": (Mapping,),
}


def _type_info(avro_type: Any) -> tuple[str, tuple[type, ...]]:
    """A readable name of a field type and the Python types it accepts."""
    if isinstance(avro_type, list):
        infos = [_type_info(t) for t in avro_type]
        return "|".join(n for n, _ in infos), tuple(t for _, ts in infos for t in ts)
    if isinstance(avro_type, dict):
        kind = avro_type["type"]
        if avro_type.get("logicalType", "").startswith("timestamp"):
            return f"{kind}({avro_type['logicalType']})", (int, datetime)
        return kind, _PY_TYPES.get(kind, (Mapping,))
    return avro_type, _PY_TYPES.get(avro_type, (Mapping,))  # a named type: a record


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    type_name: str
    accepts: tuple[type, ...]
    required: bool
    default: Any
    rejects_bool: bool  # bool is an int subclass: refuse True in a long field


@dataclass(frozen=True, slots=True)
class PayloadSpec:
    """The fields of one typed payload record, checked before fastavro sees them.

    fastavro alone would drop unknown keys silently, truncate 1.5 to 1 in a long, and name
    a missing field vaguely; this gives ``invalid_payload`` errors that name the field.
    """

    type: str  # the event or command type
    record: str  # the payload record's full name
    fields: tuple[_FieldSpec, ...]
    names: frozenset[str]

    @classmethod
    def of(cls, type_: str, record: Schema) -> PayloadSpec:
        specs = []
        for f in record["fields"]:
            type_name, accepts = _type_info(f["type"])
            specs.append(_FieldSpec(f["name"], type_name, accepts, "default" not in f,
                                    f.get("default"), bool not in accepts))
        return cls(type_, record["name"], tuple(specs), frozenset(s.name for s in specs))

    def normalize(self, payload: Any) -> dict[str, Any]:
        """Every field of the record, defaults filled in: equal to what decoding returns."""
        if type(payload) is not dict and not isinstance(payload, Mapping):
            got = type(payload).__name__
            raise CodecError("invalid_payload", f"{self.type}: payload must be a mapping, "
                             f"got {got}")
        unknown = payload.keys() - self.names
        if unknown:
            raise CodecError("invalid_payload", f"{self.type}: unknown field(s) "
                             f"{sorted(map(str, unknown))} (fields of {self.record}: "
                             f"{[f.name for f in self.fields]})")
        out: dict[str, Any] = {}
        for f in self.fields:
            if f.name in payload:
                value = payload[f.name]
                if not isinstance(value, f.accepts) or (f.rejects_bool and type(value) is bool):
                    raise CodecError("invalid_payload", f"{self.type}: field {f.name!r} must be "
                                     f"{f.type_name}, got {type(value).__name__}")
            elif f.required:
                raise CodecError("invalid_payload",
                                 f"{self.type}: missing required field {f.name!r} ({f.type_name})")
            else:
                value = f.default
                if isinstance(value, dict | list):
                    value = type(value)(value)  # never share a mutable default
            out[f.name] = value
        return out


def specs_of(sf: SchemaFile, types: Mapping[str, str]) -> dict[str, PayloadSpec]:
    """Payload specs of ``sf`` per type; every mapped record must exist in the schema."""
    named = sf.named_types
    missing = [record for record in types.values() if record not in named]
    if missing:
        raise SchemaError(f"{sf.path}: payload records {missing} are not defined in {sf.name}")
    return {t: PayloadSpec.of(t, named[record]) for t, record in types.items()}
