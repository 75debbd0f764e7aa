"""ares.tokens records (ares.llm.tokens.TokenRecord): the wire format, and what is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ares.llm.tokens import TokenRecord

GOOD: dict[str, Any] = {
    "stream": "t-1/answer/0", "agent_id": "a-1", "task_id": "t-1", "name": "answer",
    "occurrence": 0, "incarnation": 2, "kind": "delta", "seq": 3, "text": "Hel",
    "at": 1764800000.25}


def test_a_record_round_trips() -> None:
    record = TokenRecord.from_json(GOOD)
    assert record.to_json() == GOOD
    assert TokenRecord.decode(record.encode()) == record
    assert json.loads(record.encode()) == GOOD


def test_a_task_id_with_slashes_still_names_its_stream() -> None:
    data = {**GOOD, "task_id": "lead/t-7/3", "stream": "lead/t-7/3/answer/0"}
    assert TokenRecord.from_json(data).stream == "lead/t-7/3/answer/0"


def test_an_integral_time_is_a_float() -> None:
    assert TokenRecord.from_json({**GOOD, "at": 17}).at == 17.0


@pytest.mark.parametrize("change", [
    {"kind": "partial"},
    {"seq": -1},
    {"seq": True},
    {"seq": 1.5},
    {"occurrence": "0"},
    {"incarnation": None},
    {"text": None},
    {"at": "now"},
    {"at": False},
    {"agent_id": 7},
    {"stream": "t-1/answer/1"},
], ids=repr)
def test_a_bad_field_is_a_value_error(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a token record"):
        TokenRecord.from_json({**GOOD, **change})


@pytest.mark.parametrize("missing", sorted(GOOD))
def test_a_missing_field_is_a_value_error(missing: str) -> None:
    data = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(ValueError, match="not a token record"):
        TokenRecord.from_json(data)


@pytest.mark.parametrize("raw", [None, b"", b"{", b"\xff\xfe", b"[]", b"42", b'"delta"',
                                 b"[" * 100_000])
def test_a_value_that_is_not_a_record_is_a_value_error(raw: bytes | None) -> None:
    with pytest.raises(ValueError, match="not a token record"):
        TokenRecord.decode(raw)
