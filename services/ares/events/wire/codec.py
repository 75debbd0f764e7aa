"""The wire codec: Avro single-object encoding of every ares record.

Wire format (the Avro spec's single-object encoding)::

    C3 01 | CRC-64-AVRO fingerprint of the writer schema (8 bytes, little-endian) | Avro body

so any consumer, in any language, finds the writer schema from the bytes alone. The
fingerprint registry holds the current schemas and every released version, and decoding
resolves writer -> current reader, so old records stay readable after an upgrade.
``WireFormat`` is the extension point for the Confluent framing (``00`` + schema id) once a
schema registry is configured; only the header differs, the body is the same.

This is the hot path of append and replay: schemas are parsed once (``schemas.registry``),
resolution is skipped when the writer is the current schema, and the two hottest calls skip
fastavro's per-call schema walk: Event bodies are written by ``envelope.EnvelopeWriter``
and records of a current schema are read by a reader compiled from it once
(``avro_reader``), with fastavro re-reading whatever that reader finds malformed (so
errors stay fastavro's). ``Codec(compiled=False)`` reads through fastavro only: the
reference the benchmarks compare with.

Errors are ``CodecError`` (a ``SchemaError``) whose ``reason`` is a short stable code —
``bad_magic | unknown_fingerprint | truncated | schema_mismatch | invalid_payload`` — used
as the DLQ's reason header; the message adds the detail.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache
from io import BytesIO
from typing import Any, Final, Protocol

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError

from ares.errors import SchemaError
from ares.events.model import Event
from ares.events.wire.avro_reader import READ_ERRORS, Reader, compile_reader
from ares.events.wire.canonical import canonical_json, canonical_round_trip, parse_json
from ares.events.wire.envelope import EnvelopeWriter, timestamp_micros
from ares.events.wire.foreign import FOREIGN_RECORDS, Candidate, diagnose
from ares.events.wire.schemas import (
    COMMAND,
    COMMAND_PAYLOADS,
    CURRENT,
    EVENT,
    EVENT_PAYLOADS,
    JSON_PAYLOAD,
    REASONS,
    CodecError,
    PayloadSpec,
    Schema,
    SchemaFile,
    SchemaRegistry,
    registry,
    specs_of,
)

_new_object: Final[Any] = object.__new__
_EVENT: Final = Event
# Event's slots without its frozen ``__setattr__`` (event_from_fields says why). Made with
# ``type()``, not a class statement: mypyc would compile a class statement into a native
# class, whose layout is not Event's.
_EVENT_SLOTS: Final[type] = type("_EventSlots", (), {"__slots__": Event.__slots__})


def event_from_fields(id: str, stream_id: str, type: str, module: str, version: int,
                      timestamp: datetime, payload: Mapping[str, Any],
                      metadata: Mapping[str, str], prev_hash: str, hash: str,
                      signature: bytes | None = None, key_id: str | None = None,
                      wire_body: bytes | None = None) -> Event:
    """``Event(...)`` for the hot paths: every append seals one, every replayed record
    decodes one. The only place that builds an Event this way.

    Why: a frozen dataclass can only be filled through ``object.__setattr__`` (its
    ``__init__``) or its slot descriptors, a generic call per field either way. This fills
    a twin class with the same slots by plain attribute stores and then assigns
    ``__class__``, which CPython allows between classes of the same layout: the same object,
    a fraction of the cost (docs/development.md, "The compiled append path: why each trick").
    It lives in this compiled module, not beside Event in the interpreted model, so that its
    compiled callers (sealing, decoding) reach it by a C call.

    Relies on: ``_EVENT_SLOTS`` having exactly ``Event.__slots__`` (built from them), Event
    validating nothing in ``__init__``/``__post_init__`` (nothing is skipped), and every
    field being a parameter here (tests/unit/test_model.py checks it): an unset slot would
    raise AttributeError on first read.
    """
    event: Any = _new_object(_EVENT_SLOTS)
    event.id = id
    event.stream_id = stream_id
    event.type = type
    event.module = module
    event.version = version
    event.timestamp = timestamp
    event.payload = payload
    event.metadata = metadata
    event.prev_hash = prev_hash
    event.hash = hash
    event.signature = signature
    event.key_id = key_id
    event.wire_body = wire_body
    event.__class__ = _EVENT
    made: Event = event
    return made


MAGIC = b"\xc3\x01"
HEADER_SIZE = 10
# How the canonical encoding of an Event ends: the empty ``hash`` string (length 0), then
# ``signature`` and ``key_id`` null (union branch 0).
CANONICAL_END: Final = b"\x00\x00\x00"


class WireFormat(Protocol):
    """How the writer schema is named in front of the Avro body."""

    def header(self, schema: SchemaFile) -> bytes:
        """The bytes that precede a body written with ``schema``."""
        ...

    def writer_of(self, data: bytes) -> tuple[SchemaFile, int]:
        """The writer schema of ``data`` and the offset of its body; ``CodecError`` else."""
        ...


class SingleObjectEncoding:
    """``C3 01`` + 8-byte little-endian CRC-64-AVRO fingerprint (Avro specification)."""

    def __init__(self, schemas: SchemaRegistry) -> None:
        self._schemas = schemas
        self._by_fingerprint = schemas.by_fingerprint
        self._by_foreign = schemas.by_foreign_fingerprint

    def header(self, schema: SchemaFile) -> bytes:
        return MAGIC + schema.fingerprint

    def writer_of(self, data: bytes) -> tuple[SchemaFile, int]:
        if data[:2] != MAGIC:
            if len(data) < 2 and MAGIC.startswith(data):
                raise CodecError("truncated", f"{len(data)} bytes, a record has {HEADER_SIZE}+")
            got = data[:2].hex(" ") or "no bytes"
            raise CodecError("bad_magic", f"expected c3 01, got {got}")
        if len(data) < HEADER_SIZE:
            raise CodecError("truncated", f"header of {len(data)} bytes, expected {HEADER_SIZE}")
        fingerprint = bytes(data[2:HEADER_SIZE])
        writer = self._by_fingerprint.get(fingerprint)
        if writer is None:
            return self._foreign_writer_of(fingerprint, data), HEADER_SIZE
        return writer, HEADER_SIZE

    def _foreign_writer_of(self, fingerprint: bytes, data: bytes) -> SchemaFile:
        """The schema another Avro library named by ``fingerprint`` (counted), else the
        unknown_fingerprint error with the closest schema and the likely cause."""
        foreign = self._by_foreign.get(fingerprint)
        if foreign is not None:
            writer, variant = foreign
            FOREIGN_RECORDS[(writer.name, variant)] += 1
            return writer
        candidates = [Candidate(sf.name, sf.release, sf.parsed, (sf.fingerprint, *sf.foreign))
                      for sf in self._schemas.by_fingerprint.values()]
        # Current schemas first: the closest match a producer most likely meant.
        candidates.sort(key=lambda c: c.release != CURRENT)
        raise CodecError(
            "unknown_fingerprint",
            f"fingerprint {fingerprint.hex()} is none of the {len(self._by_fingerprint)} "
            "known schemas'; " + diagnose(fingerprint, bytes(data[HEADER_SIZE:]), candidates),
        )


# What fastavro (and str.encode) raise for a datum the schema cannot write.
_UNWRITABLE = (TypeError, ValueError, AttributeError, KeyError, OverflowError)


class PreparedPayload:
    """A payload ready for the wire: its union branch, what is written, what reads back.

    A plain class, not a frozen dataclass: every append makes one, and a dataclass's
    ``__init__`` stays interpreted even in the compiled module; this one compiles (see
    docs/development.md). Treat it as immutable.
    """

    __slots__ = ("datum", "record", "value")

    def __init__(self, record: str, datum: dict[str, Any], value: dict[str, Any]) -> None:
        self.record = record  # full name of the payload record (the union branch)
        self.datum = datum  # the record as written
        self.value = value  # the payload as decode_event returns it


class Codec:
    """Encodes and decodes ares records; one instance per registry, shared and stateless."""

    def __init__(self, schemas: SchemaRegistry | None = None,
                 wire: WireFormat | None = None, *, compiled: bool = True) -> None:
        self.schemas = schemas if schemas is not None else registry()
        self.wire = wire if wire is not None else SingleObjectEncoding(self.schemas)
        self._event = self.schemas.get(EVENT)
        self._event_header = self.wire.header(self._event)
        self._event_specs = specs_of(self._event, EVENT_PAYLOADS)
        self._command_specs = specs_of(self.schemas.get(COMMAND), COMMAND_PAYLOADS)
        fields = self._event.parsed["fields"]
        if [(f["name"], f["type"]) for f in fields[-3:]] != [
                ("hash", "string"), ("signature", ["null", "bytes"]),
                ("key_id", ["null", "string"])]:
            # chain.seal_encoded splices the hash and the signature into the body: they
            # must be the last fields.
            raise SchemaError(f"{self._event.path}: 'hash', 'signature' and 'key_id' must be "
                              f"the last fields of {EVENT}")
        # Writes bodies with JSON payloads without fastavro (the append path); None when the
        # Event schema is not the shape it knows.
        self._envelope = EnvelopeWriter.of(self._event.parsed)
        # Reader schema per writer fingerprint; None when the writer is current (no resolution).
        self._readers: dict[bytes, Schema | None] = {}
        for fp, sf in self.schemas.by_fingerprint.items():
            current = self.schemas.current.get(sf.name)
            same = current is not None and current.fingerprint == fp
            self._readers[fp] = None if same or current is None else current.parsed
        # Compiled readers of the current schemas (no resolution to do): fastavro reads the
        # rest, and re-reads what a compiled reader finds malformed.
        self._compiled: dict[bytes, Reader] = {}
        if compiled:
            for sf in self.schemas.current.values():
                reader = compile_reader(sf.parsed)
                if reader is not None:
                    self._compiled[sf.fingerprint] = reader

    # -- generic records -----------------------------------------------------------------

    def encode(self, name: str, datum: Mapping[str, Any]) -> bytes:
        """Encode a record of the current schema ``name``.

        The payload of an Event or a Command is a plain mapping whose record follows from
        ``type`` (``EVENT_PAYLOADS``/``COMMAND_PAYLOADS``); timestamps are aware datetimes
        or integer microseconds since the epoch.
        """
        try:
            sf = self.schemas.get(name)
        except SchemaError as e:
            raise CodecError("invalid_payload", str(e)) from None
        record = dict(datum)
        if name == EVENT:
            prepared = self.prepare_payload(str(record.get("type")), record.get("payload"))
            record["payload"] = (prepared.record, prepared.datum)
            record["metadata"] = normalize_metadata(record.get("metadata", {}))
            record["timestamp"] = timestamp_micros(record.get("timestamp"))
        elif name == COMMAND:
            spec = self._command_specs.get(str(record.get("type")))
            if spec is None:
                raise CodecError("invalid_payload", f"unknown command type {record.get('type')!r}"
                                 f" (known: {sorted(self._command_specs)})")
            record["payload"] = (spec.record, spec.normalize(record.get("payload")))
        return self.wire.header(sf) + self._write(sf, record)

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """The record name and the record, resolved to the current schema of that name."""
        writer, offset = self.wire.writer_of(data)
        record = self._read(writer, data, offset)
        if writer.name == EVENT:
            record["payload"] = self._payload_value(record)
        elif writer.name == COMMAND:
            record["payload"] = record["payload"][1]
        return writer.name, record

    # -- events --------------------------------------------------------------------------

    def prepare_payload(self, event_type: str, payload: Any, *,
                        read_back: bool = True) -> PreparedPayload:
        """Validate ``payload`` for ``event_type``: the typed record, or JSON for other types.

        ``read_back=False`` skips computing ``value`` for JSON payloads (encoding only).
        """
        spec = self._event_specs.get(event_type)
        if spec is not None:
            value = spec.normalize(payload)
            return PreparedPayload(spec.record, value, value)
        if type(payload) is not dict and not isinstance(payload, Mapping):
            got = type(payload).__name__
            raise CodecError("invalid_payload", f"{event_type}: payload must be a mapping, "
                             f"got {got}")
        try:
            # Read back what decode will return (tuples become lists, keys strings): a
            # sealed event must equal the same event after a round trip through Kafka.
            if read_back:
                text, value = canonical_round_trip(payload)
            else:
                text, value = canonical_json(payload), dict(payload)
        except (TypeError, ValueError) as e:
            raise CodecError("invalid_payload", f"{event_type}: payload is not JSON: {e}") from e
        return PreparedPayload(JSON_PAYLOAD, {"json": text}, value)

    def encode_event(self, event: Event) -> bytes:
        return self._event_header + self.event_body(event, hash_=event.hash,
                                                    signature=event.signature,
                                                    key_id=event.key_id)

    def frame_event(self, body: bytes) -> bytes:
        """Prefix an Event body (from ``event_body``) with the current Event header."""
        return self._event_header + body

    def event_body(self, event: Event, *, hash_: str = "",
                   prepared: PreparedPayload | None = None,
                   schema: SchemaFile | None = None, signature: bytes | None = None,
                   key_id: str | None = None) -> bytes:
        """The Avro body of ``event`` with ``hash`` replaced by ``hash_`` and the signature
        fields by ``signature`` and ``key_id``.

        With the defaults this is the canonical encoding the hash chain covers (empty hash,
        null signature and key id). ``schema`` selects an older Event schema (verifying
        events written before an upgrade; it ignores the fields it does not have).
        """
        if prepared is None:
            prepared = self.prepare_payload(event.type, event.payload, read_back=False)
        datum = {
            "id": event.id,
            "stream_id": event.stream_id,
            "type": event.type,
            "module": event.module,
            "version": event.version,
            "timestamp": timestamp_micros(event.timestamp),
            "payload": (prepared.record, prepared.datum),
            "metadata": normalize_metadata(event.metadata),
            "prev_hash": event.prev_hash,
            "hash": hash_,
            "signature": signature,
            "key_id": key_id,
        }
        return self._write(schema or self._event, datum)

    def unhashed_body(self, *, id: str, stream_id: str, type: str, module: str, version: int,
                      timestamp: datetime, prepared: PreparedPayload,
                      metadata: Mapping[str, str], prev_hash: str) -> bytes:
        """The canonical body of an event being sealed, without its last three bytes (the
        empty ``hash`` string, the null ``signature`` and ``key_id``): what the hash covers
        is this plus ``CANONICAL_END``, what goes on the wire is this plus the hash and the
        signature fields. ``metadata`` as ``normalize_metadata`` returns it."""
        envelope = self._envelope
        if envelope is not None and envelope.knows(prepared.record):
            try:
                return envelope.unhashed(
                    id=id, stream_id=stream_id, type=type, module=module, version=version,
                    timestamp=timestamp, record=prepared.record,
                    datum=prepared.datum, metadata=metadata, prev_hash=prev_hash)
            except _UNWRITABLE as e:
                raise CodecError("invalid_payload", f"{EVENT}: {e}") from e
        draft = Event(id=id, stream_id=stream_id, type=type, module=module, version=version,
                      timestamp=timestamp, payload=prepared.value, metadata=metadata,
                      prev_hash=prev_hash, hash="")
        return self.event_body(draft, prepared=prepared)[:-len(CANONICAL_END)]

    def decode_event(self, data: bytes) -> Event:
        writer, offset = self.wire.writer_of(data)
        if writer.name != EVENT:
            raise CodecError("schema_mismatch", f"expected {EVENT}, got {writer.name}")
        r = self._read(writer, data, offset)
        return event_from_fields(r["id"], r["stream_id"], r["type"], r["module"],
                                 r["version"], r["timestamp"], self._payload_value(r),
                                 r["metadata"], r["prev_hash"], r["hash"],
                                 r.get("signature"), r.get("key_id"), data[offset:])

    # -- internals -----------------------------------------------------------------------

    def _payload_value(self, record: dict[str, Any]) -> dict[str, Any]:
        name, value = record["payload"]
        if name != JSON_PAYLOAD:
            return value  # type: ignore[no-any-return]
        try:
            decoded = parse_json(value["json"])
        except ValueError as e:
            raise CodecError("invalid_payload", f"{record['type']}: payload JSON: {e}") from e
        if not isinstance(decoded, dict):
            raise CodecError("invalid_payload", f"{record['type']}: payload JSON is no object")
        return decoded

    def _write(self, sf: SchemaFile, datum: dict[str, Any]) -> bytes:
        buf = BytesIO()
        try:
            schemaless_writer(buf, sf.parsed, datum)
        except _UNWRITABLE as e:
            raise CodecError("invalid_payload", f"{sf.name}: {e}") from e
        return buf.getvalue()

    def _read(self, writer: SchemaFile, data: bytes, offset: int) -> dict[str, Any]:
        compiled = self._compiled.get(writer.fingerprint)
        if compiled is not None and type(data) is bytes:
            try:
                record, end = compiled(data, offset)
            except READ_ERRORS:
                pass  # malformed: fastavro says how
            else:
                if end == len(data) and type(record) is dict:
                    return record
        buf = BytesIO(data)
        buf.seek(offset)
        reader = self._readers[writer.fingerprint]
        if reader is None and writer.name not in self.schemas.current:
            raise CodecError("schema_mismatch", f"{writer.name} ({writer.release}) has no "
                             "current schema to read it with")
        try:
            record = schemaless_reader(buf, writer.parsed, reader, return_record_name=True,
                                       return_record_name_override=True)
        except EOFError as e:
            raise CodecError("truncated", f"{writer.name} body ends early: {e}") from e
        except SchemaResolutionError as e:
            raise CodecError("schema_mismatch", f"{writer.name} ({writer.release}): {e}") from e
        except (ValueError, IndexError, TypeError, KeyError, OverflowError) as e:
            # UnicodeDecodeError is a ValueError; IndexError: union index out of range.
            raise CodecError("schema_mismatch",
                             f"{writer.name}: body does not match the writer schema: {e!r}") from e
        trailing = len(data) - buf.tell()
        if trailing:
            raise CodecError("schema_mismatch", f"{writer.name}: {trailing} bytes after the body")
        if not isinstance(record, dict):
            raise CodecError("schema_mismatch", f"{writer.name}: body is not a record")
        return record


def normalize_metadata(metadata: Any) -> dict[str, str]:
    """Metadata sorted by key (hash determinism); keys and values must be strings."""
    if not metadata:
        if type(metadata) is dict or isinstance(metadata, Mapping):
            return {}
    elif not isinstance(metadata, Mapping):
        raise CodecError("invalid_payload", f"metadata must be a mapping, got {type(metadata)}")
    items = sorted(metadata.items())
    for k, v in items:
        if not isinstance(k, str) or not isinstance(v, str):
            raise CodecError("invalid_payload", f"metadata {k!r}: keys and values must be str")
    return dict(items)


@cache
def default_codec() -> Codec:
    """The process-wide codec over ``schemas.registry()``."""
    return Codec()


def encode(name: str, datum: Mapping[str, Any]) -> bytes:
    return default_codec().encode(name, datum)


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    return default_codec().decode(data)


def encode_event(event: Event) -> bytes:
    return default_codec().encode_event(event)


def decode_event(data: bytes) -> Event:
    return default_codec().decode_event(data)


__all__ = [
    "CANONICAL_END", "HEADER_SIZE", "MAGIC", "REASONS", "Codec", "CodecError", "PayloadSpec",
    "PreparedPayload", "SingleObjectEncoding", "WireFormat", "decode", "decode_event",
    "default_codec", "encode", "encode_event", "normalize_metadata",
]
