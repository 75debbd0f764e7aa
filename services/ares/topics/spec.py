"""TopicPlan: what topics.yaml asks of one environment, validated. Pure: no file, no broker.

The plan is what the services ask for topic names (``plan.name(EVENTS)``) and for the
partition count of the co-partitioned per-agent topics (``plan.partitions``), and what
``ares topics apply`` makes true on the cluster. Every mistake in the file is a
``ConfigError`` that names the file, the topic and the key, before anything touches Kafka.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ares.errors import ConfigError
from ares.topics.configs import canonical_value, check_config_name

EVENTS = "ares.events"
SNAPSHOTS = "ares.snapshots"
COMMANDS = "ares.commands"
HEARTBEATS = "ares.heartbeats"
SUMMARIES = "ares.summaries"
ALERTS = "ares.alerts"
DLQ = "ares.dlq"
REPLIES = "ares.replies"
SCHEDULES = "ares.schedules"
TOKENS = "ares.tokens"
USAGE = "ares.usage"
BUDGETS = "ares.budgets"
BUDGET_LIMITS = "ares.budget-limits"
# Keyed by agent id (schedules: by schedule:<name>) and owned per partition (DESIGN.md
# principle 4): partition p of each of them belongs to the same runtime manager, so they must
# share one partition count.
PER_AGENT_TOPICS = (EVENTS, SNAPSHOTS, COMMANDS, HEARTBEATS, SUMMARIES, SCHEDULES)
# What the code produces to or consumes from: a topics.yaml without one of them is broken.
REQUIRED_TOPICS = (*PER_AGENT_TOPICS, ALERTS, DLQ, REPLIES)

FORMAT_VERSION = 1
_TOP_KEYS = frozenset({"version", "partitions", "replication_factor", "configs", "topics",
                       "environments"})
_TOPIC_KEYS = frozenset({"description", "copartitioned", "partitions", "replication_factor",
                         "configs"})
_OVERLAY_KEYS = frozenset({"partitions", "replication_factor", "configs", "topics"})
_OVERLAY_TOPIC_KEYS = frozenset({"partitions", "replication_factor", "configs"})
_TOPIC_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_MAX_TOPIC_NAME = 249  # Kafka's limit


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic as it must exist on the cluster."""

    logical: str  # the name in topics.yaml and in code, e.g. "ares.events"
    name: str  # the name on the cluster: topic prefix + logical name
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]  # canonical broker spellings, e.g. {"retention.ms": "3600000"}
    copartitioned: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class TopicOverrides:
    """Per-process choices on top of the file: which environment, and two emergency knobs."""

    environment: str | None = None  # ARES_TOPIC_ENVIRONMENT / --environment
    partitions: int | None = None  # ARES_TOPIC_PARTITIONS
    replication_factor: int | None = None  # ARES_TOPIC_REPLICATION_FACTOR


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """Every topic of one environment, in file order."""

    topics: tuple[TopicSpec, ...]
    partitions: int  # the partition count of every co-partitioned (per-agent) topic
    prefix: str = ""
    environment: str | None = None
    source: str = "topics.yaml"

    def topic(self, logical: str) -> TopicSpec:
        for spec in self.topics:
            if spec.logical == logical:
                return spec
        raise ConfigError(f"{self.source} defines no topic {logical!r}")

    def name(self, logical: str) -> str:
        """The cluster name of a logical topic (``ares.events`` → ``<prefix>ares.events``)."""
        return self.topic(logical).name

    @property
    def copartitioned(self) -> tuple[TopicSpec, ...]:
        return tuple(spec for spec in self.topics if spec.copartitioned)


def build_plan(document: object, *, prefix: str = "",
               overrides: TopicOverrides | None = None, source: str = "topics.yaml",
               max_record_bytes: int | None = None) -> TopicPlan:
    """Validate a parsed topics.yaml and resolve it for one environment.

    ``max_record_bytes`` (Settings.max_record_bytes) is checked against each topic's
    max.message.bytes: a topic that refuses records the services accept loses them.
    """
    overrides = overrides or TopicOverrides()
    doc = _mapping(document, source, "the document")
    _check_keys(doc, _TOP_KEYS, source)
    if doc.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{source}: version must be {FORMAT_VERSION} "
                          f"(got {doc.get('version')!r})")
    topics = _mapping(doc.get("topics"), source, "topics")
    if not topics:
        raise ConfigError(f"{source}: topics is empty")
    overlay = _overlay(doc, topics, overrides.environment, source)
    where = source if overrides.environment is None else (
        f"{source} (environment {overrides.environment!r})")
    partitions = _count(overrides.partitions, "ARES_TOPIC_PARTITIONS") or _count(
        overlay.get("partitions", doc.get("partitions")), f"{where}: partitions")
    default_rf = _count(overlay.get("replication_factor", doc.get("replication_factor")),
                        f"{where}: replication_factor")
    if partitions is None or default_rf is None:
        raise ConfigError(f"{source}: partitions and replication_factor are required "
                          "at the top level")
    defaults = _merge(_configs(doc.get("configs"), f"{source}: configs"),
                      _configs(overlay.get("configs"), f"{where}: configs"))
    overlay_topics = _mapping(overlay.get("topics"), where, "topics")
    specs = tuple(
        _topic(logical, _mapping(raw, source, f"topic {logical!r}"),
               _mapping(overlay_topics.get(logical), where, f"topic {logical!r}"),
               partitions=partitions, default_rf=default_rf, defaults=defaults,
               prefix=prefix, overrides=overrides, where=where)
        for logical, raw in topics.items()
    )
    plan = TopicPlan(topics=specs, partitions=partitions, prefix=prefix,
                     environment=overrides.environment, source=source)
    _check_plan(plan, max_record_bytes)
    return plan


def _overlay(doc: Mapping[str, Any], topics: Mapping[str, Any], environment: str | None,
             source: str) -> Mapping[str, Any]:
    """The selected environment's section; every environment's keys are checked, so a typo in
    the production section fails in development and CI, not on the day of the deploy."""
    environments = _mapping(doc.get("environments"), source, "environments")
    for env_name, raw in environments.items():
        section = _mapping(raw, source, f"environments.{env_name}")
        _check_keys(section, _OVERLAY_KEYS, f"{source}: environments.{env_name}")
        for logical, topic in _mapping(section.get("topics"), source,
                                       f"environments.{env_name}.topics").items():
            if logical not in topics:
                raise ConfigError(f"{source}: environments.{env_name}: topic {logical!r} is "
                                  "not defined under topics (environments only override)")
            _check_keys(_mapping(topic, source, f"topic {logical!r}"), _OVERLAY_TOPIC_KEYS,
                        f"{source}: environments.{env_name}: topic {logical!r}")
    if environment is None:
        return {}
    if environment not in environments:
        known = ", ".join(sorted(environments)) or "none"
        raise ConfigError(f"{source}: unknown environment {environment!r} "
                          f"(ARES_TOPIC_ENVIRONMENT; defined: {known})")
    return _mapping(environments[environment], source, f"environments.{environment}")


def _topic(logical: str, raw: Mapping[str, Any], overlay: Mapping[str, Any], *,
           partitions: int, default_rf: int, defaults: Mapping[str, str | None], prefix: str,
           overrides: TopicOverrides, where: str) -> TopicSpec:
    here = f"{where}: topic {logical!r}"
    _check_keys(raw, _TOPIC_KEYS, here)
    copartitioned = raw.get("copartitioned", False)
    if not isinstance(copartitioned, bool):
        raise ConfigError(f"{here}: copartitioned must be true or false")
    if logical in PER_AGENT_TOPICS and not copartitioned:
        raise ConfigError(f"{here}: a per-agent topic must be copartitioned: true "
                          "(its partition p must belong to the owner of agent partition p)")
    own = _count(overlay.get("partitions", raw.get("partitions")), f"{here}: partitions")
    if copartitioned and own is not None:
        raise ConfigError(f"{here}: partitions is not allowed on a copartitioned topic; "
                          "it takes the top-level partitions")
    rf = (_count(overrides.replication_factor, "ARES_TOPIC_REPLICATION_FACTOR")
          or _count(overlay.get("replication_factor", raw.get("replication_factor")),
                    f"{here}: replication_factor")
          or default_rf)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{here}: description must be a string")
    configs = _merge(defaults, _configs(raw.get("configs"), f"{here}: configs"),
                     _configs(overlay.get("configs"), f"{here}: configs"))
    return TopicSpec(
        logical=logical, name=f"{prefix}{logical}", partitions=own or partitions,
        replication_factor=rf,
        configs=MappingProxyType({k: v for k, v in configs.items() if v is not None}),
        copartitioned=copartitioned, description=description,
    )


def _check_plan(plan: TopicPlan, max_record_bytes: int | None) -> None:
    missing = [name for name in REQUIRED_TOPICS if name not in {t.logical for t in plan.topics}]
    if missing:
        raise ConfigError(f"{plan.source}: required topics missing: {', '.join(missing)}")
    for spec in plan.topics:
        here = f"{plan.source}: topic {spec.logical!r}"
        if not _TOPIC_NAME_RE.match(spec.logical) or len(spec.name) > _MAX_TOPIC_NAME:
            raise ConfigError(f"{here}: {spec.name!r} is not a valid Kafka topic name "
                              f"(letters, digits, . _ -; at most {_MAX_TOPIC_NAME} characters)")
        min_isr = int(spec.configs.get("min.insync.replicas", "1"))
        if min_isr > spec.replication_factor:
            raise ConfigError(
                f"{here}: min.insync.replicas {min_isr} exceeds replication_factor "
                f"{spec.replication_factor}: every acks=all write would fail")
        max_bytes = spec.configs.get("max.message.bytes")
        if max_record_bytes is not None and max_bytes is not None \
                and int(max_bytes) < max_record_bytes:
            raise ConfigError(
                f"{here}: max.message.bytes {max_bytes} is below ARES_MAX_RECORD_BYTES "
                f"{max_record_bytes}: the broker would reject records the services accept")


def _configs(raw: object, here: str) -> dict[str, str | None]:
    """One layer of configs, canonical; None means "stop managing this key" (for overlays)."""
    result: dict[str, str | None] = {}
    for key, value in _mapping(raw, here, "configs").items():
        problem = check_config_name(key)
        if problem is not None:
            raise ConfigError(f"{here}: {problem}")
        if value is None:
            result[key] = None
            continue
        try:
            result[key] = canonical_value(key, value)
        except ValueError as exc:
            raise ConfigError(f"{here}: {key}: {exc}") from None
    return result


def _merge(*layers: Mapping[str, str | None]) -> dict[str, str | None]:
    merged: dict[str, str | None] = {}
    for layer in layers:
        merged.update(layer)
    return merged


def _mapping(value: object, where: str, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{where}: {what} must be a mapping of names")
    return value


def _check_keys(section: Mapping[str, Any], allowed: frozenset[str], here: str) -> None:
    unknown = sorted(set(section) - allowed)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(allowed), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(sorted(allowed))}"
        raise ConfigError(f"{here}: unknown key {unknown[0]!r} ({hint})")


def _count(value: object, name: str) -> int | None:
    """A positive integer (partitions, replication factor), or None when not given."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer (got {value!r})")
    return value
