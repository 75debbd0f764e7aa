"""A hand-written Avro encoder of the Event envelope, for the append path.

fastavro's ``schemaless_writer`` resolves the whole envelope schema on every call (the
payload union, the map, the logical type): about half of what sealing an event costs. The
envelope's shape is fixed, so the canonical body (``chain`` module) can be written field by
field instead: varint lengths and UTF-8 bytes; a typed payload record is written by fastavro
alone, with the record's own schema (no union to resolve). ``EnvelopeWriter.of`` checks
the parsed Event schema field by field and returns ``None`` when it is not the shape this
encoder knows — the codec then keeps using fastavro, never writing different bytes.
Equality with fastavro and the reference ``avro`` library is tested
(tests/unit/test_envelope.py, tests/unit/test_reference_avro.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from io import BytesIO
from typing import Any, Final

from fastavro import parse_schema, schemaless_writer
from fastavro.schema import SchemaParseException, UnknownType

from ares.events.wire.schemas import JSON_PAYLOAD, CodecError

# Field name -> Avro type of the envelope, in order, as fastavro parses it.
_SHAPE: tuple[tuple[str, Any], ...] = (
    ("id", "string"),
    ("stream_id", "string"),
    ("type", "string"),
    ("module", "string"),
    ("version", "long"),
    ("timestamp", {"type": "long", "logicalType": "timestamp-micros"}),
    ("payload", None),  # a union with a JsonPayload branch: checked apart
    ("metadata", {"type": "map", "values": "string"}),
    ("prev_hash", "string"),
    ("hash", "string"),
    ("signature", ["null", "bytes"]),
    ("key_id", ["null", "string"]),
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# zig-zag varints of 0..4095, made once (~140 KB): string lengths (a hash's 64 characters,
# most JSON payloads) and versions, without a bytes object made per field of every event.
_SMALL_LIMIT: Final = 4096
_SMALL: Final = [bytes([n << 1]) if n < 64 else bytes((((n << 1) & 0x7F) | 0x80, n >> 6))
                 for n in range(_SMALL_LIMIT)]


def long_bytes(n: int) -> bytes:
    """Avro ``long``: zig-zag, then a little-endian base-128 varint."""
    if 0 <= n < _SMALL_LIMIT:
        return _SMALL[n]
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:  # small negative numbers
        return bytes((z,))
    if z < 0x4000:  # two bytes: string lengths up to 8 KiB, versions up to 8191
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def timestamp_micros(ts: Any) -> int:
    """Avro ``timestamp-micros``: microseconds since the epoch of a datetime (a naive one is
    taken as UTC, never as local time), or integer microseconds as they are."""
    if isinstance(ts, datetime):
        aware: datetime = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
        return (aware - _EPOCH) // _MICROSECOND
    if isinstance(ts, int) and not isinstance(ts, bool):
        return ts
    raise CodecError("invalid_payload", f"timestamp must be a datetime, got {type(ts).__name__}")


# How many encoded names (stream ids, types, modules) an EnvelopeWriter keeps before it
# starts over: ~150 bytes each, a few MB at most.
_NAME_CACHE_LIMIT: Final = 16384


def string_bytes(s: str) -> bytes:
    """Avro ``string``: its UTF-8 length as a long, then the bytes."""
    raw = s.encode()
    return long_bytes(len(raw)) + raw


class EnvelopeWriter:
    """Writes Event bodies byte for byte as fastavro writes them with the whole schema."""

    def __init__(self, branches: Mapping[str, tuple[bytes, Any]]) -> None:
        # payload record name -> (its union index as a varint, its own parsed schema)
        self._branches = dict(branches)
        self._json_branch = self._branches[JSON_PAYLOAD][0]
        # The last timestamp written and its bytes: the appends of one transaction share one
        # datetime, and converting it (a timedelta, a floor division, an 8-byte varint) is
        # the dearest field to write.
        self._stamp: tuple[datetime | None, bytes] = (None, b"")
        # A stream's id, and the types and modules of its events, come back on event after
        # event: their encodings (UTF-8 and a length varint) are looked up instead of made.
        self._names: dict[str, bytes] = {}

    @classmethod
    def of(cls, parsed_event_schema: Mapping[str, Any]) -> EnvelopeWriter | None:
        """The writer for this Event schema, or None if it is not the known shape."""
        fields = parsed_event_schema.get("fields", [])
        if [f.get("name") for f in fields] != [name for name, _ in _SHAPE]:
            return None
        for field, (_, avro_type) in zip(fields, _SHAPE, strict=True):
            if avro_type is not None and _plain(field["type"]) != avro_type:
                return None
        union = fields[6]["type"]
        if not isinstance(union, list):
            return None
        branches: dict[str, tuple[bytes, Any]] = {}
        for i, branch in enumerate(union):
            if not isinstance(branch, dict) or branch.get("type") != "record":
                return None
            try:
                branches[branch["name"]] = (long_bytes(i), parse_schema(branch))
            except (SchemaParseException, UnknownType):
                # It refers to a type named in another branch: cannot stand alone, so the
                # codec writes events with this payload through fastavro and the whole schema.
                continue
        json_branch = next((b for b in union if b.get("name") == JSON_PAYLOAD), None)
        if json_branch is None or [(f.get("name"), _plain(f.get("type")))
                                   for f in json_branch.get("fields", [])] != [("json", "string")]:
            return None
        return cls(branches) if JSON_PAYLOAD in branches else None

    def knows(self, record: str) -> bool:
        return record in self._branches

    def unhashed(self, *, id: str, stream_id: str, type: str, module: str, version: int,
                 timestamp: datetime, record: str, datum: Mapping[str, Any],
                 metadata: Mapping[str, str], prev_hash: str) -> bytes:
        """The body up to ``prev_hash`` (without ``hash`` and the signature fields after
        it): ``datum`` is the payload as the
        ``record`` branch of the union. ``metadata`` must be sorted by key and hold strings
        only (``codec.normalize_metadata``). Raises what fastavro or ``str.encode`` raise
        for what Avro cannot write (TypeError, ValueError, AttributeError, KeyError...)."""
        stamp = self._stamp
        if stamp[0] is not timestamp:  # the same object: the same instant
            stamp = self._stamp = (timestamp, long_bytes(timestamp_micros(timestamp)))
        if record == JSON_PAYLOAD:
            payload = self._json_branch + string_bytes(datum["json"])
        else:
            branch, schema = self._branches[record]
            buf = BytesIO()
            schemaless_writer(buf, schema, datum)
            payload = branch + buf.getvalue()
        parts = [
            string_bytes(id), self._name_bytes(stream_id), self._name_bytes(type),
            self._name_bytes(module), long_bytes(version), stamp[1], payload,
        ]
        if metadata:
            parts.append(long_bytes(len(metadata)))
            for key, value in metadata.items():
                parts.append(string_bytes(key))
                parts.append(string_bytes(value))
        parts.append(b"\x00")  # end of the map
        parts.append(string_bytes(prev_hash))
        return b"".join(parts)

    def _name_bytes(self, name: str) -> bytes:
        """``string_bytes(name)``, remembered (a failure to encode is not)."""
        encoded = self._names.get(name)
        if encoded is None:
            encoded = string_bytes(name)
            if len(self._names) >= _NAME_CACHE_LIMIT:
                self._names.clear()
            self._names[name] = encoded
        return encoded


def _plain(avro_type: Any) -> Any:
    """A parsed field type without fastavro's extra keys, to compare with ``_SHAPE``."""
    if isinstance(avro_type, dict):
        return {k: v for k, v in avro_type.items() if k in ("type", "logicalType", "values")}
    return avro_type


__all__ = ["EnvelopeWriter", "long_bytes", "string_bytes", "timestamp_micros"]
