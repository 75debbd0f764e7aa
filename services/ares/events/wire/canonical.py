"""Canonical JSON: one text per value (sorted keys, no whitespace, no NaN), so hashes built
on it are reproducible; and the value that text parses back to.

The reference is the standard library: ``json.dumps(value, sort_keys=True,
separators=(",", ":"), ensure_ascii=False, allow_nan=False)``. Every append of a JSON
payload pays for the text and for parsing it back, which was a third of sealing an event,
so the text comes from orjson (~6x faster) whenever orjson's output is provably the
reference's, and from the standard library otherwise.

orjson writes the same strings, escapes, separators, integers and key order (by code
point, which is UTF-8 byte order), but floats outside [1e-4, 1e16) in its own notation
(``0.00001`` for ``1e-05``, ``1e16`` for ``1e+16``), NaN and the infinities as ``null``
(where json refuses them), and UUIDs, enums, dataclasses and datetimes natively (where
json refuses them or, for subclasses of ``str`` and ``int``, writes them its own way).
So orjson answers only for a value made of exactly JSON's own types with every float in
that range, checked by one walk over the value (compiled: cheaper than scanning the
text); anything else, and whatever orjson refuses (integers beyond 64 bits, lone
surrogates), goes to the standard library, which writes it or raises its own error, as
before.
Parsing (``parse_json``: every JSON payload decoded on replay) takes orjson's answer
likewise only where it is provably json's. tests/unit/test_canonical_json.py compares both
ways, floats of every binary exponent included.
"""

from __future__ import annotations

import json
from json import encoder as json_encoder
from typing import Any, Final, cast

import orjson

# orjson prints these floats exactly as repr() does (6 million compared); outside them
# repr() switches to exponent notation, and orjson at other points and in another form.
_PLAIN_FLOATS_FROM: Final = 1e-4
_PLAIN_FLOATS_BELOW: Final = 1e16
# orjson refuses deeper nesting; a deeper or circular value goes to the standard library.
_MAX_DEPTH: Final = 254
# orjson reads an integer beyond 64 bits as a float (json: an exact int); 2**63 as a float.
_HUGE: Final = 9.223372036854775808e18
# Final: compiled, these are C statics; a module global is a dict lookup on every call.
_orjson_dumps: Final = orjson.dumps
_orjson_loads: Final = orjson.loads
_SORT_KEYS: Final = orjson.OPT_SORT_KEYS

# One encoder for every call: json.dumps with options builds a JSONEncoder each time.
_REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)
# The C encoder ``_REFERENCE.encode`` builds on every call, built once and without the
# circular-reference check (a dict of the ids of every container on the way down): the
# same bytes, faster. A circular value then exhausts the recursion limit, and
# ``_reference_text`` asks ``_REFERENCE`` again for its usual error.
_make_c_encoder = getattr(json_encoder, "c_make_encoder", None)  # not in typeshed
_C_REFERENCE = None if _make_c_encoder is None else _make_c_encoder(
    None, _REFERENCE.default, json_encoder.encode_basestring, None, ":", ",", True, False,
    False)
_DECODER = json.JSONDecoder()


def canonical_json(value: Any) -> str:
    """The canonical text of ``value``; TypeError/ValueError for what JSON cannot hold."""
    fast = _orjson_text(value)
    return fast.decode() if fast is not None else _reference_text(value)


def canonical_round_trip(value: Any) -> tuple[str, Any]:
    """(canonical text, what parsing it gives): tuples become lists, keys sorted.
    A sealed event carries the parsed value, so it equals itself read back."""
    fast = _orjson_text(value)
    if fast is not None:
        # orjson parses the integers (64 bits) and floats it writes exactly as json does
        return fast.decode(), _orjson_loads(fast)
    text = _reference_text(value)
    return text, _json_loads(text)  # the reference's text may hold integers beyond 64 bits


def parse_json(text: str) -> Any:
    """``json.loads(text)``, from orjson when its answer is provably json's.

    Payloads are parsed once per event on replay. Wherever the two differ on text json
    accepts, orjson raises (NaN, infinities, ``1e400``, lone surrogate escapes) or gives a
    float of at least 2**63 for an integer beyond 64 bits (json: the int); either sends the
    text to json, so results and errors are exactly json's.
    """
    try:
        value = _orjson_loads(text)
    except orjson.JSONDecodeError:
        return _json_loads(text)
    return _json_loads(text) if _holds_huge_float(value, 0) else value


def _json_loads(text: str) -> Any:
    """``json.loads``; a text that is exactly one JSON document goes straight to the C
    scanner (``raw_decode``), skipping a third of the time spent in Python wrappers."""
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _holds_huge_float(value: object, depth: int) -> bool:
    """A float of magnitude >= 2**63 anywhere in a parsed value (orjson's reading of an
    integer json would keep exact; a float that large written as such is rare)."""
    kind = type(value)
    if kind is float:
        return abs(cast(float, value)) >= _HUGE
    if depth >= _MAX_DEPTH:  # orjson parses up to 1024 levels: let json decide
        return True
    if kind is dict:
        return any(_holds_huge_float(item, depth + 1)
                   for item in cast(dict[str, object], value).values())
    if kind is list:
        return any(_holds_huge_float(item, depth + 1) for item in cast(list[object], value))
    return False


def _orjson_text(value: Any) -> bytes | None:
    """orjson's text of ``value`` when it is the reference text, else None."""
    if not _orjson_agrees(value, 0):
        return None
    try:
        return _orjson_dumps(value, option=_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError (a 65-bit integer, a lone surrogate)
        return None


def _orjson_agrees(value: object, depth: int) -> bool:
    """True when ``value`` is made of exactly JSON's types (no subclasses), its dict keys
    are strings and its floats print alike in orjson and json.

    (The casts let mypyc iterate dicts and lists and compare floats natively: a walk over
    a typical payload costs a sixth of parsing its text.)
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        magnitude = abs(cast(float, value))
        return magnitude == 0.0 or _PLAIN_FLOATS_FROM <= magnitude < _PLAIN_FLOATS_BELOW
    if depth >= _MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in cast(dict[object, object], value).items():
            if type(key) is not str or not _orjson_agrees(item, depth + 1):
                return False
        return True
    if kind is list:
        return all(_orjson_agrees(item, depth + 1) for item in cast(list[object], value))
    if kind is tuple:
        return all(_orjson_agrees(item, depth + 1) for item in cast(tuple[object, ...], value))
    return False


def _reference_text(value: Any) -> str:
    if _C_REFERENCE is None:
        return _REFERENCE.encode(value)
    try:
        return "".join(_C_REFERENCE(value, 0))
    except RecursionError:  # circular (ValueError, as json says) or truly too deep (again)
        return _REFERENCE.encode(value)


__all__ = ["canonical_json", "canonical_round_trip", "parse_json"]
