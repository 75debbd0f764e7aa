"""A hand-written Avro encoder of the Event envelope, for the append path.

fastavro's ``schemaless_writer`` resolves the whole envelope schema on every call (the
payload union, the map, the logical type): about half of what sealing an event costs. The
envelope's shape is fixed, so the canonical body (``chain`` module) can be written field by
field instead: varint lengths and UTF-8 bytes, nothing else. ``EnvelopeWriter.of`` checks
the parsed Event schema field by field and returns ``None`` when it is not the shape this
encoder knows — the codec then keeps using fastavro, never writing different bytes.
Equality with fastavro and the reference ``avro`` library is tested
(tests/unit/test_envelope.py, tests/unit/test_reference_avro.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ares.events.schemas import JSON_PAYLOAD

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
)

# zig-zag varints of 0..63 (lengths of short strings, small versions): the common case.
_SMALL = [bytes([n << 1]) for n in range(64)]


def long_bytes(n: int) -> bytes:
    """Avro ``long``: zig-zag, then a little-endian base-128 varint."""
    if 0 <= n < 64:
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


def string_bytes(s: str) -> bytes:
    """Avro ``string``: its UTF-8 length as a long, then the bytes."""
    raw = s.encode()
    return long_bytes(len(raw)) + raw


class EnvelopeWriter:
    """Writes Event bodies with a ``JsonPayload`` payload, byte for byte as fastavro does."""

    def __init__(self, json_branch: int) -> None:
        self._json_branch = long_bytes(json_branch)
        # The last timestamp written and its bytes: the appends of one transaction share
        # their timestamp, and an 8-byte varint is the dearest field to write.
        self._stamp: tuple[int, bytes] = (-1, b"")

    @classmethod
    def of(cls, parsed_event_schema: Mapping[str, Any]) -> EnvelopeWriter | None:
        """The writer for this Event schema, or None if it is not the known shape."""
        fields = parsed_event_schema.get("fields", [])
        if [f.get("name") for f in fields] != [name for name, _ in _SHAPE]:
            return None
        for field, (_, avro_type) in zip(fields, _SHAPE, strict=True):
            if avro_type is not None and _plain(field["type"]) != avro_type:
                return None
        branches = fields[6]["type"]
        if not isinstance(branches, list):
            return None
        for i, branch in enumerate(branches):
            if isinstance(branch, dict) and branch.get("name") == JSON_PAYLOAD:
                inner = branch.get("fields", [])
                if [(f.get("name"), _plain(f.get("type"))) for f in inner] == [("json", "string")]:
                    return cls(i)
        return None

    def unhashed(self, *, id: str, stream_id: str, type: str, module: str, version: int,
                 timestamp_us: int, payload_json: str, metadata: Mapping[str, str],
                 prev_hash: str) -> bytes:
        """The body without its last field (``hash``). ``metadata`` must be sorted by key
        and hold strings only (``codec.normalize_metadata``). Raises ``AttributeError``,
        ``TypeError`` or ``UnicodeEncodeError`` for what Avro cannot write."""
        stamp = self._stamp
        if stamp[0] != timestamp_us:
            stamp = self._stamp = (timestamp_us, long_bytes(timestamp_us))
        parts = [
            string_bytes(id), string_bytes(stream_id), string_bytes(type), string_bytes(module),
            long_bytes(version), stamp[1], self._json_branch, string_bytes(payload_json),
        ]
        if metadata:
            parts.append(long_bytes(len(metadata)))
            for key, value in metadata.items():
                parts.append(string_bytes(key))
                parts.append(string_bytes(value))
        parts.append(b"\x00")  # end of the map
        parts.append(string_bytes(prev_hash))
        return b"".join(parts)


def _plain(avro_type: Any) -> Any:
    """A parsed field type without fastavro's extra keys, to compare with ``_SHAPE``."""
    if isinstance(avro_type, dict):
        return {k: v for k, v in avro_type.items() if k in ("type", "logicalType", "values")}
    return avro_type


__all__ = ["EnvelopeWriter", "long_bytes", "string_bytes"]
