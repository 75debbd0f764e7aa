"""Schema evolution: the rule checker, the data proof, ares's policies and `ares schemas`."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastavro import parse_schema

from ares.cli import main
from ares.cli.schemas import schemas
from ares.errors import SchemaError
from ares.events.wire.compat import (
    check_data,
    check_directory,
    check_policies,
    check_rules,
    copy_drift,
    sample_records,
    sync_copy,
)
from ares.events.wire.schemas import (
    EVENT,
    SCHEMA_DIR_ENV,
    load_directory,
    load_file,
    load_registry,
    package_schema_dir,
    registry,
    repo_schema_dir,
    schema_dir,
)
from tests.unit.test_codec import add_priority, evolved_dirs, payload_record


def record(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return parse_schema({"type": "record", "name": name, "namespace": "t", "doc": "d",
                         "fields": [{"doc": "d", **f} for f in fields]},
                        named_schemas={})  # type: ignore[no-any-return]


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Color", "doc": "d", "symbols": list(symbols), **extra}


def problems(writer: dict[str, Any], reader: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(rule messages, data-proof messages) of ``reader`` reading ``writer``'s data."""
    rules = [f"{path}: {message}" for path, message in check_rules(writer, reader)]
    return rules, check_data(writer, reader)[1]


BASE = {"name": "a", "type": "string"}


# -- the required cases: each is checked by both proofs -----------------------------------------


def test_an_added_field_without_default_fails() -> None:
    rules, data = problems(record(BASE), record(BASE, {"name": "b", "type": "long"}))
    assert rules == ["b: field added without a default: old records cannot be read"]
    assert data
    assert "unreadable" in data[0]


def test_an_added_field_with_default_passes() -> None:
    new = record(BASE, {"name": "b", "type": "long", "default": 0})
    assert problems(record(BASE), new) == ([], [])


def test_a_removed_enum_symbol_fails() -> None:
    rules, data = problems(record({"name": "c", "type": enum("RED", "GREEN", "BLUE")}),
                           record({"name": "c", "type": enum("RED", "GREEN")}))
    assert rules == ["c: enum symbols ['BLUE'] removed and the enum has no default"]
    assert data


def test_a_removed_enum_symbol_with_an_enum_default_passes() -> None:
    new = record({"name": "c", "type": enum("RED", "GREEN", "OTHER", default="OTHER")})
    assert problems(record({"name": "c", "type": enum("RED", "GREEN", "BLUE")}), new) == ([], [])


def test_int_to_long_passes() -> None:
    assert problems(record({"name": "n", "type": "int"}),
                    record({"name": "n", "type": "long"})) == ([], [])


def test_long_to_int_fails() -> None:
    rules, data = problems(record({"name": "n", "type": "long"}),
                           record({"name": "n", "type": "int"}))
    assert rules == ["n: long cannot be read as int (not an Avro promotion)"]
    assert data


# -- more rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new"), [
    ("int", "double"), ("long", "float"), ("float", "double"), ("string", "bytes"),
    ("bytes", "string"), ("string", ["null", "string"]), (["null", "int"], ["null", "long"]),
    (["null", "string"], ["null", "string", "long"]),
])
def test_compatible_type_changes(old: Any, new: Any) -> None:
    assert problems(record({"name": "v", "type": old}), record({"name": "v", "type": new})) == (
        [], [])


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("double", "float", "double cannot be read as float"),
    ("string", "long", "string cannot be read as long"),
    (["null", "string", "long"], ["null", "string"], "writer union branch long"),
    (["null", "string"], "string", "null cannot be read as string"),
    ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, "v[]"),
    ({"type": "map", "values": "string"}, {"type": "array", "items": "string"},
     "a map cannot be read as a array"),
    ({"type": "long", "logicalType": "timestamp-millis"},
     {"type": "long", "logicalType": "timestamp-micros"}, "logical type changed"),
])
def test_incompatible_type_changes(old: Any, new: Any, needle: str) -> None:
    rules, _ = problems(record({"name": "v", "type": old}), record({"name": "v", "type": new}))
    assert rules
    assert any(needle in r for r in rules), rules


def test_a_removed_field_passes_except_in_the_event() -> None:
    old, new = record(BASE, {"name": "b", "type": "long"}), record(BASE)
    assert problems(old, new) == ([], [])
    assert [m for _, m in check_rules(old, new, keep_fields=True)] == [
        "field removed from the hash-chained Event: the hashes of old events cover it, they "
        "would become unverifiable"]


def test_a_renamed_record_needs_an_alias() -> None:
    nested = {"name": "inner", "type": {"type": "record", "name": "In", "doc": "d",
                                         "fields": [{"name": "x", "type": "int", "doc": "d"}]}}
    renamed = {"name": "inner", "type": {"type": "record", "name": "In2", "doc": "d",
                                          "fields": [{"name": "x", "type": "int", "doc": "d"}]}}
    rules, data = problems(record(nested), record(renamed))
    assert rules == ["inner: record renamed from t.In to t.In2 without an alias"]
    assert data
    renamed["type"]["aliases"] = ["t.In"]  # type: ignore[index]
    assert problems(record(nested), record(renamed))[0] == []


def test_samples_cover_every_branch_of_the_event_payload_union() -> None:
    event = registry().schema(EVENT)
    union = next(f for f in event["fields"] if f["name"] == "payload")["type"]
    seen = {r["payload"][0] for r in sample_records(event)}
    assert seen == {branch["name"] for branch in union}


# -- the real schemas, policies, the directory check -------------------------------------------


def test_the_current_schemas_are_compatible_with_every_release() -> None:
    report = check_directory(repo_schema_dir())
    assert report.ok, "\n".join(map(str, report.problems))
    assert {(name, release) for name, release, _ in report.checked} >= {(EVENT, "v1")}


def test_every_record_and_field_of_the_current_schemas_is_documented() -> None:
    for sf in load_directory(repo_schema_dir()).values():
        assert check_policies(sf) == []


def test_a_missing_doc_and_a_moved_hash_are_policy_violations(tmp_path: Path) -> None:
    schema = json.loads((repo_schema_dir() / "ares.v1.Event.avsc").read_text())
    hash_field = next(f for f in schema["fields"] if f["name"] == "hash")
    schema["fields"].remove(hash_field)
    schema["fields"].insert(0, hash_field)  # hash first
    del payload_record(schema, "TaskAssigned")["fields"][0]["doc"]
    path = tmp_path / "ares.v1.Event.avsc"
    path.write_text(json.dumps(schema))
    found = {(p.path, p.message) for p in check_policies(load_file(path))}
    assert ("hash", "must stay the last field of the Event record, followed only by "
            "signature and key_id (chain.seal_encoded splices it into the encoded body)") in found
    assert ("payload.task_id", "missing doc") in found


def test_an_evolved_event_passes_and_a_broken_one_fails(tmp_path: Path) -> None:
    _, good = evolved_dirs(tmp_path / "good", add_priority)
    assert check_directory(good).ok

    def break_it(schema: dict[str, Any]) -> None:
        payload_record(schema, "TaskAssigned")["fields"].append(
            {"name": "priority", "type": "long", "doc": "no default"})

    _, bad = evolved_dirs(tmp_path / "bad", break_it)
    report = check_directory(bad)
    assert {p.path for p in report.problems} == {
        "payload<ares.v1.event.TaskAssigned>.priority", "(data)"}
    assert all(p.against == "v1" for p in report.problems)


def test_a_removed_schema_fails(tmp_path: Path) -> None:
    _, new = evolved_dirs(tmp_path, add_priority)
    (new / "ares.v1.Alert.avsc").unlink()
    report = check_directory(new)
    assert [(p.schema, p.message) for p in report.problems] == [
        ("ares.v1.Alert", "schema removed: records written with it could no longer be read")]


# -- the packaged copy ---------------------------------------------------------------------------


def test_the_packaged_copy_is_in_sync_with_schemas_dir() -> None:
    drift = copy_drift(repo_schema_dir(), package_schema_dir())
    assert drift == [], f"run `ares schemas sync`: {drift}"


def test_sync_makes_an_exact_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    (copy / "released" / "v0").mkdir(parents=True)
    (copy / "released" / "v0" / "stale.avsc").write_text("{}")
    assert sync_copy(repo_schema_dir(), copy)
    assert copy_drift(repo_schema_dir(), copy) == []
    assert sync_copy(repo_schema_dir(), copy) == []


# -- the command line --------------------------------------------------------------------------


def test_cli_check_passes_on_the_repository() -> None:
    result = CliRunner().invoke(schemas, ["check", "--dir", str(repo_schema_dir())])
    assert result.exit_code == 0, result.output
    assert "ok: " in result.output
    assert f"checked {EVENT}: v1 -> current" in result.output


def narrowed_reply(tmp_path: Path) -> tuple[Path, Path]:
    """(new, old) schema directories where Reply.stream_version went from long to int."""
    old = tmp_path / "old"
    shutil.copytree(repo_schema_dir(), old, ignore=shutil.ignore_patterns("released"))
    new = tmp_path / "new"
    shutil.copytree(old, new)
    reply = json.loads((new / "ares.v1.Reply.avsc").read_text())
    next(f for f in reply["fields"] if f["name"] == "stream_version")["type"] = "int"
    (new / "ares.v1.Reply.avsc").write_text(json.dumps(reply))
    return new, old


def test_cli_check_fails_with_precise_messages(tmp_path: Path) -> None:
    new, old = narrowed_reply(tmp_path)
    result = CliRunner().invoke(schemas, ["check", "--dir", str(new), "--against", str(old)])
    assert result.exit_code == 1
    assert "ares.v1.Reply" in result.output
    assert "stream_version: long cannot be read as int" in " ".join(result.output.split())


def test_the_ares_entry_point_exits_1_on_a_problem(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    new, old = narrowed_reply(tmp_path)
    argv = ["ares", "schemas", "check", "--dir", str(new), "--against", str(old)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1


def test_cli_list_shows_fingerprints() -> None:
    result = CliRunner().invoke(schemas, ["list", "--dir", str(repo_schema_dir())])
    assert result.exit_code == 0, result.output
    assert registry().fingerprint(EVENT).hex() in result.output


# -- where the schemas are loaded from ----------------------------------------------------------


def test_the_packaged_copy_alone_yields_the_same_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCHEMA_DIR_ENV, str(package_schema_dir()))
    assert schema_dir() == package_schema_dir()
    packaged = load_registry()
    assert set(packaged.by_fingerprint) == set(registry().by_fingerprint)
    assert list(packaged.releases) == ["v1"]


def test_a_schema_dir_without_schemas_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv(SCHEMA_DIR_ENV, str(tmp_path))
    with pytest.raises(SchemaError, match=SCHEMA_DIR_ENV):
        schema_dir()
