"""``ares``'s public surface: every export importable from its module, and the three
places that name them (the lazy map, the type-checking imports, ``__all__``) in step."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import ares


def test_every_export_resolves_to_its_defining_module() -> None:
    for name in ares.__all__:
        value = getattr(ares, name)
        assert getattr(importlib.import_module(ares._EXPORTS[name]), name) is value


def test_the_client_is_public() -> None:
    from ares.client import Client

    assert ares.Client is Client
    assert "Client" in dir(ares)


def test_the_type_checking_imports_name_exactly_the_exports() -> None:
    tree = ast.parse(Path(ares.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    imported = {(stmt.module, alias.name) for stmt in guarded.body
                if isinstance(stmt, ast.ImportFrom) for alias in stmt.names}
    assert imported == {(module, name) for name, module in ares._EXPORTS.items()}
    assert sorted(ares.__all__) == sorted(ares._EXPORTS)
