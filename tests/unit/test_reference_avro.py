"""Our records are plain Avro: the reference implementation (the `avro` package) reads them
with nothing but the .avsc files, finds their schema by fingerprint, and reproduces the
hash chain (the record with hash "", signature and key_id null) and, with nothing but the
public key, checks a signed event's Ed25519 signature of its hash.

The fingerprint is recomputed here from the .avsc text with an independent Parsing
Canonical Form and CRC-64-AVRO (both straight from the Avro specification). Note: the
`avro` package (1.12) keeps ``{"type":"long"}`` for logical-typed primitives in its
canonical form, where the specification (and Java, and fastavro) write ``"long"``; so its
``Schema.fingerprint()`` differs for schemas with timestamps. We follow the specification.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import avro.io
import avro.schema
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ares.events.chain import seal_encoded
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.signing import Signer
from ares.events.wire.codec import HEADER_SIZE, MAGIC, Codec, encode, encode_event
from ares.events.wire.schemas import EVENT, EVENT_PAYLOADS, JSON_PAYLOAD, registry, repo_schema_dir
from tests.unit.test_chain import build_stream
from tests.unit.test_codec import OTHER_RECORDS, SAMPLE_COMMAND_PAYLOADS, T0

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def canonical_form(schema: Any, namespace: str | None = None,
                   seen: set[str] | None = None) -> str:
    """Parsing Canonical Form (Avro specification, 'Transforming into Parsing Canonical Form')."""
    seen = set() if seen is None else seen
    dump = json.dumps
    if isinstance(schema, str):
        return dump(schema if schema in PRIMITIVES else _full(schema, namespace))
    if isinstance(schema, list):
        return "[" + ",".join(canonical_form(s, namespace, seen) for s in schema) + "]"
    kind = schema["type"]
    if kind in PRIMITIVES:  # [PRIMITIVES] + [STRIP]: logicalType is not kept
        return dump(kind)
    if kind == "array":
        return '{"type":"array","items":' + canonical_form(schema["items"], namespace, seen) + "}"
    if kind == "map":
        return '{"type":"map","values":' + canonical_form(schema["values"], namespace, seen) + "}"
    full = _full(schema["name"], schema.get("namespace", namespace))
    if full in seen:
        return dump(full)
    seen.add(full)
    inner_ns = full.rsplit(".", 1)[0] if "." in full else None
    out = '{"name":' + dump(full) + ',"type":' + dump(kind)
    if kind == "record":
        fields = [f'{{"name":{dump(f["name"])},"type":{canonical_form(f["type"], inner_ns, seen)}}}'
                  for f in schema["fields"]]
        out += ',"fields":[' + ",".join(fields) + "]"
    elif kind == "enum":
        out += ',"symbols":' + dump(schema["symbols"], separators=(",", ":"))
    else:
        out += f',"size":{schema["size"]}'
    return out + "}"


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (0xC15D213AA4D7A795 & -(fp & 1))
        table.append(fp)
    return table


_TABLE = _crc64_table()


def crc64_avro(data: bytes) -> bytes:
    """CRC-64-AVRO (the Rabin fingerprint of the specification), 8 bytes little-endian."""
    fp = 0xC15D213AA4D7A795
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp.to_bytes(8, "little")


def avsc(name: str) -> Path:
    return repo_schema_dir() / f"{name}.avsc"


def reference_read(data: bytes, name: str) -> Any:
    """Decode with the `avro` package, given only the .avsc file and the bytes."""
    assert data[:2] == MAGIC
    text = avsc(name).read_text()
    assert data[2:HEADER_SIZE] == crc64_avro(canonical_form(json.loads(text)).encode())
    reader = avro.io.DatumReader(avro.schema.parse(text))
    return reader.read(avro.io.BinaryDecoder(io.BytesIO(data[HEADER_SIZE:])))


# -- fingerprints --------------------------------------------------------------------------


def test_crc64_avro_matches_the_specification_test_vector() -> None:
    # The fingerprint of the schema "null" in the Avro specification's test suite.
    assert crc64_avro(b'"null"') == (0x63DD24E7CC258F8A).to_bytes(8, "little")


@pytest.mark.parametrize("path", sorted(repo_schema_dir().glob("*.avsc")), ids=lambda p: p.stem)
def test_header_fingerprints_match_an_independent_computation(path: Path) -> None:
    raw = json.loads(path.read_text())
    ours = canonical_form(raw)
    sf = registry().get(_full(raw["name"], raw.get("namespace")))
    assert sf.canonical_form == ours
    assert sf.fingerprint == crc64_avro(ours.encode())
    # The `avro` package agrees once its logical-type quirk (module docstring) is undone.
    theirs = avro.schema.parse(path.read_text()).canonical_form
    assert theirs.replace('{"type":"long"}', '"long"') == ours


# -- decoding with the reference implementation ------------------------------------------------


@pytest.mark.parametrize("index", range(21))
def test_events_decode_with_the_reference_implementation(index: int) -> None:
    event = build_stream(21)[index]  # every typed payload and one JSON payload
    decoded = reference_read(encode_event(event), EVENT)
    prepared = Codec().prepare_payload(event.type, event.payload)
    expected: dict[str, Any] = {**event.to_json(), "timestamp": event.timestamp,
                                "payload": prepared.datum}
    assert decoded == expected
    if event.type not in EVENT_PAYLOADS:
        assert prepared.record == JSON_PAYLOAD
        assert json.loads(decoded["payload"]["json"]) == event.payload


@pytest.mark.parametrize("name", sorted(OTHER_RECORDS))
def test_records_decode_with_the_reference_implementation(name: str) -> None:
    assert reference_read(encode(name, OTHER_RECORDS[name]), name) == OTHER_RECORDS[name]


def test_commands_decode_with_the_reference_implementation() -> None:
    for command_type, payload in SAMPLE_COMMAND_PAYLOADS.items():
        command = {"id": "c", "stream_id": "a", "type": command_type, "issuer": "t",
                   "timestamp": T0, "payload": payload, "reply_to": None, "metadata": {}}
        decoded = reference_read(encode("ares.v1.Command", command), "ares.v1.Command")
        assert decoded["type"] == command_type
        assert {k: decoded["payload"][k] for k in payload} == payload


# -- the hash chain, reproduced -------------------------------------------------------------


def reference_hash(event: Event) -> str:
    """The chain's definition, implemented with the `avro` package from the .avsc alone."""
    schema = avro.schema.parse(avsc(EVENT).read_text())
    record_name = EVENT_PAYLOADS.get(event.type, JSON_PAYLOAD)
    payload = (dict(event.payload) if record_name != JSON_PAYLOAD else
               {"json": json.dumps(event.payload, sort_keys=True, separators=(",", ":"),
                                   ensure_ascii=False)})
    values = {**event.to_json(), "timestamp": event.timestamp, "hash": "",
              "signature": None, "key_id": None,  # what the hash does not cover: it signs it
              "metadata": dict(sorted(event.metadata.items()))}
    buf = io.BytesIO()
    encoder, writer = avro.io.BinaryEncoder(buf), avro.io.DatumWriter()
    for field in schema.fields:  # type: ignore[attr-defined]
        if field.name == "payload":
            # The branch is the event type's record (the reference writer would guess it).
            branches = field.type.schemas
            index = [b.fullname for b in branches].index(record_name)
            encoder.write_long(index)
            writer.write_data(branches[index], payload, encoder)
        else:
            writer.write_data(field.type, values[field.name], encoder)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def test_the_reference_implementation_reproduces_the_hash_chain() -> None:
    events = build_stream(21)
    assert [reference_hash(e) for e in events] == [e.hash for e in events]


def test_a_signed_event_is_plain_avro_and_its_signature_checks_with_the_public_key() -> None:
    signer = Signer.generate()
    head, events = StreamHead(), []
    for new in (NewEvent("task.assigned", "tests", {"task_id": "t1"}, timestamp=T0),
                NewEvent("user.note", "tests", {"text": "é"}, {"k": "v"}, timestamp=T0)):
        event = seal_encoded("agent-s", head, new, head.version + 1, signer=signer)[0]
        head = StreamHead(event.version, event.hash)
        events.append(event)
    public = Ed25519PublicKey.from_public_bytes(signer.public_key.public_bytes_raw())
    for event in events:
        decoded = reference_read(encode_event(event), EVENT)
        assert decoded["signature"] == event.signature
        assert decoded["key_id"] == signer.key_id
        assert reference_hash(event) == decoded["hash"] == event.hash
        public.verify(decoded["signature"], bytes.fromhex(decoded["hash"]))  # raises if wrong
