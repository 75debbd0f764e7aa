"""Fingerprints that other Avro libraries compute for our schemas, and why a record's
fingerprint matched nothing.

The single-object header names the writer schema by the CRC-64-AVRO of its Parsing Canonical
Form. The specification (and Java's ``SchemaNormalization``, and fastavro) drop a logical type
and collapse ``{"type": "long", "logicalType": "timestamp-micros"}`` to ``"long"``; several
libraries do not, and every schema of ours has a timestamp, so a producer on one of them
writes a fingerprint no spec-conformant reader knows. The codec accepts these *foreign*
fingerprints as the same writer schema — the body is identical Avro — and counts each record
(``ares_foreign_fingerprint_total{schema,variant}``) so that operators know which producers
to fix. Each variant below is the measured behaviour of one library, held to that library
in the tests (tests/unit/test_foreign_fingerprints.py, tests/integration/clients/).
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from fastavro import schemaless_reader
from fastavro.schema import fingerprint as _fingerprint
from fastavro.types import Schema

PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes",
                               "string"})
DOCS: Final = "docs/clients.md#fingerprints"


@dataclass(frozen=True, slots=True)
class Variant:
    """One library's departure from the Parsing Canonical Form."""

    name: str  # the metric's ``variant`` label
    library: str  # who computes it, for people
    annotated_primitive: str  # "collapse" (spec) | "type-only" | "keep-logical-type"
    doubled_namespace: bool = False  # a nested type's own namespace after the enclosing one


SPEC: Final = Variant("spec", "the Avro specification (Java, fastavro)", "collapse")
# Schema.fingerprint() of the `avro` package 1.12: {"type":"long"}, the logical type dropped.
PYTHON_AVRO: Final = Variant("python-avro", "Apache Avro for Python (avro 1.12)", "type-only")
# linkedin/goavro v2.15 Codec.Rabin (SingleFromNative): as python-avro, and a nested named
# type with a namespace of its own is named <enclosing namespace>.<namespace>.<name>.
GOAVRO: Final = Variant("goavro", "linkedin/goavro v2", "type-only", doubled_namespace=True)
# hamba/avro v2.31, its soe package (CRC64AvroLE of Schema.String()): logicalType kept.
# (Its FingerprintUsing(CRC64Avro) gives the same bytes big-endian: written as they come,
# the diagnosis below names the reversal.)
HAMBA: Final = Variant("hamba-avro", "hamba/avro v2", "keep-logical-type")
VARIANTS: Final = (PYTHON_AVRO, GOAVRO, HAMBA)

# Records decoded with a foreign fingerprint, by (schema name, variant); ares.metrics
# exposes it as ares_foreign_fingerprint_total.
FOREIGN_RECORDS: Final[Counter[tuple[str, str]]] = Counter()


def canonical_form(schema: Any, variant: Variant = SPEC) -> str:
    """The Parsing Canonical Form of ``schema`` (the .avsc's JSON) as ``variant`` writes it."""
    return _Canonicaliser(variant).form(schema, None)


def fingerprint_of(schema: Any, variant: Variant = SPEC) -> bytes:
    """The 8 header bytes a producer using ``variant`` writes for ``schema``."""
    # fastavro's hex is of the little-endian bytes: the header's order.
    return bytes.fromhex(_fingerprint(canonical_form(schema, variant), "CRC-64-AVRO"))


def foreign_fingerprints(schema: Any) -> dict[bytes, str]:
    """Every variant's fingerprint of ``schema`` that differs from the spec's, to the names
    of the variants that write it, joined by ``+`` (python-avro and goavro agree on a schema
    without nested namespaces)."""
    spec = fingerprint_of(schema)
    names: dict[bytes, list[str]] = {}
    for variant in VARIANTS:
        fp = fingerprint_of(schema, variant)
        if fp != spec:
            names.setdefault(fp, []).append(variant.name)
    return {fp: "+".join(found) for fp, found in names.items()}


class _Canonicaliser:
    """The specification's transformation ([PRIMITIVES] [FULLNAMES] [STRIP] [ORDER]
    [STRINGS] [WHITESPACE]), with ``variant``'s departures."""

    def __init__(self, variant: Variant) -> None:
        self.variant = variant
        self.seen: set[str] = set()

    def form(self, schema: Any, namespace: str | None) -> str:
        dump = json.dumps
        if isinstance(schema, str):
            return dump(schema if schema in PRIMITIVES else _full_name(schema, namespace))
        if isinstance(schema, list):
            return "[" + ",".join(self.form(branch, namespace) for branch in schema) + "]"
        kind = schema["type"]
        if kind in PRIMITIVES:
            return self._primitive(kind, schema)
        if kind == "array":
            return '{"type":"array","items":' + self.form(schema["items"], namespace) + "}"
        if kind == "map":
            return '{"type":"map","values":' + self.form(schema["values"], namespace) + "}"
        full = self._named(schema, namespace)
        if full in self.seen:
            return dump(full)
        self.seen.add(full)
        inner = full.rsplit(".", 1)[0] if "." in full else None
        out = '{"name":' + dump(full) + ',"type":' + dump(kind)
        if kind == "record":
            fields = ('{"name":' + dump(f["name"]) + ',"type":' + self.form(f["type"], inner)
                      + "}" for f in schema["fields"])
            out += ',"fields":[' + ",".join(fields) + "]"
        elif kind == "enum":
            out += ',"symbols":' + dump(schema["symbols"], separators=(",", ":"))
        else:
            out += f',"size":{int(schema["size"])}'
        return out + "}"

    def _primitive(self, kind: str, schema: Mapping[str, Any]) -> str:
        rule = self.variant.annotated_primitive
        if rule == "type-only":
            return '{"type":' + json.dumps(kind) + "}"
        logical = schema.get("logicalType")
        if rule == "keep-logical-type" and isinstance(logical, str):
            return '{"type":' + json.dumps(kind) + ',"logicalType":' + json.dumps(logical) + "}"
        return json.dumps(kind)

    def _named(self, schema: Mapping[str, Any], namespace: str | None) -> str:
        own = schema.get("namespace")
        if self.variant.doubled_namespace and own and namespace and "." not in schema["name"]:
            return f"{namespace}.{own}.{schema['name']}"
        return _full_name(schema["name"], own if own is not None else namespace)


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


# -- when nothing matched ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A schema the registry knows, as the diagnosis sees it."""

    name: str
    release: str
    parsed: Schema
    fingerprints: Iterable[bytes]  # the spec's and every foreign one


def diagnose(fingerprint: bytes, body: bytes, candidates: Iterable[Candidate]) -> str:
    """Why ``fingerprint`` matched nothing, in one sentence: the closest schema and the
    likely cause, for the unknown_fingerprint DLQ reason."""
    candidates = list(candidates)
    for candidate in candidates:
        if fingerprint[::-1] in candidate.fingerprints:
            return (f"it is {candidate.name} ({candidate.release})'s with the bytes reversed: "
                    f"the header writes them little-endian ({DOCS})")
    readable = [c for c in candidates if _reads_whole(c.parsed, body)]
    if readable:
        closest = readable[0]
        return (f"the body reads as {closest.name} ({closest.release}): the producer's Avro "
                "library fingerprints another canonical form (logical types kept?); use "
                f"`ares schemas export`'s ({DOCS})")
    return f"nor does the body read as any of them: not an ares record? ({DOCS})"


def _reads_whole(parsed: Schema, body: bytes) -> bool:
    """``body`` is one complete record of ``parsed``: it decodes and nothing is left."""
    stream = io.BytesIO(body)
    try:
        schemaless_reader(stream, parsed, None)
    except Exception:  # any failure means "not this schema"
        return False
    return stream.tell() == len(body) and len(body) > 0
