"""Agent kinds: which factory builds an agent of kind K, and where that mapping comes from.

A deployment names the kinds it runs: the built-in examples, the ``ares.agents`` entry
point group of installed packages, and ``--agents package.module:REGISTRY`` specs. A kind
defined twice by different sources is an error, never a silent override.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from typing import Any

from ares.agents.agent import Agent
from ares.agents.errors import AgentConfigError, AgentRegistryError, UnknownAgentKindError

AgentFactory = Callable[[str, Mapping[str, Any]], Agent]
ENTRY_POINT_GROUP = "ares.agents"


class AgentRegistry:
    """kind -> factory(agent_id, config) -> Agent. An ``Agent`` subclass is a factory."""

    def __init__(self, agents: Iterable[type[Agent]] = (), source: str = "code") -> None:
        self._factories: dict[str, tuple[AgentFactory, str]] = {}
        for cls in agents:
            self.register(cls, source=source)

    def register(self, kind: str | type[Agent], factory: AgentFactory | None = None, *,
                 source: str = "code") -> None:
        """``register(MyAgent)`` (its ``kind``) or ``register("my.kind", factory)``."""
        if isinstance(kind, type):
            cls = kind
            if not issubclass(cls, Agent):
                raise AgentRegistryError(f"{cls.__qualname__} is not an ares.Agent subclass")
            if not cls.kind:
                raise AgentRegistryError(f"{cls.__qualname__} has no kind: set "
                                         "kind = 'team.name' on the class")
            factory, kind = cls, cls.kind
        if factory is None or not callable(factory):
            raise AgentRegistryError(f"kind {kind!r}: the factory must be callable")
        if not kind or not isinstance(kind, str):
            raise AgentRegistryError(f"an agent kind must be a non-empty string (got {kind!r})")
        existing = self._factories.get(kind)
        if existing is not None and existing[0] is not factory:
            raise AgentRegistryError(f"kind {kind!r} is defined twice: by {existing[1]} and "
                                     f"by {source}")
        self._factories[kind] = (factory, source)

    def merge(self, other: AgentRegistry) -> None:
        for kind, (factory, source) in other._factories.items():
            self.register(kind, factory, source=source)

    def kinds(self) -> list[str]:
        return sorted(self._factories)

    def __contains__(self, kind: object) -> bool:
        return kind in self._factories

    def __len__(self) -> int:
        return len(self._factories)

    def source(self, kind: str) -> str:
        """Where ``kind`` was defined (for messages)."""
        return self._entry(kind)[1]

    def factory(self, kind: str) -> AgentFactory:
        return self._entry(kind)[0]

    def _entry(self, kind: str) -> tuple[AgentFactory, str]:
        try:
            return self._factories[kind]
        except KeyError:
            raise UnknownAgentKindError(kind, self.kinds()) from None

    def create(self, kind: str, agent_id: str, config: Mapping[str, Any] | None = None) -> Agent:
        """A new agent; ``UnknownAgentKindError`` or ``AgentConfigError`` naming the kind."""
        factory = self._entry(kind)[0]
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            raise AgentConfigError(f"agent {agent_id!r} of kind {kind!r}: the config must be "
                                   f"a JSON object, got {type(config).__name__}")
        try:
            agent = factory(agent_id, config)
        except AgentConfigError as e:
            raise AgentConfigError(f"agent {agent_id!r} of kind {kind!r}: {e}") from e
        except (TypeError, ValueError, KeyError, LookupError) as e:
            raise AgentConfigError(f"agent {agent_id!r} of kind {kind!r}: invalid config: "
                                   f"{type(e).__name__}: {e}") from e
        if not isinstance(agent, Agent):
            raise AgentRegistryError(f"the factory of kind {kind!r} returned "
                                     f"{type(agent).__name__}, not an ares.Agent")
        return agent


def as_registry(value: Any, source: str) -> AgentRegistry:
    """An AgentRegistry from what a spec or entry point points at: a registry, a mapping
    kind -> factory, an Agent subclass, or a list of Agent subclasses."""
    if isinstance(value, AgentRegistry):
        return value
    registry = AgentRegistry()
    if isinstance(value, Mapping):
        for kind, factory in value.items():
            registry.register(str(kind), factory, source=source)
    elif isinstance(value, type):
        registry.register(value, source=source)
    elif isinstance(value, list | tuple):
        for cls in value:
            registry.register(cls, source=source)
    else:
        raise AgentRegistryError(f"{source} is a {type(value).__name__}; expected an "
                                 "AgentRegistry, a mapping kind -> factory, or Agent classes")
    return registry


def load_registry(spec: str) -> AgentRegistry:
    """``package.module:ATTR`` -> the registry it names (``--agents``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AgentRegistryError(f"--agents {spec!r}: expected package.module:REGISTRY")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise AgentRegistryError(f"--agents {spec!r}: cannot import {module_name!r}: {e}") \
            from e
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AgentRegistryError(f"--agents {spec!r}: {module_name} has no attribute "
                                     f"{attr!r}") from None
    loaded = as_registry(value, f"--agents {spec}")
    registry = AgentRegistry()  # a copy: the module's own registry is not relabelled
    for kind in loaded.kinds():
        registry.register(kind, loaded.factory(kind), source=f"--agents {spec}")
    return registry


def entry_point_registry(group: str = ENTRY_POINT_GROUP) -> AgentRegistry:
    """Kinds of the installed packages' ``ares.agents`` entry points. An entry point names
    either a registry (any form ``as_registry`` takes) or one factory, registered under
    the entry point's name."""
    registry = AgentRegistry()
    for ep in metadata.entry_points(group=group):
        source = f"entry point {ep.name} = {ep.value} ({group})"
        try:
            value = ep.load()
        except Exception as e:
            raise AgentRegistryError(f"{source}: cannot load: {type(e).__name__}: {e}") from e
        one_factory = callable(value) and not isinstance(value, type | AgentRegistry)
        renamed_class = (isinstance(value, type) and issubclass(value, Agent)
                         and value.kind != ep.name)
        if one_factory or renamed_class:
            registry.register(ep.name, value, source=source)
        else:
            registry.merge(as_registry(value, source))
    return registry


# The example agents shipped with the package, named rather than imported: the SDK does not
# depend on its examples (they depend on it).
BUILTIN_MODULE, BUILTIN_ATTRIBUTE = "ares.examples", "REGISTRY"


def builtin_registry() -> AgentRegistry:
    """The example agents shipped with the package (``example.pipeline``, ``example.chat``)."""
    examples = importlib.import_module(BUILTIN_MODULE)
    return as_registry(getattr(examples, BUILTIN_ATTRIBUTE), "the built-in examples")


def build_registry(specs: Sequence[str] = (), *, builtins: bool = True,
                   entry_points: bool = True) -> AgentRegistry:
    """What a runtime-manager process runs: built-ins + entry points + ``--agents`` specs."""
    registry = AgentRegistry()
    if builtins:
        registry.merge(builtin_registry())
    if entry_points:
        registry.merge(entry_point_registry())
    for spec in specs:
        registry.merge(load_registry(spec))
    return registry
