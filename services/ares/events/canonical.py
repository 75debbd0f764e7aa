"""Canonical JSON: one text per value (sorted keys, no whitespace, no NaN), so hashes built
on it are reproducible; and the value that text parses back to.

The reference is the standard library: ``json.dumps(value, sort_keys=True,
separators=(",", ":"), ensure_ascii=False, allow_nan=False)``. Every append of a JSON
payload pays for the text and for parsing it back, which was a tenth of the append path's
CPU, so the text comes from orjson (~6x faster) whenever orjson's output is provably the
reference's, and from the standard library otherwise:

* orjson writes the same strings, escapes, separators and key order, but some floats
  differently (``1e-05`` as ``0.00001``, ``1e+16`` as ``1e16``) and NaN and the infinities
  as ``null`` where json refuses them. Output with a number written in exponent form, with
  ``0.0000`` or with ``null`` is therefore redone by the standard library; every other
  float prints identically (tests/unit/test_canonical_json.py compares both over every
  binary exponent).
* What orjson refuses (integers beyond 64 bits, keys that are not ``str``, subclasses of
  ``str``/``int``/``dict``/``list``, lone surrogates, nesting beyond 254 levels, circular
  values) goes to the standard library, which then writes it or raises its own error.
* orjson writes UUIDs and enums as their string and value; the standard library path is
  given the same rule (``_as_json``), so both accept the same values.
"""

from __future__ import annotations

import json
from enum import Enum
from json import encoder as json_encoder
from typing import Any
from uuid import UUID

import orjson

# Subclasses, datetimes and dataclasses make orjson raise, so the standard library decides:
# it writes subclasses its own way and refuses the others.
_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS
                   | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS)
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _as_json(value: Any) -> Any:
    """The standard library's ``default``: what orjson does natively, nothing more."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    return _refuse(value)


# One encoder for every call: json.dumps with options builds a JSONEncoder each time.
_REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False, default=_as_json)
# The C encoder ``_REFERENCE.encode`` builds on every call, built once and without the
# circular-reference check (a dict of the ids of every container on the way down): the
# same bytes, faster. A circular value then exhausts the recursion limit, and
# ``_reference_text`` asks ``_REFERENCE`` again for its usual error.
_make_c_encoder = getattr(json_encoder, "c_make_encoder", None)  # not in typeshed
_C_REFERENCE = None if _make_c_encoder is None else _make_c_encoder(
    None, _as_json, json_encoder.encode_basestring, None, ":", ",", True, False, False)
_DECODER = json.JSONDecoder()


def canonical_json(value: Any) -> str:
    """The canonical text of ``value``; TypeError/ValueError for what JSON cannot hold."""
    fast = _orjson_text(value)
    return fast.decode() if fast is not None else _reference_text(value)


def canonical_round_trip(value: Any) -> tuple[str, Any]:
    """(canonical text, what parsing it gives): tuples become lists, UUIDs strings, keys
    sorted. A sealed event carries the parsed value, so it equals itself read back."""
    fast = _orjson_text(value)
    if fast is not None:
        # orjson parses every integer orjson writes (64 bits) and float exactly as json does
        return fast.decode(), orjson.loads(fast)
    text = _reference_text(value)
    return text, parse_json(text)


def parse_json(text: str) -> Any:
    """``json.loads(text)``, faster for one JSON document with nothing around it.

    Payloads are parsed once per event on replay, and ``json.loads`` spends a third of its
    time in Python wrappers (whitespace regexes, argument checks) around the C scanner. A
    text that is exactly one JSON document goes straight to the scanner (``raw_decode``);
    anything else (surrounding whitespace, malformed text) goes to ``json.loads``, so
    results and errors are exactly its own. (Not orjson: it turns integers beyond 64 bits
    into floats, and text from other writers may hold them.)
    """
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _orjson_text(value: Any) -> bytes | None:
    """orjson's text of ``value`` when it is the reference text, else None."""
    try:
        text = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: let the standard library decide
        return None
    if b"null" in text or b"0.0000" in text:  # NaN/infinity, or 1e-5 written as 0.00001
        return None
    if b"0e" in text.translate(_DIGITS_TO_ZERO):  # a number in exponent form
        return None
    return text


def _reference_text(value: Any) -> str:
    if _C_REFERENCE is None:
        return _REFERENCE.encode(value)
    try:
        return "".join(_C_REFERENCE(value, 0))
    except RecursionError:  # circular (ValueError, as json says) or truly too deep (again)
        return _REFERENCE.encode(value)


__all__ = ["canonical_json", "canonical_round_trip", "parse_json"]
