"""Schema documents for consumers in other languages (``ares schemas export``).

Three documents per schema file, each carrying the schema's fingerprint, so a team that
generates its types from them can tell which writer schema a record was written with:

- ``avsc``: the .avsc JSON as in the file, plus an ``x-ares`` attribute (version,
  fingerprint, Parsing Canonical Form). Avro ignores attributes it does not know and the
  canonical form leaves them out, so the document is still a valid Avro schema with the
  same fingerprint: ``avro-tools compile`` and the like take it as it is.
- ``json-schema``: a JSON Schema (draft 2020-12) of the Avro *JSON encoding* of a record
  (the Avro specification's, as Java's ``JsonEncoder`` and ``fastavro.json_writer`` write
  it): a union value other than null is wrapped in an object keyed by its branch's type
  name (``{"string": "x"}``, ``{"ares.v1.event.AgentStarted": {...}}``); bytes and fixed are
  strings of code points U+0000..U+00FF, one per byte.
- ``markdown``: a page per schema for humans: the fields of the record, then every nested
  record and enum.

Pure: nothing here reads anything but the schema files already found by ``schemas``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ares.events.wire.schemas import SchemaFile, load_directory, load_releases

FORMATS: Final = ("avsc", "json-schema", "markdown")
EXTENSIONS: Final = {"avsc": "avsc", "json-schema": "schema.json", "markdown": "md"}
JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

_LOGICAL: Final = {
    "timestamp-millis": "milliseconds since the Unix epoch, UTC",
    "timestamp-micros": "microseconds since the Unix epoch, UTC",
    "timestamp-nanos": "nanoseconds since the Unix epoch, UTC",
    "local-timestamp-millis": "milliseconds since the Unix epoch, local time",
    "local-timestamp-micros": "microseconds since the Unix epoch, local time",
    "date": "days since the Unix epoch (1970-01-01)",
    "time-millis": "milliseconds after midnight",
    "time-micros": "microseconds after midnight",
    "uuid": "a UUID in text form",
    "decimal": "a two's-complement big-endian unscaled integer",
}

_BYTES_NOTE: Final = ("Avro JSON encoding of bytes: a string with one code point "
                      "U+0000..U+00FF per byte (ISO-8859-1), not base64")


def fingerprint_int64(sf: SchemaFile) -> int:
    """The fingerprint as the signed 64-bit integer Java's
    ``SchemaNormalization.parsingFingerprint64`` returns (the header holds it little-endian)."""
    return int.from_bytes(sf.fingerprint, "little", signed=True)


def collect(directory: Path, *, released: bool = True) -> list[SchemaFile]:
    """The current schemas of ``directory``, then (``released``) each release, oldest first."""
    files = list(load_directory(directory).values())
    if released:
        for release in load_releases(directory).values():
            files.extend(release.values())
    return files


def file_name(sf: SchemaFile, fmt: str) -> str:
    """``<name>.<version>.<ext>``, e.g. ``ares.v1.Event.current.schema.json``."""
    return f"{sf.name}.{sf.release}.{EXTENSIONS[fmt]}"


def metadata(sf: SchemaFile) -> dict[str, Any]:
    return {
        "name": sf.name,
        "version": sf.release,
        "fingerprint": sf.fingerprint.hex(),
        "fingerprint_int64": fingerprint_int64(sf),
        "canonical_form": sf.canonical_form,
    }


# -- avsc ----------------------------------------------------------------------------------

def avsc_document(sf: SchemaFile) -> dict[str, Any]:
    """The file's JSON with an ``x-ares`` attribute: a valid Avro schema, same fingerprint."""
    raw = json.loads(sf.path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):  # load_file already refused anything but a record
        raise ValueError(f"{sf.path}: not a record schema")
    return {**raw, "x-ares": metadata(sf)}


# -- JSON Schema ---------------------------------------------------------------------------

def _plain(schema: SchemaFile) -> Any:
    """``parsed`` without fastavro's bookkeeping keys (full names, no namespaces)."""
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if not k.startswith("__")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return strip(schema.parsed)


def _branch_name(t: Any) -> str:
    """The key of a union branch in the JSON encoding: a primitive's or a named type's name."""
    if isinstance(t, str):
        return t
    return str(t["name"] if t["type"] in ("record", "enum", "fixed") else t["type"])


def _encode_default(t: Any, value: Any) -> Any:
    """A field default (the schema's JSON form) as the JSON encoding writes the value."""
    if isinstance(t, list):
        first = t[0]
        if first == "null" or value is None:
            return None
        return {_branch_name(first): value}
    return value


class _JsonSchemaBuilder:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def ref(self, name: str) -> dict[str, Any]:
        return {"$ref": f"#/$defs/{name}"}

    def type_(self, t: Any) -> dict[str, Any]:
        if isinstance(t, list):
            return self.union(t)
        if isinstance(t, str):
            return self.primitive(t) if t in _PRIMITIVES else self.ref(t)
        kind = t["type"]
        if kind == "record":
            self.record(t)
            return self.ref(t["name"])
        if kind == "enum":
            self.defs[t["name"]] = {
                "title": t["name"], "enum": list(t["symbols"]),
                **({"description": t["doc"]} if t.get("doc") else {}),
            }
            return self.ref(t["name"])
        if kind == "fixed":
            self.defs[t["name"]] = {
                "title": t["name"], "type": "string", "minLength": t["size"],
                "maxLength": t["size"], "description": f"fixed({t['size']}); {_BYTES_NOTE}",
            }
            return self.ref(t["name"])
        if kind == "array":
            return {"type": "array", "items": self.type_(t["items"])}
        if kind == "map":
            return {"type": "object", "additionalProperties": self.type_(t["values"])}
        out = self.primitive(kind)
        logical = t.get("logicalType")
        if logical:
            meaning = _LOGICAL.get(logical, "")
            note = out.get("description")
            out["description"] = "; ".join(
                s for s in (f"{kind} ({logical}){': ' + meaning if meaning else ''}", note) if s)
            out["x-avro-logical-type"] = logical
            if logical == "uuid":
                out["format"] = "uuid"
        return out

    def primitive(self, name: str) -> dict[str, Any]:
        if name == "int":
            return {"type": "integer", "minimum": _INT32[0], "maximum": _INT32[1]}
        if name == "long":
            return {"type": "integer", "minimum": _INT64[0], "maximum": _INT64[1]}
        if name == "bytes":
            return {"type": "string", "description": _BYTES_NOTE}
        return {"type": _PRIMITIVES[name]}

    def union(self, branches: list[Any]) -> dict[str, Any]:
        options: list[dict[str, Any]] = []
        for b in branches:
            if b == "null":
                options.append({"type": "null"})
            else:
                key = _branch_name(b)
                options.append({"type": "object", "properties": {key: self.type_(b)},
                                "required": [key], "additionalProperties": False})
        return options[0] if len(options) == 1 else {"oneOf": options}

    def record(self, r: dict[str, Any]) -> None:
        name = r["name"]
        if name in self.defs:
            return
        doc: dict[str, Any] = {"title": name, "type": "object"}
        if r.get("doc"):
            doc["description"] = r["doc"]
        self.defs[name] = doc  # before the fields: a recursive record refers to itself
        properties: dict[str, Any] = {}
        required: list[str] = []
        for f in r["fields"]:
            prop = self.type_(f["type"])
            if f.get("doc"):
                if "description" in prop and "$ref" not in prop:
                    prop["description"] = f"{f['doc']} ({prop['description']})"
                else:
                    prop["description"] = f["doc"]
            if "default" in f:
                prop["default"] = _encode_default(f["type"], f["default"])
            else:
                required.append(f["name"])
            properties[f["name"]] = prop
        doc.update(properties=properties, required=required, additionalProperties=False)


_PRIMITIVES: Final = {"null": "null", "boolean": "boolean", "int": "integer",
                      "long": "integer", "float": "number", "double": "number",
                      "bytes": "string", "string": "string"}


def json_schema_document(sf: SchemaFile) -> dict[str, Any]:
    """A JSON Schema (2020-12) of the Avro JSON encoding of a ``sf.name`` record."""
    builder = _JsonSchemaBuilder()
    root = builder.type_(_plain(sf))
    top = builder.defs[sf.name]
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": f"urn:ares-mesh:schema:{sf.name}:{sf.release}",
        "title": f"{sf.name} ({sf.release})",
        "description": top.get("description", sf.name) + " — the Avro JSON encoding of the "
        "record: a union value other than null is an object keyed by its branch's type name.",
        "x-avro-fingerprint": sf.fingerprint.hex(),
        "x-avro-fingerprint-int64": fingerprint_int64(sf),
        "x-avro-version": sf.release,
        **root,
        "$defs": builder.defs,
    }


# -- markdown ------------------------------------------------------------------------------

def _type_text(t: Any) -> str:
    if isinstance(t, list):
        return " | ".join(_type_text(b) for b in t)
    if isinstance(t, str):
        return t
    kind = t["type"]
    if kind in ("record", "enum", "fixed"):
        return str(t["name"])
    if kind == "array":
        return f"array<{_type_text(t['items'])}>"
    if kind == "map":
        return f"map<{_type_text(t['values'])}>"
    logical = t.get("logicalType")
    return f"{kind} ({logical})" if logical else str(kind)


def _named_types(t: Any) -> Iterator[dict[str, Any]]:
    """Every record, enum and fixed defined inside ``t``, in the order of definition."""
    if isinstance(t, list):
        for b in t:
            yield from _named_types(b)
    elif isinstance(t, dict):
        kind = t["type"]
        if kind in ("record", "enum", "fixed"):
            yield t
        if kind == "record":
            for f in t["fields"]:
                yield from _named_types(f["type"])
        elif kind == "array":
            yield from _named_types(t["items"])
        elif kind == "map":
            yield from _named_types(t["values"])


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{_cell(text)}`" if text else ""


def _field_table(record: dict[str, Any]) -> list[str]:
    lines = ["| field | type | default | doc |", "| --- | --- | --- | --- |"]
    for f in record["fields"]:
        default = _code(json.dumps(f["default"])) if "default" in f else "—"
        lines.append(f"| {_code(f['name'])} | {_code(_type_text(f['type']))} | {default} "
                     f"| {_cell(f.get('doc', ''))} |")
    return lines


def markdown_document(sf: SchemaFile) -> str:
    """A page for humans: header with the fingerprints, the fields, then nested types."""
    top = _plain(sf)
    lines = [f"# {sf.name} ({sf.release})", ""]
    if top.get("doc"):
        lines += [_cell(top["doc"]), ""]
    lines += [
        f"- version: `{sf.release}`",
        f"- fingerprint (CRC-64-AVRO, little-endian hex, as in the single-object header): "
        f"`{sf.fingerprint.hex()}`",
        f"- fingerprint as Java's `SchemaNormalization.parsingFingerprint64`: "
        f"`{fingerprint_int64(sf)}`",
        f"- file: `{sf.path.name}`",
        "",
        "## Fields",
        "",
        *_field_table(top),
    ]
    nested = [t for t in _named_types(top) if t["name"] != sf.name]
    if nested:
        lines += ["", "## Nested types"]
    for t in nested:
        lines += ["", f"### {t['type']} `{t['name']}`", ""]
        if t.get("doc"):
            lines += [_cell(t["doc"]), ""]
        if t["type"] == "record":
            lines += _field_table(t)
        elif t["type"] == "enum":
            lines.append("symbols: " + ", ".join(f"`{s}`" for s in t["symbols"]))
        else:
            lines.append(f"fixed, {t['size']} bytes")
    return "\n".join(lines) + "\n"


# -- all of them ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Exported:
    schema: SchemaFile
    file_name: str
    text: str  # the document, ready to write
    document: Any  # the JSON value (JSON formats) or the same text (markdown)


def export(files: Iterable[SchemaFile], fmt: str) -> list[Exported]:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    out = []
    for sf in files:
        if fmt == "markdown":
            text = markdown_document(sf)
            out.append(Exported(sf, file_name(sf, fmt), text, text))
            continue
        doc = avsc_document(sf) if fmt == "avsc" else json_schema_document(sf)
        out.append(Exported(sf, file_name(sf, fmt), dumps(doc), doc))
    return out


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


__all__ = ["EXTENSIONS", "FORMATS", "Exported", "avsc_document", "collect",
           "export", "file_name", "fingerprint_int64", "json_schema_document",
           "markdown_document", "metadata"]
