"""``ares schemas export``: avsc, JSON Schema and markdown documents for consumers."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import avro.schema
import fastavro
import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from ares.cli.schemas import schemas
from ares.events.chain import seal_encoded
from ares.events.model import NewEvent, StreamHead
from ares.events.wire.codec import decode, encode
from ares.events.wire.compat import sample_records
from ares.events.wire.export import (
    collect,
    fingerprint_int64,
    json_schema_document,
    markdown_document,
)
from ares.events.wire.schemas import (
    ALERT,
    EVENT,
    HEARTBEAT,
    SCHEDULE,
    SchemaFile,
    load_directory,
    load_file,
    repo_schema_dir,
)

CURRENT = load_directory(repo_schema_dir())
NAMES = sorted(CURRENT)
T0 = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def run(*args: str) -> Any:
    result = CliRunner().invoke(schemas, ["export", "--dir", str(repo_schema_dir()), *args])
    assert result.exit_code == 0, result.output
    return result


def exported(fmt: str, *args: str) -> list[dict[str, Any]]:
    docs = json.loads(run("--format", fmt, *args).output)
    assert isinstance(docs, list)
    return docs


def avro_json(sf: SchemaFile, records: list[dict[str, Any]]) -> list[Any]:
    """``records`` in the Avro JSON encoding, as fastavro's json_writer writes it."""
    if not records:
        return []  # json_writer fails on an empty iterable
    out = io.StringIO()
    fastavro.json_writer(out, sf.parsed, records)
    return [json.loads(line) for line in out.getvalue().splitlines() if line]


def real_records(name: str) -> list[dict[str, Any]]:
    """Records as the codec writes and reads them (through the wire bytes)."""
    if name == EVENT:
        news = [NewEvent("task.assigned", "tests", {"task_id": "t-1", "input_json": '{"q":1}'},
                         {"trace": "t1"}, timestamp=T0),
                NewEvent("agent.dead", "runtime", {"cause": "crash", "error_type": "ValueError",
                                                   "last_version": 7}, timestamp=T0),
                NewEvent("note.free_form", "cli", {"text": "hello", "n": [1, 2]}, timestamp=T0)]
        return [decode(seal_encoded("agent-1", StreamHead(), new, 1)[1])[1] for new in news]
    if name == HEARTBEAT:
        datum: dict[str, Any] = {"worker_id": "rm-0", "timestamp": T0, "interval_ms": 1000,
                                 "agents": [{"agent_id": "agent-1", "version": 12,
                                             "incarnation": 2, "status": "running",
                                             "progress": "step 3/5"},
                                            {"agent_id": "agent-2", "version": 1}]}
        return [decode(encode(name, datum))[1]]
    if name == ALERT:
        datum = {"id": "a-1", "stream_id": "agent-1", "kind": "death_loop",
                 "severity": "critical", "message": "3 deaths in 60 s", "source": "health",
                 "timestamp": T0, "details": {"deaths": "3"}}
        return [decode(encode(name, datum))[1]]
    return []


# -- avsc ----------------------------------------------------------------------------------

def test_avsc_documents_every_schema_with_its_fingerprint() -> None:
    docs = exported("avsc", "--no-released")
    assert [f"{d['namespace']}.{d['name']}" for d in docs] == NAMES
    for doc in docs:
        sf = CURRENT[doc["x-ares"]["name"]]
        meta = doc["x-ares"]
        assert meta["version"] == "current"
        assert bytes.fromhex(meta["fingerprint"]) == sf.fingerprint
        assert meta["fingerprint_int64"] == fingerprint_int64(sf)
        assert meta["canonical_form"] == sf.canonical_form
        without = {k: v for k, v in doc.items() if k != "x-ares"}
        assert without == json.loads(sf.path.read_text(encoding="utf-8"))


def test_avsc_document_is_a_valid_schema_with_the_same_fingerprint(tmp_path: Path) -> None:
    run("--format", "avsc", "--no-released", "--out", str(tmp_path))
    for name in NAMES:
        path = tmp_path / f"{name}.current.avsc"
        assert load_file(path).fingerprint == CURRENT[name].fingerprint
        reference = avro.schema.parse(path.read_text(encoding="utf-8"))  # Apache Avro's own
        assert reference.fullname == name


def test_int64_fingerprint_is_javas_signed_little_endian_long() -> None:
    sf = CURRENT[EVENT]
    value = fingerprint_int64(sf)
    assert -(2**63) <= value < 2**63
    assert value.to_bytes(8, "little", signed=True) == sf.fingerprint


# -- JSON Schema ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_json_schema_accepts_every_branch_of_sample_records(name: str) -> None:
    sf = CURRENT[name]
    doc = json_schema_document(sf)
    Draft202012Validator.check_schema(doc)
    assert doc["$id"] == f"urn:ares-mesh:schema:{name}:current"
    assert doc["x-avro-fingerprint"] == sf.fingerprint.hex()
    assert name in doc["title"]
    validator = Draft202012Validator(doc)
    for record in avro_json(sf, sample_records(sf.parsed)) + avro_json(sf, real_records(name)):
        errors = [e.message for e in validator.iter_errors(record)]
        assert not errors, (record, errors)


@pytest.mark.parametrize("name", [EVENT, HEARTBEAT, ALERT])
def test_json_schema_validates_real_records_and_rejects_a_missing_field(name: str) -> None:
    sf = CURRENT[name]
    validator = Draft202012Validator(json_schema_document(sf))
    records = avro_json(sf, real_records(name))
    assert records
    for record in records:
        validator.validate(record)
        required = next(f["name"] for f in sf.parsed["fields"] if "default" not in f)
        broken = {k: v for k, v in record.items() if k != required}
        assert not validator.is_valid(broken)
        assert not validator.is_valid({**record, "unknown_field": 1})


def test_json_schema_of_the_event_payload_names_its_records() -> None:
    sf = CURRENT[EVENT]
    validator = Draft202012Validator(json_schema_document(sf))
    record = avro_json(sf, real_records(EVENT)[:1])[0]
    assert list(record["payload"]) == ["ares.v1.event.TaskAssigned"]
    wrong = {**record, "payload": {"ares.v1.event.AgentStopped": {"reason": 1}}}
    assert not validator.is_valid(wrong)
    assert not validator.is_valid({**record, "version": "1"})


def test_json_schema_cli_prints_one_document_per_schema() -> None:
    docs = exported("json-schema", "--no-released")
    assert [d["$id"].split(":")[3] for d in docs] == NAMES
    for doc in docs:
        Draft202012Validator.check_schema(doc)


# -- markdown ------------------------------------------------------------------------------

def test_markdown_lists_every_field_of_the_event() -> None:
    sf = CURRENT[EVENT]
    page = markdown_document(sf)
    assert page.startswith(f"# {EVENT} (current)\n")
    assert sf.fingerprint.hex() in page
    assert str(fingerprint_int64(sf)) in page
    for field in sf.parsed["fields"]:
        assert f"| `{field['name']}` |" in page
    for record in ("ares.v1.event.AgentStarted", "ares.v1.event.JsonPayload"):
        assert f"### record `{record}`" in page


def test_markdown_cli_has_a_page_per_schema() -> None:
    text = run("--format", "markdown", "--no-released").output
    assert [line[2:].split()[0] for line in text.splitlines() if line.startswith("# ")] == NAMES


# -- files, releases, errors ---------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "ext"), [("avsc", "avsc"), ("json-schema", "schema.json"),
                                          ("markdown", "md")])
def test_out_writes_one_file_per_schema_and_version(tmp_path: Path, fmt: str, ext: str) -> None:
    out = tmp_path / "docs"
    run("--format", fmt, "--out", str(out))
    releases = sorted(p.name for p in (repo_schema_dir() / "released").iterdir() if p.is_dir())
    released = {(n, v) for v in releases
                for n in load_directory(repo_schema_dir() / "released" / v, v)}
    expected = {f"{n}.current.{ext}" for n in NAMES} | {f"{n}.{v}.{ext}" for n, v in released}
    assert {p.name for p in out.iterdir()} == expected
    assert releases  # schemas/released/v1 exists: the released version is part of the export


def test_released_versions_are_included_and_labelled() -> None:
    docs = exported("avsc")
    labels = {(d["x-ares"]["name"], d["x-ares"]["version"]) for d in docs}
    assert {(n, "current") for n in NAMES} <= labels
    v1 = load_directory(repo_schema_dir() / "released" / "v1", "v1")
    # Every schema of release v1; a schema added since (ares.v1.Schedule) has no release yet.
    assert {(n, "v1") for n in v1} <= labels
    assert {(n, "v1") for n in set(NAMES) - set(v1)} & labels == set()
    assert SCHEDULE in set(NAMES) - set(v1)
    for doc in docs:
        if doc["x-ares"]["version"] == "v1":
            assert doc["x-ares"]["fingerprint"] == v1[doc["x-ares"]["name"]].fingerprint.hex()
    assert [(sf.name, sf.release) for sf in collect(repo_schema_dir(), released=False)] == [
        (n, "current") for n in NAMES]
    pages = run("--format", "markdown").output
    assert f"# {EVENT} (v1)" in pages
    assert {d["x-avro-version"] for d in exported("json-schema")} == {"current", "v1"}


def test_bad_directory_is_a_usage_error(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(schemas, ["export", "--dir", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "does not exist" in missing.output
    empty = runner.invoke(schemas, ["export", "--dir", str(tmp_path)])
    assert empty.exit_code == 2
    assert "no .avsc file" in empty.output
    bad = runner.invoke(schemas, ["export", "--format", "yaml"])
    assert bad.exit_code == 2


def test_help_teaches_by_example() -> None:
    result = CliRunner().invoke(schemas, ["export", "--help"])
    assert result.exit_code == 0
    assert "ares schemas export --format json-schema --out" in result.output
    assert "parsingFingerprint64" in result.output
