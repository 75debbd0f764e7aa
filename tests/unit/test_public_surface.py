"""The public surface: ``ares`` (lazy re-exports, each named in its type-checking imports and
``__all__``), the agent SDK ``ares.agents``, and the runtime's side ``ares.agents.host_api``."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import ares
from ares import agents
from ares.agents import host_api

ROOT = Path(__file__).resolve().parents[2]
# What only the runtime (a host of agents) calls: not in the SDK, in the host API.
RUNTIME = ("AgentSink", "TaskJournal", "open_tasks", "run_task", "resolution_event")


def _type_checking_imports() -> set[tuple[str, str]]:
    """(module, name) of every import under ``if TYPE_CHECKING:`` in ares/__init__.py."""
    tree = ast.parse(Path(ares.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    return {(stmt.module or "", alias.name) for stmt in guarded.body
            if isinstance(stmt, ast.ImportFrom) for alias in stmt.names}


@pytest.mark.parametrize("module", [ares, agents, host_api], ids=lambda m: m.__name__)
def test_every_name_of_all_exists(module: ModuleType) -> None:
    names = module.__all__
    assert len(set(names)) == len(names)
    assert [name for name in names if not hasattr(module, name)] == []


def test_the_type_checking_imports_name_exactly_the_exports_and_their_sources() -> None:
    imported = _type_checking_imports()
    assert sorted(name for _, name in imported) == sorted(ares.__all__)
    assert {module for module, _ in imported} == set(ares._SOURCES)
    for module, name in imported:  # what __getattr__ finds is what the type checker sees
        assert getattr(ares, name) is getattr(importlib.import_module(module), name), name


def test_the_client_is_public() -> None:
    from ares.client import Client, CommandRejectedError

    assert ares.Client is Client
    assert ares.CommandRejectedError is CommandRejectedError
    assert {"Client", "CommandRejectedError"} <= set(ares.__all__) & set(dir(ares))


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = ares.Nope
    with pytest.raises(AttributeError):
        _ = ares.SystemClock  # defined in a source module, but not exported


def test_the_reexports_are_lazy() -> None:
    """Importing a submodule loads neither the SDK nor the Kafka client; ``ares.Agent``
    loads the SDK, not the Kafka client."""
    code = ("import json, sys, ares.errors; before = sorted(sys.modules); import ares; "
            "ares.Agent; print(json.dumps([before, sorted(sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    before, after = json.loads(done.stdout)
    assert "ares.agents" not in before
    assert "ares.client" not in before
    assert "ares.agents" in after
    assert "ares.client" not in after
    assert not [name for name in after if name.startswith("aiokafka")]


def test_the_sdk_is_what_agent_authors_use() -> None:
    assert [name for name in RUNTIME if name in agents.__all__] == []
    assert [name for name in RUNTIME if hasattr(agents, name)] == []
    # everything ares re-exports from ares.agents is SDK
    from_agents = {name for module, name in _type_checking_imports() if module == "ares.agents"}
    assert from_agents <= set(agents.__all__)


def test_the_runtime_side_is_the_host_api() -> None:
    assert set(RUNTIME) <= set(host_api.__all__)
    # the host API also names the SDK types it takes and returns; they are the same objects
    for name in set(host_api.__all__) & set(agents.__all__):
        assert getattr(host_api, name) is getattr(agents, name)


def test_the_docs_name_only_exports() -> None:
    """``ares.<Name>`` in the README and docs/ is exported by ``ares``, ``ares.agents.<Name>``
    by the SDK; the SDK page's host API section names every runtime-side name."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(path.read_text(encoding="utf-8") for path in texts)
    top = set(re.findall(r"\bares\.([A-Z]\w*)", text))
    assert top
    assert sorted(top - set(ares.__all__)) == []
    sdk = set(re.findall(r"\bares\.agents\.([A-Z]\w*)", text))
    assert sorted(sdk - set(agents.__all__)) == []
    sdk_page = (ROOT / "docs" / "sdk.md").read_text(encoding="utf-8")
    host_section = sdk_page.split("## For the runtime", 1)[1].split("\n## ", 1)[0]
    assert [name for name in RUNTIME if f"`{name}" not in host_section] == []
