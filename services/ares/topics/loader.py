"""Finding and reading topics.yaml: the one entry point the rest of the code calls.

Lookup order (the first that exists wins):
  1. the ``path`` argument (``--file``);
  2. ``ARES_TOPICS_FILE`` (e.g. a ConfigMap mounted by the Helm chart);
  3. ``topics.yaml`` at the root of the repository checkout this package runs from, so that
     an edit is picked up by ``ares topics apply`` without reinstalling;
  4. the copy shipped inside the package (``ares/topics/topics.yaml``), for installed wheels.
The lookup never depends on the working directory: a service started from anywhere reads
the same file as ``ares topics apply`` run from the repository.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ares.config import Settings
from ares.errors import ConfigError
from ares.topics.spec import TopicOverrides, TopicPlan, build_plan

ENV_FILE = "ARES_TOPICS_FILE"
ENV_ENVIRONMENT = "ARES_TOPIC_ENVIRONMENT"
ENV_PARTITIONS = "ARES_TOPIC_PARTITIONS"
ENV_REPLICATION_FACTOR = "ARES_TOPIC_REPLICATION_FACTOR"
FILE_NAME = "topics.yaml"


def load_topics(settings: Settings, path: str | os.PathLike[str] | None = None, *,
                environment: str | None = None,
                env: Mapping[str, str] | None = None) -> TopicPlan:
    """The topic plan of this process: topics.yaml, its environment, the ARES_TOPIC_* knobs.

    ``environment`` (``--environment``) wins over ARES_TOPIC_ENVIRONMENT; ``env`` defaults to
    ``os.environ`` and exists for tests.
    """
    env = os.environ if env is None else env
    overrides = overrides_from_env(env)
    if environment is not None:
        overrides = TopicOverrides(environment=environment or None,
                                   partitions=overrides.partitions,
                                   replication_factor=overrides.replication_factor)
    source, text = read_topics_file(path, env)
    return build_plan(parse_yaml(text, source), prefix=settings.topic_prefix,
                      overrides=overrides, source=source,
                      max_record_bytes=settings.max_record_bytes)


def overrides_from_env(env: Mapping[str, str]) -> TopicOverrides:
    return TopicOverrides(environment=env.get(ENV_ENVIRONMENT) or None,
                          partitions=_positive_int(env, ENV_PARTITIONS),
                          replication_factor=_positive_int(env, ENV_REPLICATION_FACTOR))


def read_topics_file(path: str | os.PathLike[str] | None,
                     env: Mapping[str, str]) -> tuple[str, str]:
    """(where it came from, its text), following the lookup order of this module."""
    explicit = path if path is not None else env.get(ENV_FILE) or None
    if explicit is not None:
        file = Path(explicit)
        origin = "--file" if path is not None else ENV_FILE
        try:
            return str(file), file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{origin}: cannot read {file}: {exc.strerror or exc}") from None
    checkout = checkout_topics_file()
    if checkout is not None:
        return str(checkout), checkout.read_text(encoding="utf-8")
    packaged = resources.files("ares.topics") / FILE_NAME
    if not packaged.is_file():
        raise ConfigError(f"no {FILE_NAME}: pass --file or set {ENV_FILE} "
                          "(the package was installed without its copy)")
    return f"{packaged} (packaged)", packaged.read_text(encoding="utf-8")


def checkout_topics_file() -> Path | None:
    """topics.yaml at the repository root, when this package runs from a checkout."""
    root = Path(__file__).resolve().parents[3]  # <root>/services/ares/topics/loader.py
    candidate = root / FILE_NAME
    if (root / "pyproject.toml").is_file() and candidate.is_file():
        return candidate
    return None


def packaged_topics_file() -> Path:
    """The copy shipped as package data (must stay identical to the root file)."""
    return Path(__file__).resolve().parent / FILE_NAME


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML would silently keep the last one, and a
    topic defined twice would lose the first definition without a word."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            mark = key_node.start_mark
            raise ConfigError(f"{mark.name}, line {mark.line + 1}: duplicate key {key!r}")
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _construct_mapping)


def parse_yaml(text: str, source: str) -> object:
    """The parsed document; a YAML error becomes a ConfigError with the file and line."""
    loader = _StrictLoader(text)
    loader.name = source
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}{line}: invalid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a positive integer (got {raw!r})") from None
    if value < 1:
        raise ConfigError(f"{name} must be a positive integer (got {raw!r})")
    return value
