"""The shape of the package, read from its imports (static: every ``import`` statement,
including those inside functions).

A node is a package of ``ares`` or a top-level module (``ares.config``); ``ares.events.kafka``,
the event log's adapter layer, is a node of its own (it, not the log's domain or codec,
needs the configuration and the Kafka client). The
four services are leaves: nothing imports a service but the CLI, the demo and the chaos
runner, and no service imports another.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import ares

PACKAGE = Path(ares.__file__).resolve().parent
SERVICES = frozenset({"ares.runtime_manager", "ares.health_checker", "ares.compactor",
                      "ares.replay_reader"})
# What may start or drive a service: the operator's entry points.
ENTRY_POINTS = frozenset({"ares.cli", "ares.demo", "ares.chaos", "ares.service"})
NESTED = ("ares.events.kafka",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def node_of(module: str) -> str:
    """``ares.<package>`` or ``ares.<module>``; the Kafka adapters are a node of their own."""
    for nested in NESTED:
        if module == nested or module.startswith(f"{nested}."):
            return nested
    return ".".join(module.split(".")[:2])


def _imports(path: Path) -> Iterator[str]:
    module = _module_name(path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                base = ".".join(package[:len(package) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if node.module:
                yield target
            else:
                yield from (f"{target}.{alias.name}" for alias in node.names)


@cache
def edges() -> dict[str, set[tuple[str, str, str]]]:
    """node -> {(imported node, importing module, imported module)} across nodes."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = node_of(_module_name(path))
        for target in _imports(path):
            if target.startswith("ares.") and node_of(target) != source:
                found.setdefault(source, set()).add(
                    (node_of(target), _module_name(path), target))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_real_imports() -> None:
    """The reader sees the edges everyone knows are there (a broken reader finds none)."""
    assert ("ares.events", "ares.events.kafka.store", "ares.events.wire.codec") in \
        edges()["ares.events.kafka"]
    assert any(target == "ares.lifecycle" for target, _, _ in edges()["ares.runtime_manager"])


def test_no_service_imports_another_service() -> None:
    crossing = sorted(f"{module} -> {target}" for source in SERVICES
                      for node, module, target in edges().get(source, ())
                      if node in SERVICES)
    assert crossing == []


def test_only_the_entry_points_import_a_service() -> None:
    importers = sorted(f"{module} -> {target}" for source, found in edges().items()
                       if source not in SERVICES | ENTRY_POINTS
                       for node, module, target in found if node in SERVICES)
    assert importers == []


def test_no_cycle_between_packages() -> None:
    graph = {source: {node for node, _, _ in found} for source, found in edges().items()}
    assert cycles(graph) == []


def _within_events(layer: str) -> set[str]:
    """The modules of ``ares.events`` that modules of ``layer`` import."""
    return {target for path in PACKAGE.joinpath(*layer.split(".")[1:]).rglob("*.py")
            for target in _imports(path) if target.startswith("ares.events.")
            and not target.startswith(f"{layer}.")}


def test_the_event_log_layers_run_one_way() -> None:
    """The codec knows only the log's values; nothing in the log but its adapters imports
    the Kafka adapters."""
    assert _within_events("ares.events.wire") <= {"ares.events.model"}
    outside_kafka = {_module_name(path): target for path in PACKAGE.joinpath("events").rglob("*.py")
                     if "kafka" not in path.relative_to(PACKAGE).parts
                     for target in _imports(path) if target.startswith("ares.events.kafka")}
    assert outside_kafka == {}


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
