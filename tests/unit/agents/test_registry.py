"""Agent kinds: built-ins, --agents specs, entry points, and the errors a deployer sees."""

from __future__ import annotations

import importlib.metadata
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from ares.agents import (
    Agent,
    AgentConfigError,
    AgentRegistry,
    AgentRegistryError,
    UnknownAgentKindError,
    build_registry,
    load_registry,
)
from ares.agents.registry import entry_point_registry
from ares.examples import ChatAgent, PipelineAgent
from tests.unit.agents.fixture_kinds import EchoAgent

SPEC = "tests.unit.agents.fixture_kinds"


def _no_entry_points(monkeypatch: pytest.MonkeyPatch, *eps: EntryPoint) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [ep for ep in eps if ep.group == group])


def test_builtin_examples_are_registered_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_entry_points(monkeypatch)
    registry = build_registry()
    assert registry.kinds() == ["example.assistant", "example.chat", "example.distiller",
                                "example.pipeline", "example.refund", "example.researcher",
                                "example.team"]
    assert isinstance(registry.create("example.pipeline", "p1"), PipelineAgent)
    assert isinstance(registry.create("example.chat", "c1", {"max_turns": 3}), ChatAgent)


def test_unknown_kind_lists_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_entry_points(monkeypatch)
    with pytest.raises(UnknownAgentKindError) as info:
        build_registry().create("example.pipelin", "p1")
    message = str(info.value)
    assert "unknown agent kind 'example.pipelin'" in message
    assert "example.assistant, example.chat, example.distiller" in message
    assert "--agents" in message
    assert isinstance(info.value, AgentConfigError)


@pytest.mark.parametrize("attr", ["REGISTRY", "AS_LIST", "EchoAgent"])
def test_load_registry_by_spec(attr: str) -> None:
    registry = load_registry(f"{SPEC}:{attr}")
    assert registry.kinds() == ["test.echo"]
    assert registry.source("test.echo") == f"--agents {SPEC}:{attr}"


def test_load_registry_from_a_mapping() -> None:
    assert load_registry(f"{SPEC}:AS_MAPPING").kinds() == ["test.mapped"]


@pytest.mark.parametrize(("spec", "message"), [
    ("tests.unit.agents.fixture_kinds", "expected package.module:REGISTRY"),
    ("no_such_module_xyz:REGISTRY", "cannot import 'no_such_module_xyz'"),
    (f"{SPEC}:MISSING", "has no attribute 'MISSING'"),
    (f"{SPEC}:NOT_A_REGISTRY", "is a int; expected an AgentRegistry"),
])
def test_load_registry_errors_name_the_spec(spec: str, message: str) -> None:
    with pytest.raises(AgentRegistryError, match=message):
        load_registry(spec)


def test_specs_merge_with_builtins_and_conflicts_are_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _no_entry_points(monkeypatch)
    registry = build_registry([f"{SPEC}:REGISTRY"])
    assert "test.echo" in registry
    assert "example.chat" in registry
    with pytest.raises(AgentRegistryError, match=r"kind 'test\.echo' is defined twice"):
        build_registry([f"{SPEC}:REGISTRY", f"{SPEC}:CONFLICTING"])
    # The same class from two sources is not a conflict.
    assert len(build_registry([f"{SPEC}:REGISTRY", f"{SPEC}:AS_LIST"])) == 8  # + 7 built-in


def test_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_entry_points(
        monkeypatch,
        EntryPoint("bundle", f"{SPEC}:AS_MAPPING", "ares.agents"),
        EntryPoint("test.echo", f"{SPEC}:EchoAgent", "ares.agents"),
        EntryPoint("renamed.echo", f"{SPEC}:EchoAgent", "ares.agents"),
        EntryPoint("other", f"{SPEC}:EchoAgent", "other.group"),
    )
    registry = entry_point_registry()
    assert registry.kinds() == ["renamed.echo", "test.echo", "test.mapped"]
    assert "entry point test.echo" in registry.source("test.echo")


def test_a_broken_entry_point_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_entry_points(monkeypatch, EntryPoint("bad", "no_such_module_xyz:X", "ares.agents"))
    with pytest.raises(AgentRegistryError, match="entry point bad = no_such_module_xyz:X"):
        entry_point_registry()


def test_invalid_configs_name_the_agent_and_kind() -> None:
    registry = AgentRegistry([EchoAgent, ChatAgent])
    with pytest.raises(AgentConfigError,
                       match=r"agent 'e1' of kind 'test\.echo': 'prefix' must be a string"):
        registry.create("test.echo", "e1", {"prefix": 3})
    with pytest.raises(AgentConfigError, match=r"unknown setting\(s\) \['colour'\]"):
        registry.create("example.chat", "c1", {"colour": "blue"})
    with pytest.raises(AgentConfigError, match="'max_turns' must be an integer >= 1"):
        registry.create("example.chat", "c1", {"max_turns": 0})
    with pytest.raises(AgentConfigError, match="'reconcile' must be true or false"):
        AgentRegistry([PipelineAgent]).create("example.pipeline", "p1", {"reconcile": "no"})
    with pytest.raises(AgentConfigError, match="the config must be a JSON object"):
        registry.create("test.echo", "e1", ["not", "a", "mapping"])  # type: ignore[arg-type]


def test_factories_that_raise_plain_errors_become_config_errors() -> None:
    def factory(agent_id: str, config: Any) -> Agent:
        return EchoAgent(agent_id, {"prefix": config["required"]})

    registry = AgentRegistry()
    registry.register("test.factory", factory)
    with pytest.raises(AgentConfigError, match="invalid config: KeyError: 'required'"):
        registry.create("test.factory", "f1", {})
    registry.register("test.bad", lambda agent_id, config: "not an agent")  # type: ignore[arg-type,return-value]
    with pytest.raises(AgentRegistryError, match=r"returned str, not an ares\.Agent"):
        registry.create("test.bad", "b1")


def test_registering_invalid_things() -> None:
    class NoKind(Agent):
        pass

    registry = AgentRegistry()
    with pytest.raises(AgentRegistryError, match="NoKind has no kind"):
        registry.register(NoKind)
    with pytest.raises(AgentRegistryError, match=r"not an ares\.Agent subclass"):
        registry.register(int)  # type: ignore[arg-type]
    with pytest.raises(AgentRegistryError, match="must be callable"):
        registry.register("x.y", 3)  # type: ignore[arg-type]
