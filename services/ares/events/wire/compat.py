"""Schema evolution checks: a new reader must read everything an old writer wrote.

Kafka keeps events for a long time and replays them after every upgrade, so every current
schema must be BACKWARD compatible with every released version (``schemas/released/vN``),
not only the last one. Two independent proofs, both must pass:

* **rules** — a practical subset of Avro schema resolution (reader = new, writer = old):
  added fields need a default, removed fields are fine, type changes only by promotion
  (int→long→float→double, string↔bytes), writer union branches and enum symbols must
  exist in the reader (or the enum has a default), named types keep their full name (or
  alias it), fixed sizes stay. Stricter than Avro where meaning would change silently:
  a changed ``logicalType`` (millis → micros) keeps the fingerprint but not the meaning.
* **data** — sample records generated from the old schema (every union branch, both sides
  of every nullable field) are written with it and read back with the new one through
  fastavro's resolution.

ares adds policy rules: every record and field has a ``doc``; ``hash`` stays the last
field of ``ares.v1.Event`` but for the signature fields after it (which it does not cover)
and no field of it (or of its payloads) is removed — the hash of an old event covers that
field, removing it makes old events unverifiable.
"""

from __future__ import annotations

import filecmp
import random
import shutil
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from ares.events.wire.schemas import (
    EVENT,
    RELEASED_DIR,
    SIGNATURE_FIELDS,
    Schema,
    SchemaFile,
    load_directory,
    load_releases,
)

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "enum", "fixed", "error"})
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Problem:
    """One incompatibility: which schema, where in it, what is wrong."""

    schema: str
    path: str
    message: str
    against: str = ""  # the release compared with ("" for policy rules)

    def __str__(self) -> str:
        where = f"{self.schema} ({self.against} -> current)" if self.against else self.schema
        return f"{where} {self.path or '<root>'}: {self.message}"


@dataclass(slots=True)
class Report:
    checked: list[tuple[str, str, int]] = field(default_factory=list)  # name, release, samples
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# -- rules -------------------------------------------------------------------------------


def _names(schema: Any) -> dict[str, Schema]:
    return schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}


def _type(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema["type"])
    return str(schema)


def _label(schema: Any) -> str:
    return str(schema["name"]) if isinstance(schema, dict) and "name" in schema else _type(schema)


def _logical(schema: Any) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


class _Rules:
    def __init__(self, writer: Schema, reader: Schema, *, keep_fields: bool) -> None:
        self._w = _names(writer)
        self._r = _names(reader)
        self._keep_fields = keep_fields
        self._seen: set[tuple[str, str]] = set()
        self.problems: list[tuple[str, str]] = []  # (path, message)

    def _deref(self, schema: Any, names: dict[str, Schema]) -> Any:
        return names.get(schema, schema) if isinstance(schema, str) else schema

    def _same_name(self, w: Schema, r: Schema) -> bool:
        return bool(w["name"] == r["name"] or w["name"] in r.get("aliases", ()))

    def matches(self, w: Any, r: Any) -> bool:
        """Could data of ``w`` be read as ``r`` at all (the union branch selection rule)."""
        w, r = self._deref(w, self._w), self._deref(r, self._r)
        wt, rt = _type(w), _type(r)
        if "union" in (wt, rt):
            return False
        if wt in NAMED:
            return wt == rt and self._same_name(w, r)
        if wt in PRIMITIVES:
            return wt == rt or rt in PROMOTIONS.get(wt, ())
        return wt == rt  # array, map

    def check(self, w: Any, r: Any, path: str) -> None:
        w, r = self._deref(w, self._w), self._deref(r, self._r)
        if isinstance(w, list):
            for branch in w:
                if isinstance(r, list):
                    found = next((b for b in r if self.matches(branch, b)), None)
                    if found is None:
                        self._fail(path, f"writer union branch {_label(branch)} has no "
                                   "counterpart in the reader union")
                        continue
                    self.check(branch, found, f"{path}<{_label(branch)}>")
                else:
                    self.check(branch, r, f"{path}<{_label(branch)}>")
            return
        if isinstance(r, list):
            found = next((b for b in r if self.matches(w, b)), None)
            if found is None:
                self._fail(path, f"{_label(w)} matches no branch of the reader union")
            else:
                self.check(w, found, path)
            return
        self._check_plain(w, r, path)

    def _check_plain(self, w: Any, r: Any, path: str) -> None:
        wt, rt = _type(w), _type(r)
        if _logical(w) != _logical(r):
            self._fail(path, f"logical type changed from {_logical(w)} to {_logical(r)}")
        if wt in PRIMITIVES or rt in PRIMITIVES:
            if wt != rt and rt not in PROMOTIONS.get(wt, ()):
                self._fail(path, f"{wt} cannot be read as {rt} (not an Avro promotion)")
            return
        if wt != rt:
            self._fail(path, f"a {wt} cannot be read as a {rt}")
        elif wt in NAMED and not self._same_name(w, r):
            self._fail(path, f"{wt} renamed from {w['name']} to {r['name']} without an alias")
        elif wt in ("record", "error"):
            self._check_record(w, r, path)
        elif wt == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                self._fail(path, f"enum symbols {missing} removed and the enum has no default")
        elif wt == "fixed" and w["size"] != r["size"]:
            self._fail(path, f"fixed size changed from {w['size']} to {r['size']}")
        elif wt == "array":
            self.check(w["items"], r["items"], f"{path}[]")
        elif wt == "map":
            self.check(w["values"], r["values"], f"{path}{{}}")

    def _check_record(self, w: Schema, r: Schema, path: str) -> None:
        key = (w["name"], r["name"])
        if key in self._seen:  # recursive types: each pair once
            return
        self._seen.add(key)
        writer_fields = {f["name"]: f for f in w["fields"]}
        matched: set[str] = set()
        for rf in r["fields"]:
            names = [rf["name"], *rf.get("aliases", ())]
            wf = next((writer_fields[n] for n in names if n in writer_fields), None)
            sub = f"{path}.{rf['name']}" if path else rf["name"]
            if wf is None:
                if "default" not in rf:
                    self._fail(sub, "field added without a default: old records cannot be read")
                continue
            matched.add(wf["name"])
            self.check(wf["type"], rf["type"], sub)
        if self._keep_fields:
            for name in writer_fields.keys() - matched:
                sub = f"{path}.{name}" if path else name
                self._fail(sub, "field removed from the hash-chained Event: the hashes of old "
                           "events cover it, they would become unverifiable")

    def _fail(self, path: str, message: str) -> None:
        self.problems.append((path, message))


def check_rules(writer: Schema, reader: Schema, *, keep_fields: bool = False) -> list[
        tuple[str, str]]:
    """(path, message) for every rule ``reader`` breaks when reading ``writer``'s data."""
    rules = _Rules(writer, reader, keep_fields=keep_fields)
    rules.check(writer, reader, "")
    return rules.problems


# -- data --------------------------------------------------------------------------------


def _widest_union(schema: Any, names: dict[str, Schema], seen: set[str] | None = None) -> int:
    seen = set() if seen is None else seen
    if isinstance(schema, str):
        if schema in names and schema not in seen:
            seen.add(schema)
            return _widest_union(names[schema], names, seen)
        return 1
    if isinstance(schema, list):
        return max([len(schema)] + [_widest_union(b, names, seen) for b in schema])
    t = schema["type"]
    if t in ("record", "error"):
        seen.add(schema["name"])
        return max([1] + [_widest_union(f["type"], names, seen) for f in schema["fields"]])
    if t == "array":
        return _widest_union(schema["items"], names, seen)
    if t == "map":
        return _widest_union(schema["values"], names, seen)
    return len(schema["symbols"]) if t == "enum" else 1


def sample_records(schema: Schema, count: int | None = None) -> list[Any]:
    """Records of ``schema`` that, together, use every union branch and enum symbol.

    The first ``widest`` samples take branch ``(i + depth) % n`` of every union (so every
    branch of the widest union appears); the others choose branches with a seeded random
    generator, so nested unions (nullable fields of a payload record) are seen on both
    sides too. Deterministic: the same schema always yields the same samples.
    """
    names = _names(schema)
    widest = _widest_union(schema, names)
    count = count if count is not None else 3 * widest + 1
    return [_sample(schema, names, i, 0, None if i < widest else random.Random(i))
            for i in range(count)]


def _sample(schema: Any, names: dict[str, Schema], i: int, depth: int,
            rng: random.Random | None) -> Any:
    if depth > _MAX_DEPTH:
        raise ValueError("schema nests deeper than the sample generator follows")
    if isinstance(schema, str) and schema in names:
        schema = names[schema]
    if isinstance(schema, list):
        n = len(schema)
        branch = schema[(i + depth) % n if rng is None else rng.randrange(n)]
        if isinstance(branch, str):
            branch = names.get(branch, branch)
        value = _sample(branch, names, i, depth + 1, rng)
        # Name record branches explicitly so the writer cannot pick a look-alike branch.
        return (branch["name"], value) if _type(branch) in NAMED else value
    logical, t = _logical(schema), _type(schema)
    if logical == "uuid":
        return str(uuid.UUID(int=i))
    if logical == "decimal":
        return Decimal(i)
    primitive = {
        "null": None, "boolean": i % 2 == 0, "int": 7 * i - 3, "long": 1_000_003 * i - 5,
        "float": i + 0.5, "double": i + 0.25, "string": f"s{i}", "bytes": bytes([i % 256]) * 3,
    }
    if t in primitive:
        return primitive[t]
    if t in ("record", "error"):
        return {f["name"]: _sample(f["type"], names, i, depth + 1, rng) for f in schema["fields"]}
    if t == "enum":
        return schema["symbols"][i % len(schema["symbols"])]
    if t == "fixed":
        return bytes([i % 256]) * schema["size"]
    if t == "array":
        return [_sample(schema["items"], names, i + k, depth + 1, rng) for k in range(i % 3)]
    if t == "map":
        values = schema["values"]
        return {f"k{k}": _sample(values, names, i + k, depth + 1, rng) for k in range(i % 3)}
    raise ValueError(f"cannot sample type {t!r}")


def check_data(writer: Schema, reader: Schema, count: int | None = None) -> tuple[
        int, list[str]]:
    """Write samples with ``writer``, read them with ``reader``: (samples, failure messages).

    Identical failures are reported once, with how many samples hit them.
    """
    samples = sample_records(writer, count)
    failures: dict[str, list[int]] = {}
    for i, record in enumerate(samples):
        buf = BytesIO()
        try:
            schemaless_writer(buf, writer, record)
        except Exception as e:  # a sample the old schema itself rejects: a generator bug
            failures.setdefault(f"cannot be written with the old schema: {e}", []).append(i)
            continue
        buf.seek(0)
        try:
            schemaless_reader(buf, writer, reader)
        except Exception as e:  # fastavro raises many types; every one is a failed proof
            failures.setdefault(f"unreadable: {type(e).__name__}: {e}", []).append(i)
    return len(samples), [
        f"{len(hits)} of {len(samples)} sample records (first: #{hits[0]}) {message}"
        for message, hits in failures.items()
    ]


# -- policies and directories ------------------------------------------------------------


def check_policies(sf: SchemaFile) -> list[Problem]:
    """ares's own rules for one schema file."""
    problems = [Problem(sf.name, path, "missing doc") for path in _undocumented(sf.parsed, "")]
    if sf.name == EVENT:
        names = [f["name"] for f in sf.parsed["fields"]]
        tail = names[names.index("hash"):] if "hash" in names else []
        if tail not in (["hash"], ["hash", *SIGNATURE_FIELDS]):
            problems.append(Problem(sf.name, "hash", "must stay the last field of the Event "
                                    f"record, followed only by {' and '.join(SIGNATURE_FIELDS)}"
                                    " (chain.seal_encoded splices it into the encoded body)"))
    return problems


def _undocumented(schema: Any, path: str, seen: set[str] | None = None) -> list[str]:
    seen = set() if seen is None else seen
    out: list[str] = []
    if isinstance(schema, list):
        for branch in schema:
            out += _undocumented(branch, path, seen)
    elif isinstance(schema, dict):
        t = schema["type"]
        if t in NAMED and schema["name"] not in seen:
            seen.add(schema["name"])
            if not schema.get("doc"):
                out.append(path or schema["name"])
            for f in schema.get("fields", ()):
                sub = f"{path}.{f['name']}" if path else f["name"]
                if not f.get("doc"):
                    out.append(sub)
                out += _undocumented(f["type"], sub, seen)
        elif t == "array":
            out += _undocumented(schema["items"], path, seen)
        elif t == "map":
            out += _undocumented(schema["values"], path, seen)
    return out


def compare(current: SchemaFile, old: SchemaFile, report: Report) -> None:
    """Rules and data proof of ``current`` reading ``old``'s records, into ``report``."""
    keep = current.name == EVENT
    for path, message in check_rules(old.parsed, current.parsed, keep_fields=keep):
        report.problems.append(Problem(current.name, path, message, old.release))
    samples, failures = check_data(old.parsed, current.parsed)
    report.problems += [Problem(current.name, "(data)", m, old.release) for m in failures]
    report.checked.append((current.name, old.release, samples))


def check_directory(directory: Path, against: list[Path] | None = None) -> Report:
    """Check the schemas of ``directory`` against releases (default: all of its releases)."""
    report = Report()
    current = load_directory(directory)
    for sf in current.values():
        report.problems += check_policies(sf)
    if against is None:
        releases = load_releases(directory)
    else:
        releases = {_release_label(p): load_directory(p, _release_label(p)) for p in against}
    for label, old_files in releases.items():
        for name, old in old_files.items():
            if name not in current:
                report.problems.append(Problem(name, "", "schema removed: records written with "
                                               "it could no longer be read", label))
                continue
            compare(current[name], old, report)
    return report


def _release_label(path: Path) -> str:
    return path.name if path.parent.name == RELEASED_DIR else str(path)


# -- the packaged copy -------------------------------------------------------------------


def _avsc_files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*.avsc")}


def copy_drift(source: Path, copy: Path) -> list[str]:
    """How the packaged copy differs from the source directory ([] when in sync)."""
    src, dst = _avsc_files(source), _avsc_files(copy) if copy.is_dir() else set()
    drift = [f"missing in the copy: {p}" for p in sorted(src - dst)]
    drift += [f"not in the source: {p}" for p in sorted(dst - src)]
    drift += [f"differs: {p}" for p in sorted(src & dst)
              if not filecmp.cmp(source / p, copy / p, shallow=False)]
    return drift


def sync_copy(source: Path, copy: Path) -> list[Path]:
    """Make ``copy`` an exact copy of the .avsc files under ``source``; returns the changes."""
    changed: list[Path] = []
    src = _avsc_files(source)
    for rel in sorted(src):
        target = copy / rel
        if not target.exists() or not filecmp.cmp(source / rel, target, shallow=False):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, target)
            changed.append(rel)
    for rel in sorted(_avsc_files(copy) - src) if copy.is_dir() else []:
        (copy / rel).unlink()
        changed.append(rel)
    return changed
