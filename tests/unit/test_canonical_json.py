"""``canonical_json`` writes exactly what the standard library's canonical settings write,
and fails the same way, whether orjson answers or the standard library does; and
``canonical_round_trip`` gives back exactly what ``json.loads`` of that text gives."""

from __future__ import annotations

import enum
import json
import math
import struct
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ares.events.wire import canonical
from ares.events.wire.canonical import canonical_json, canonical_round_trip, parse_json

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)


def _reference(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _same_as_reference(value: Any) -> None:
    text = _reference(value)
    assert canonical_json(value) == text
    parsed_text, parsed = canonical_round_trip(value)
    assert parsed_text == text
    expected = json.loads(text)
    assert parsed == expected
    assert json.dumps(parsed, sort_keys=True) == json.dumps(expected, sort_keys=True)


@given(JSON_VALUES)
def test_same_text_as_the_standard_library(value: Any) -> None:
    _same_as_reference(value)


def _floats() -> list[float]:
    """Every power of two, and a mantissa-rich float in every binary exponent, both signs;
    plus the decimal boundaries where either writer switches notation."""
    values: list[float] = []
    for exponent in range(-1074, 1024):
        power = math.ldexp(1.0, exponent)
        values += [power, -power]
    for biased in range(1, 2047):
        bits = (biased << 52) | 0x5A5A5A5A5A5A5
        value = struct.unpack("<d", struct.pack("<Q", bits))[0]
        values += [value, -value]
    for exponent in range(-8, 24):
        for mantissa in (1, 1.5, 9.999999999999998, 123456789, 1.2345678901234567):
            values.append(float(f"{mantissa}e{exponent}"))
    return [*values, 0.0, -0.0, 5e-324, 1.7976931348623157e308]


def test_every_float_exponent_as_the_standard_library() -> None:
    """orjson prints some floats differently (1e-05, 1e+16); those must never get through."""
    floats = _floats()
    for value in floats:
        assert canonical_json(value) == _reference(value), value
        assert canonical_json({"x": [value, 1]}) == _reference({"x": [value, 1]}), value
    # and orjson does answer for ordinary floats: the fast path is not dead code
    assert canonical._orjson_text({"p": 0.25, "t": 1234.5678}) is not None


def test_integers_at_and_beyond_64_bits() -> None:
    for value in (2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**40):
        _same_as_reference({"n": value})
        assert type(canonical_round_trip({"n": value})[1]["n"]) is int


class _Colour(enum.Enum):
    RED = "red"


class _Size(enum.IntEnum):
    LARGE = 3


class _Key(str):
    pass


def test_what_orjson_would_write_its_own_way_the_standard_library_decides() -> None:
    """Subclasses of str and int (enums too) as json writes them; UUIDs, plain enums,
    datetimes refused as json refuses them, though orjson would write them."""
    _same_as_reference({_Key("k"): _Key("v"), "size": _Size.LARGE, "t": True})
    for refused in (uuid.UUID(int=7), _Colour.RED, datetime.now(UTC)):
        with pytest.raises(TypeError, match="not JSON serializable"):
            canonical_json({"x": refused})
    assert canonical._orjson_text({"x": [1, {"y": 1e-5}]}) is None
    assert canonical._orjson_text({"x": [1, {"y": 1e-4, "z": None}], "w": (True, "s")})


def test_the_parsed_value_shares_no_container_with_the_input() -> None:
    """A sealed event keeps the parsed value: the caller's later edits must not reach it;
    and its keys come in the text's order, as json.loads gives them."""
    payload: dict[str, Any] = {"b": [1, {"c": 2}], "a": (3,)}
    text, parsed = canonical_round_trip(payload)
    payload["b"][1]["c"] = 99
    payload["b"].append(4)
    assert text == '{"a":[3],"b":[1,{"c":2}]}'
    assert parsed == {"a": [3], "b": [1, {"c": 2}]}
    assert list(parsed) == ["a", "b"]


def test_what_orjson_refuses_the_standard_library_writes() -> None:
    for value in (OrderedDict([("b", 1), ("a", 2)]), {"n": 2**64}, {"n": -(2**63) - 1},
                  {"s": "\ud800"}, {"deep": _nested(300)}):
        _same_as_reference(value)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_tuples_and_non_string_keys_as_the_standard_library() -> None:
    for value in ({2: (1, 2), 1: {"é": "\u2028\x00"}}, {1.5: [float("1e16")], 0.5: None},
                  {True: "t", False: 1e-7}, {"t": (1, (2, "x"))}, {"n": None, "b": False},
                  {"c": "\b\f\n\r\t\x1f\x7f\"\\/"}):
        _same_as_reference(value)


def test_keys_sorted_by_code_point_beyond_the_basic_plane() -> None:
    """orjson sorts UTF-8 bytes, json code points: the same order (UTF-16 would differ)."""
    value = {"\uffff": 1, "\U0001f600": 2, "\ue000": 3, "\U00010000": 4, "é": 5, "": 6}
    assert canonical._orjson_text(value) is not None
    _same_as_reference(value)


def test_circular_values_fail_as_in_the_standard_library() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        canonical_json(loop)


def test_nan_and_unserializable_values_fail_as_in_the_standard_library() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"x": float("nan")})
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"x": [float("inf"), 1]})  # orjson would write null
    for refused in (object(), {1, 2}, b"bytes"):
        with pytest.raises(TypeError, match="not JSON serializable"):
            canonical_json({"x": refused})


def test_too_deep_values_still_raise_recursion_error() -> None:
    with pytest.raises(RecursionError):
        canonical_json(_nested(100_000))


def _parses_as_json_does(text: str) -> None:
    try:
        expected = json.loads(text)
    except (ValueError, RecursionError) as e:
        with pytest.raises(type(e)):
            parse_json(text)
        return
    parsed = parse_json(text)
    # the same values, types (1 is not 1.0) and key order; NaN included
    assert repr(parsed) == repr(expected)


@given(JSON_VALUES)
def test_parse_json_of_canonical_text_is_json_loads(value: Any) -> None:
    _parses_as_json_does(_reference(value))


def test_parse_json_where_orjson_and_json_differ_is_json_loads() -> None:
    """orjson raises on what json alone accepts, and reads integers beyond 64 bits as
    floats: every such text ends with json's answer (or json's error)."""
    for text in ("NaN", "[Infinity, -Infinity]", "1e400", '"\\ud83d"', '"\\ud83d\\ude00"',
                 "18446744073709551615", "18446744073709551616", "-9223372036854775808",
                 "-9223372036854775809", '{"n": [1, 123456789012345678901234567890]}',
                 "1e19", "-1.5e300", " [1] ", "\n{}\n", "-0", "-0.0", '"\\u0000"',
                 "", "[1,]", "01", '"tab\there"', "\ufeff[]", '{"a":1}{"b":2}', "[1e-400]",
                 _nested_text(300), _nested_text(1100)):
        _parses_as_json_does(text)


def _nested_text(depth: int) -> str:
    return "[" * depth + "]" * depth
