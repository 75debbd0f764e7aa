"""``canonical_json`` (the cached C encoder without the circular check) writes exactly what
the standard library's canonical settings write, and fails the same way."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ares.events.schemas import canonical_json

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


@given(JSON_VALUES)
def test_same_text_as_the_standard_library(value: Any) -> None:
    assert canonical_json(value) == _reference(value)


def test_tuples_and_non_string_keys_as_the_standard_library() -> None:
    for value in ({2: (1, 2), 1: {"é": "\u2028\x00"}}, {1.5: [float("1e16")], 0.5: None},
                  {True: "t", False: 1e-7}):
        assert canonical_json(value) == _reference(value)


def test_circular_values_fail_as_in_the_standard_library() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        canonical_json(loop)


def test_nan_and_unserializable_values_fail_as_in_the_standard_library() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"x": float("nan")})
    with pytest.raises(TypeError, match="not JSON serializable"):
        canonical_json({"x": object()})


def test_too_deep_values_still_raise_recursion_error() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        canonical_json(deep)
