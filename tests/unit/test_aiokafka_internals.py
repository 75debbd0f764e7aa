"""aiokafka's internals in one place, checked loudly (``ares.events.kafka.internals``).

The self-test finds every private attribute ares reaches for on the installed aiokafka,
names a missing one with the feature that needs it and the aiokafka version, in one line;
and nothing in the package but that module touches aiokafka's privates or imports an
aiokafka module the module's ``PROTOCOL_LEVEL`` list does not justify.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import aiokafka
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.consumer.group_coordinator import GroupCoordinator

import ares
from ares.errors import ConfigError
from ares.events.kafka import internals
from ares.events.kafka.internals import REACHES, Reach, check, instance_attributes, missing

PACKAGE = Path(ares.__file__).resolve().parent
HOME = PACKAGE / "events" / "kafka" / "internals.py"
PUBLIC_MODULES = frozenset({"aiokafka", "aiokafka.admin", "aiokafka.errors", "aiokafka.structs",
                            "aiokafka.helpers", "aiokafka.abc"})
# The doors into aiokafka's privates: each reach starts with one of them.
PRIVATE_ENTRIES = frozenset({"_coordinator", "_client", "_txn_manager", "_builder",
                             "_relative_offset", "_do_heartbeat", "_send_request"})


def test_the_pinned_aiokafka_has_everything_ares_reaches_for() -> None:
    assert aiokafka.__version__ == internals.PINNED
    assert missing() == []
    check()


def test_instance_attributes_are_read_from_the_classes_and_their_bases() -> None:
    assert "_txn_manager" in instance_attributes(AIOKafkaProducer)
    assert "_client" in instance_attributes(AIOKafkaAdminClient)
    assert "generation" in instance_attributes(GroupCoordinator)
    assert "_no_such_thing" not in instance_attributes(AIOKafkaProducer)


def test_a_removed_method_is_named_with_its_feature_and_the_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(GroupCoordinator, "_do_heartbeat")
    with pytest.raises(ConfigError) as raised:
        check()
    message = str(raised.value)
    assert "\n" not in message
    assert "GroupCoordinator._do_heartbeat" in message
    assert "heartbeat during rebalance callbacks" in message
    assert f"aiokafka {aiokafka.__version__} lacks" in message
    assert raised.value.exit_code == 2
    assert [reach.attribute for reach in missing()] == ["_do_heartbeat"]


def test_a_missing_instance_attribute_and_a_moved_class_are_both_named() -> None:
    gone = Reach("aiokafka.producer.producer", "AIOKafkaProducer", "_txn_manager_v2",
                 "a feature that needs it")
    moved = Reach("aiokafka.consumer.no_such_module", "GroupCoordinator", "generation",
                  "another feature")
    with pytest.raises(ConfigError) as raised:
        check([*REACHES, gone, moved])
    message = str(raised.value)
    assert "aiokafka.producer.producer.AIOKafkaProducer._txn_manager_v2 (needed by a " \
           "feature that needs it)" in message
    assert "aiokafka.consumer.no_such_module.GroupCoordinator.generation" in message
    assert "\n" not in message


def _sources() -> Iterator[tuple[Path, ast.AST]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != HOME:
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _private_reaches(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``x._client`` on something that is not ``self`` (an aiokafka object, by the names
    ares gives its own attributes), or the name as a string (``getattr``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ENTRIES and not (
                isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}):
            yield node.lineno, node.attr
        if isinstance(node, ast.Constant) and node.value in PRIVATE_ENTRIES:
            yield node.lineno, str(node.value)


def test_no_module_but_internals_touches_aiokafkas_privates() -> None:
    home = {name for _line, name in _private_reaches(ast.parse(HOME.read_text("utf-8")))}
    assert home >= {"_coordinator", "_client", "_txn_manager", "_do_heartbeat", "_builder",
                    "_relative_offset"}  # the detector sees them where they belong
    found = [f"{path.relative_to(PACKAGE)}:{line} {name}"
             for path, tree in _sources() for line, name in _private_reaches(tree)]
    assert found == []


def test_every_aiokafka_submodule_imported_is_public_or_justified() -> None:
    imported = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.split(".")[0] == "aiokafka":
                    imported.setdefault(name, str(path.relative_to(PACKAGE)))
    unjustified = {name: where for name, where in imported.items()
                   if name not in PUBLIC_MODULES and name not in internals.PROTOCOL_LEVEL}
    assert unjustified == {}
