"""Records whose header carries the fingerprint another Avro library computes are read as
the same writer schema and counted; a fingerprint that matches nothing is explained.

The Python variant is held to the `avro` package itself here; goavro and hamba/avro to the
Go libraries in tests/integration/clients/test_go_client.py (their figures below are what
those libraries printed for our Command schema, so this file fails on its own if a variant
rule drifts).
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import avro.io
import avro.schema
import pytest
from fastavro import parse_schema
from fastavro.schema import to_parsing_canonical_form
from prometheus_client import REGISTRY

import ares.metrics  # noqa: F401 - registers ares_foreign_fingerprint_total
from ares.events.wire.codec import HEADER_SIZE, MAGIC, Codec
from ares.events.wire.foreign import (
    FOREIGN_RECORDS,
    GOAVRO,
    HAMBA,
    PYTHON_AVRO,
    canonical_form,
    fingerprint_of,
)
from ares.events.wire.schemas import COMMAND, CodecError, registry, repo_schema_dir

SCHEMA_FILES = sorted(repo_schema_dir().rglob("*.avsc"))
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
START = {"id": "c-1", "stream_id": "agent-1", "type": "agent.start", "issuer": "py-avro",
         "timestamp": T0, "payload": {"kind": "example.pipeline", "config_json": "{}"},
         "reply_to": "0", "metadata": {"trace": "t-1"}}


def _raw(path: Path) -> Any:
    return json.loads(path.read_text())


def _name(path: Path) -> str:
    return str(path.relative_to(repo_schema_dir()))


def _written_by_the_avro_library(path: Path, datum: dict[str, Any]) -> bytes:
    """What a user of the `avro` package produces: its own fingerprint, its own body."""
    schema = avro.schema.parse(path.read_text())
    body = io.BytesIO()
    avro.io.DatumWriter(schema).write(datum, avro.io.BinaryEncoder(body))
    return MAGIC + schema.fingerprint() + body.getvalue()


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=_name)
def test_the_walker_is_the_specification_where_no_variant_departs(path: Path) -> None:
    fastavro_form = to_parsing_canonical_form(parse_schema(_raw(path), named_schemas={}))
    assert canonical_form(_raw(path)) == fastavro_form


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=_name)
def test_the_python_variant_is_what_the_avro_package_computes(path: Path) -> None:
    library = avro.schema.parse(path.read_text())
    assert canonical_form(_raw(path), PYTHON_AVRO) == library.canonical_form
    assert fingerprint_of(_raw(path), PYTHON_AVRO) == library.fingerprint()


def test_the_command_fingerprint_of_each_library_as_measured() -> None:
    # Release v1's Command: the file the libraries were run on (the current one moves on).
    command = _raw(repo_schema_dir() / "released" / "v1" / "ares.v1.Command.avsc")
    assert fingerprint_of(command).hex() == "9ff50b0e0cb48d1e"  # Java SchemaNormalization
    assert fingerprint_of(command, PYTHON_AVRO).hex() == "ce16cc0347335a4a"
    assert fingerprint_of(command, GOAVRO).hex() == "670b73d45bbb71b6"
    assert fingerprint_of(command, HAMBA).hex() == "a5747046ce8e9cc1"


def test_every_foreign_fingerprint_names_its_spec_schema() -> None:
    schemas = registry()
    assert schemas.by_foreign_fingerprint  # every schema of ours has a timestamp
    for fp, (writer, variant) in schemas.by_foreign_fingerprint.items():
        assert fp not in schemas.by_fingerprint
        assert writer.fingerprint in schemas.by_fingerprint
        assert writer.foreign[fp] == variant
    variants = {v for _, v in schemas.by_foreign_fingerprint.values()}
    # python-avro and goavro agree where no nested type has a namespace of its own.
    assert variants == {"python-avro+goavro", "python-avro", "goavro", "hamba-avro"}


def test_a_command_from_the_avro_package_decodes_as_ours_and_is_counted() -> None:
    path = repo_schema_dir() / "ares.v1.Command.avsc"
    theirs = _written_by_the_avro_library(path, START)
    ours = Codec().encode(COMMAND, START)
    assert theirs[HEADER_SIZE:] == ours[HEADER_SIZE:]  # the same Avro body
    assert theirs[2:HEADER_SIZE] != ours[2:HEADER_SIZE]  # another fingerprint
    before = FOREIGN_RECORDS[(COMMAND, "python-avro")]
    assert Codec().decode(theirs) == Codec().decode(ours)
    assert FOREIGN_RECORDS[(COMMAND, "python-avro")] == before + 1
    counted = REGISTRY.get_sample_value("ares_foreign_fingerprint_total",
                                        {"schema": COMMAND, "variant": "python-avro"})
    assert counted == before + 1


def test_a_spec_fingerprint_is_not_counted_as_foreign() -> None:
    before = dict(FOREIGN_RECORDS)
    Codec().decode(Codec().encode(COMMAND, START))
    assert dict(FOREIGN_RECORDS) == before


def _unknown(data: bytes) -> str:
    with pytest.raises(CodecError) as caught:
        Codec().decode(data)
    assert caught.value.reason == "unknown_fingerprint"
    return str(caught.value)


def test_an_unknown_fingerprint_on_a_readable_body_names_the_closest_schema() -> None:
    body = Codec().encode(COMMAND, START)[HEADER_SIZE:]
    message = _unknown(MAGIC + bytes(range(1, 9)) + body)
    assert "0102030405060708" in message
    assert "the body reads as ares.v1.Command (current)" in message
    assert "ares schemas export" in message
    assert "docs/clients.md#fingerprints" in message


def test_a_fingerprint_in_big_endian_order_is_named_as_such() -> None:
    data = Codec().encode(COMMAND, START)
    reversed_header = MAGIC + data[2:HEADER_SIZE][::-1] + data[HEADER_SIZE:]
    message = _unknown(reversed_header)
    assert "ares.v1.Command (current)'s with the bytes reversed" in message


def test_an_unknown_fingerprint_on_garbage_says_it_is_no_ares_record() -> None:
    message = _unknown(MAGIC + b"\x02" * 8 + b"\xff\xff\xff")
    assert "not an ares record?" in message
