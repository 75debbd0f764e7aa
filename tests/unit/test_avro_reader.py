"""Compiled Avro readers return exactly what fastavro returns, and never read bad bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import BytesIO
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ares.events.wire.avro_reader import READ_ERRORS, MalformedAvro, compile_reader, read_long
from ares.events.wire.codec import Codec, CodecError
from ares.events.wire.envelope import long_bytes
from ares.events.wire.schemas import registry

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Every construct the compiler covers, nested: records by name and inline, unions that
# fastavro tags with a record name (two or more named branches) and that it does not.
EVERYTHING = {
    "type": "record", "name": "Everything", "namespace": "test",
    "fields": [
        {"name": "nothing", "type": "null"},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "precise", "type": "double"},
        {"name": "text", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour",
                                    "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "point", "type": {"type": "record", "name": "Point", "fields": [
            {"name": "x", "type": "long"}, {"name": "label", "type": ["null", "string"]}]}},
        {"name": "points", "type": {"type": "array", "items": "Point"}},
        {"name": "tags", "type": {"type": "map", "values": ["null", "long", "string"]}},
        {"name": "maybe_point", "type": ["null", "Point"]},
        {"name": "shape", "type": ["null", "Point", {
            "type": "record", "name": "Circle", "fields": [{"name": "r", "type": "double"}]},
            "Colour", "string"]},
        {"name": "wide", "type": [  # longer than an if-chain: a table of functions
            "null", "boolean", "int", "string", "Digest", "Circle",
            {"type": "record", "name": "Square", "fields": [{"name": "side", "type": "int"}]},
            {"type": "array", "items": "string"}]},
        {"name": "nested", "type": {"type": "map", "values": {"type": "array",
                                                               "items": "Colour"}}},
    ],
}


def strategy_for(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Datums fastavro can write for a parsed ``schema`` (union branches picked by name)."""
    if isinstance(schema, list):
        options = []
        for branch in schema:
            inner = strategy_for(branch, named)
            name = _named(branch, named)
            if name is not None:
                inner = inner.map(lambda v, n=name: (n, v))
            options.append(inner)
        return st.one_of(options)
    if isinstance(schema, str):
        if schema in named:
            return strategy_for(named[schema], named)
        schema = {"type": schema}
    kind = schema["type"]
    if schema.get("logicalType") == "timestamp-micros":
        return st.integers(-62_135_596_800_000_000, 253_402_300_799_000_000).map(
            lambda us: EPOCH + timedelta(microseconds=us))
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(), "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1), "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False), "string": st.text(max_size=30),
        "bytes": st.binary(max_size=30),
    }
    if kind in simple:
        return simple[kind]
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: strategy_for(f["type"], named)
                                      for f in schema["fields"]})
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(strategy_for(schema["items"], named), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=10), strategy_for(schema["values"], named),
                               max_size=4)
    raise AssertionError(f"no strategy for {schema!r}")


def _named(branch: Any, named: dict[str, Any]) -> str | None:
    if isinstance(branch, str) and branch in named:
        return str(named[branch]["name"])
    if isinstance(branch, dict) and branch.get("type") in ("record", "enum", "fixed"):
        return str(branch["name"])
    return None


def fastavro_read(parsed: Any, data: bytes, offset: int = 0) -> tuple[Any, int]:
    buf = BytesIO(data)
    buf.seek(offset)
    value = schemaless_reader(buf, parsed, None, return_record_name=True,
                              return_record_name_override=True)
    return value, buf.tell()


def encode(parsed: Any, datum: Any) -> bytes:
    buf = BytesIO()
    schemaless_writer(buf, parsed, datum)
    return buf.getvalue()


PARSED = parse_schema(EVERYTHING)
NAMED = PARSED["__named_schemas"]
READ = compile_reader(PARSED)
CURRENT = {name: sf.parsed for name, sf in registry().current.items()}


def test_every_current_schema_compiles() -> None:
    assert {name for name, parsed in CURRENT.items() if compile_reader(parsed) is None} == set()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datum=strategy_for(PARSED, NAMED), prefix=st.binary(max_size=3))
def test_every_construct_reads_as_fastavro_reads(datum: Any, prefix: bytes) -> None:
    assert READ is not None
    data = prefix + encode(PARSED, datum)
    assert READ(data, len(prefix)) == fastavro_read(PARSED, data, len(prefix))


@pytest.mark.parametrize("name", sorted(CURRENT))
def test_ares_schemas_read_as_fastavro_reads(name: str) -> None:
    parsed = CURRENT[name]
    read = compile_reader(parsed)
    assert read is not None

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(datum=strategy_for(parsed, parsed.get("__named_schemas", {})))
    def check(datum: Any) -> None:
        data = encode(parsed, datum)
        assert read(data, 0) == fastavro_read(parsed, data)

    check()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datum=strategy_for(PARSED, NAMED), data=st.data())
def test_damaged_bytes_read_as_fastavro_or_not_at_all(datum: Any, data: st.DataObject) -> None:
    """Cut or flip bytes: whatever the compiled reader still returns, fastavro returns too
    (the codec re-reads with fastavro whenever the compiled reader raises)."""
    assert READ is not None
    body = bytearray(encode(PARSED, datum))
    if body and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    else:
        body = body[:data.draw(st.integers(0, len(body)))]
    damaged = bytes(body)
    try:
        ours = READ(damaged, 0)
    except READ_ERRORS:
        return
    # repr: a flipped byte can make a float NaN, which equals nothing, itself included
    assert repr(ours) == repr(fastavro_read(PARSED, damaged))


def test_negative_block_counts_carry_a_byte_size() -> None:
    """Writers other than fastavro may write a block as -count and its size in bytes."""
    schema = parse_schema({"type": "array", "items": "long"})
    read = compile_reader(schema)
    assert read is not None
    items = long_bytes(5) + long_bytes(-700) + long_bytes(3)
    data = long_bytes(-3) + long_bytes(len(items)) + items + long_bytes(1) + long_bytes(9) + b"\0"
    assert read(data, 0) == ([5, -700, 3, 9], len(data)) == fastavro_read(schema, data)


def test_a_record_may_refer_to_itself() -> None:
    schema = parse_schema({"type": "record", "name": "Node", "fields": [
        {"name": "value", "type": "long"}, {"name": "next", "type": ["null", "Node"]}]})
    read = compile_reader(schema)
    assert read is not None
    datum = {"value": 1, "next": {"value": 2, "next": {"value": 3, "next": None}}}
    data = encode(schema, datum)
    assert read(data, 0) == (datum, len(data)) == fastavro_read(schema, data)


@pytest.mark.parametrize("logical", [
    {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
    {"type": "string", "logicalType": "uuid"},
    {"type": "int", "logicalType": "date"},
    {"type": "long", "logicalType": "timestamp-millis"},
])
def test_other_logical_types_stay_with_fastavro(logical: dict[str, Any]) -> None:
    schema = parse_schema({"type": "record", "name": "L", "fields": [
        {"name": "v", "type": logical}]})
    assert compile_reader(schema) is None


@pytest.mark.parametrize(("data", "why"), [
    (b"", "nothing to read"),
    (long_bytes(-1), "negative length"),
    (long_bytes(10) + b"abc", "length past the end"),
    (b"\xff" * 11, "varint of eleven bytes"),
    (long_bytes(2) + b"\xff\xfe", "not UTF-8"),
])
def test_malformed_strings_raise(data: bytes, why: str) -> None:
    read = compile_reader(parse_schema("string"))
    assert read is not None
    with pytest.raises(READ_ERRORS):
        read(data, 0)


def test_boolean_bytes_other_than_0_and_1_are_left_to_fastavro() -> None:
    read = compile_reader(parse_schema("boolean"))
    assert read is not None
    assert read(b"\x01", 0) == (True, 1)
    with pytest.raises(MalformedAvro):
        read(b"\x02", 0)


@given(st.integers(-(2**63), 2**63 - 1))
def test_read_long_inverts_long_bytes(n: int) -> None:
    data = b"\x07" + long_bytes(n) + b"\x07"
    assert read_long(data, 1) == (n, len(data) - 1)


def test_a_varint_beyond_64_bits_is_left_to_fastavro() -> None:
    """Ten bytes whose last one is above 1 hold no Avro long: fastavro wraps such a value to
    64 bits, a plain decode would return an integer no long can be (found by hypothesis in
    the damaged-bytes test, 20,000 examples)."""
    biggest = long_bytes(2**63 - 1)  # zig-zag 2**64 - 2: the largest ten-byte varint
    assert len(biggest) == 10
    assert biggest[-1] == 1
    assert read_long(biggest, 0) == (2**63 - 1, 10)
    with pytest.raises(MalformedAvro, match="beyond 64 bits"):
        read_long(biggest[:-1] + b"\x02", 0)


def test_codec_errors_are_fastavros_own() -> None:
    """The codec re-reads what its compiled reader refuses: reasons and messages are the
    ones the fastavro-only codec gives."""
    fast, reference = Codec(), Codec(compiled=False)
    event = {"id": "e", "stream_id": "s", "type": "agent.log", "module": "m", "version": 1,
             "timestamp": EPOCH, "payload": {"message": "hi"}, "metadata": {},
             "prev_hash": "0" * 64, "hash": "1" * 64}
    good = fast.encode("ares.v1.Event", event)
    assert fast.decode_event(good) == reference.decode_event(good)
    for bad in (good[:-5], good + b"\x00", good[:12] + b"\xff" + good[13:],
                good[:10] + long_bytes(-4) + good[11:]):
        outcomes = []
        for codec in (fast, reference):
            try:
                outcomes.append(("ok", codec.decode_event(bad)))
            except CodecError as e:
                outcomes.append((e.reason, str(e)))
        assert outcomes[0] == outcomes[1]
