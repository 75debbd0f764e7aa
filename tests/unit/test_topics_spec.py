"""topics.yaml parsing, validation and the desired-vs-actual diff: pure, no broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ares.config import Settings
from ares.errors import ConfigError
from ares.topics import (
    ALERTS,
    COMMANDS,
    DLQ,
    EVENTS,
    HEARTBEATS,
    PER_AGENT_TOPICS,
    REPLIES,
    REQUIRED_TOPICS,
    SNAPSHOTS,
    SUMMARIES,
    TopicOverrides,
    TopicPlan,
    TopicState,
    build_plan,
    checkout_topics_file,
    load_topics,
    packaged_topics_file,
    plan_changes,
)
from ares.topics.configs import canonical_value, same_value
from ares.topics.loader import parse_yaml, read_topics_file

REPO_FILE = Path(__file__).resolve().parents[2] / "topics.yaml"


def minimal() -> dict[str, Any]:
    """The smallest valid document: every required topic, one config each."""
    topics: dict[str, Any] = {
        name: {"copartitioned": True, "configs": {"cleanup.policy": "delete"}}
        for name in PER_AGENT_TOPICS
    }
    topics[ALERTS] = {"partitions": 3}
    topics[DLQ] = {}
    topics[REPLIES] = {"replication_factor": 1}
    return {"version": 1, "partitions": 6, "replication_factor": 1,
            "configs": {"min.insync.replicas": 1}, "topics": topics}


def plan_of(doc: dict[str, Any], **kwargs: Any) -> TopicPlan:
    return build_plan(doc, source="test.yaml", **kwargs)


def rejected(doc: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        plan_of(doc, **kwargs)
    return str(info.value)


# --- the shipped file -------------------------------------------------------------------------

@pytest.mark.parametrize("environment", ["", "staging", "production"])
def test_shipped_file_is_valid_in_every_environment(environment: str) -> None:
    plan = load_topics(Settings(), REPO_FILE, environment=environment, env={})
    assert {t.logical for t in plan.topics} >= set(REQUIRED_TOPICS)
    per_agent = [plan.topic(name) for name in PER_AGENT_TOPICS]
    assert all(t.copartitioned and t.partitions == plan.partitions for t in per_agent)


def test_shipped_file_matches_the_design() -> None:
    plan = load_topics(Settings(), REPO_FILE, environment="", env={})
    config = {t.logical: t.configs for t in plan.topics}
    assert plan.partitions == 12
    assert all(t.replication_factor == 1 for t in plan.topics)
    assert all(t.configs["min.insync.replicas"] == "1" for t in plan.topics)
    assert config[EVENTS]["cleanup.policy"] == "delete"
    assert config[EVENTS]["retention.ms"] == "-1"
    assert config[SNAPSHOTS]["cleanup.policy"] == "compact"
    assert config[SUMMARIES]["cleanup.policy"] == "compact,delete"
    assert int(config[SUMMARIES]["retention.ms"]) > 0
    assert int(config[HEARTBEATS]["retention.ms"]) <= 86_400_000
    assert int(config[REPLIES]["retention.ms"]) <= 86_400_000
    assert int(config[DLQ]["max.message.bytes"]) > int(config[EVENTS]["max.message.bytes"])


def test_production_environment_overrides_counts_and_durability() -> None:
    plan = load_topics(Settings(), REPO_FILE, environment="production", env={})
    assert plan.environment == "production"
    assert plan.partitions == 48
    assert {t.replication_factor for t in plan.topics} == {3}
    assert {t.configs["min.insync.replicas"] for t in plan.topics} == {"2"}
    assert plan.topic(ALERTS).partitions == 6


def test_packaged_copy_is_identical_to_the_repository_file() -> None:
    packaged = packaged_topics_file()
    assert packaged.read_text() == REPO_FILE.read_text(), (
        f"{packaged} differs from {REPO_FILE}: cp topics.yaml services/ares/topics/")


# --- names, prefix, lookup --------------------------------------------------------------------

def test_names_carry_the_prefix_and_partitions_the_group_count() -> None:
    plan = plan_of(minimal(), prefix="staging.")
    assert plan.name(EVENTS) == "staging.ares.events"
    assert plan.partitions == 6
    assert [t.logical for t in plan.copartitioned] == list(PER_AGENT_TOPICS)
    assert plan.topic(ALERTS).partitions == 3
    assert plan.topic(DLQ).partitions == 6  # the top-level default
    with pytest.raises(ConfigError, match=r"no topic 'ares\.nope'"):
        plan.name("ares.nope")


def test_load_topics_takes_prefix_and_record_limit_from_settings(tmp_path: Path) -> None:
    file = tmp_path / "topics.yaml"
    doc = minimal()
    doc["configs"]["max.message.bytes"] = "1MiB"
    file.write_text(yaml.safe_dump(doc))
    plan = load_topics(Settings(topic_prefix="p."), file, env={})
    assert plan.name(EVENTS) == "p.ares.events"
    with pytest.raises(ConfigError, match="below ARES_MAX_RECORD_BYTES"):
        load_topics(Settings(max_record_bytes=2 * 1024 * 1024), file, env={})


def test_lookup_order_is_argument_then_env_then_checkout(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("a")
    b.write_text("b")
    assert read_topics_file(a, {"ARES_TOPICS_FILE": str(b)}) == (str(a), "a")
    assert read_topics_file(None, {"ARES_TOPICS_FILE": str(b)}) == (str(b), "b")
    assert read_topics_file(None, {})[0] == str(checkout_topics_file())
    with pytest.raises(ConfigError, match="ARES_TOPICS_FILE: cannot read"):
        read_topics_file(None, {"ARES_TOPICS_FILE": str(tmp_path / "missing.yaml")})


# --- overrides --------------------------------------------------------------------------------

def test_env_overrides_win_over_file_and_environment(tmp_path: Path) -> None:
    env = {"ARES_TOPIC_PARTITIONS": "24", "ARES_TOPIC_REPLICATION_FACTOR": "3",
           "ARES_TOPIC_ENVIRONMENT": "production"}
    plan = load_topics(Settings(), REPO_FILE, env=env)
    assert plan.environment == "production"
    assert plan.partitions == 24
    assert plan.topic(EVENTS).partitions == 24
    assert plan.topic(REPLIES).partitions == 24  # inherits the default
    assert plan.topic(ALERTS).partitions == 6  # its own count stays
    assert {t.replication_factor for t in plan.topics} == {3}


def test_environment_argument_wins_over_env_and_empty_means_none() -> None:
    env = {"ARES_TOPIC_ENVIRONMENT": "production"}
    assert load_topics(Settings(), REPO_FILE, environment="", env=env).partitions == 12
    assert load_topics(Settings(), REPO_FILE, environment="staging",
                       env=env).environment == "staging"


@pytest.mark.parametrize("value", ["zero", "0", "-3", "1.5"])
def test_bad_env_override_names_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match="ARES_TOPIC_PARTITIONS must be a positive integer"):
        load_topics(Settings(), REPO_FILE, env={"ARES_TOPIC_PARTITIONS": value})


def test_environment_overlay_merges_configs_and_null_unmanages() -> None:
    doc = minimal()
    doc["environments"] = {"prod": {
        "replication_factor": 3,
        "configs": {"compression.type": "zstd"},
        "topics": {DLQ: {"partitions": 2, "configs": {"compression.type": None}}},
    }}
    plan = plan_of(doc, overrides=TopicOverrides(environment="prod"))
    assert plan.topic(EVENTS).configs["compression.type"] == "zstd"
    assert plan.topic(EVENTS).configs["cleanup.policy"] == "delete"
    assert "compression.type" not in plan.topic(DLQ).configs
    assert plan.topic(DLQ).partitions == 2
    assert plan.topic(REPLIES).replication_factor == 1  # its own setting wins over the env's


# --- validation -------------------------------------------------------------------------------

def test_unknown_environment_lists_the_defined_ones() -> None:
    doc = minimal()
    doc["environments"] = {"prod": {}}
    message = rejected(doc, overrides=TopicOverrides(environment="qa"))
    assert "unknown environment 'qa'" in message
    assert "defined: prod" in message


def test_unknown_top_level_key() -> None:
    doc = minimal()
    doc["partiton"] = 3
    assert "unknown key 'partiton' (did you mean 'partitions'?)" in rejected(doc)


def test_unknown_topic_key_names_topic_and_key() -> None:
    doc = minimal()
    doc["topics"][EVENTS]["retention"] = "7d"
    message = rejected(doc)
    assert "topic 'ares.events'" in message
    assert "unknown key 'retention'" in message


def test_unknown_config_names_topic_key_and_closest_config() -> None:
    doc = minimal()
    doc["topics"][HEARTBEATS]["configs"]["retention.msec"] = 1000
    message = rejected(doc)
    assert "topic 'ares.heartbeats'" in message
    assert "'retention.msec' is not a Kafka topic config (did you mean 'retention.ms'?)" in message


def test_vendor_configs_pass_through() -> None:
    doc = minimal()
    doc["topics"][DLQ]["configs"] = {"confluent.placement.constraints": "{}"}
    assert plan_of(doc).topic(DLQ).configs["confluent.placement.constraints"] == "{}"


def test_invalid_config_value_names_the_key() -> None:
    doc = minimal()
    doc["topics"][EVENTS]["configs"]["retention.ms"] = "7 days"
    assert "topic 'ares.events': configs: retention.ms: expected a duration" in rejected(doc)
    doc["topics"][EVENTS]["configs"]["retention.ms"] = "7d"
    doc["topics"][EVENTS]["configs"]["cleanup.policy"] = "compress"
    assert "cleanup.policy must be delete, compact or both" in rejected(doc)


def test_per_agent_topic_must_be_copartitioned() -> None:
    doc = minimal()
    doc["topics"][SNAPSHOTS]["copartitioned"] = False
    assert "topic 'ares.snapshots': a per-agent topic must be copartitioned" in rejected(doc)


def test_copartitioned_topic_takes_the_top_level_count() -> None:
    doc = minimal()
    doc["topics"][EVENTS]["partitions"] = 24
    assert "partitions is not allowed on a copartitioned topic" in rejected(doc)
    doc = minimal()
    doc["environments"] = {"prod": {"topics": {COMMANDS: {"partitions": 24}}}}
    message = rejected(doc, overrides=TopicOverrides(environment="prod"))
    assert "environment 'prod'" in message
    assert "topic 'ares.commands'" in message



def test_missing_required_topic() -> None:
    doc = minimal()
    del doc["topics"][REPLIES]
    assert "required topics missing: ares.replies" in rejected(doc)


def test_min_insync_replicas_cannot_exceed_replication_factor() -> None:
    doc = minimal()
    doc["configs"]["min.insync.replicas"] = 2
    assert "min.insync.replicas 2 exceeds replication_factor 1" in rejected(doc)


@pytest.mark.parametrize("value", [0, -1, True, "3", 2.5])
def test_partitions_must_be_a_positive_integer(value: object) -> None:
    doc = minimal()
    doc["partitions"] = value
    assert "partitions must be a positive integer" in rejected(doc)


def test_version_is_required() -> None:
    doc = minimal()
    del doc["version"]
    assert "version must be 1" in rejected(doc)


def test_environment_may_only_override_defined_topics() -> None:
    doc = minimal()
    doc["environments"] = {"prod": {"topics": {"ares.new": {"partitions": 1}}}}
    assert "topic 'ares.new' is not defined under topics" in rejected(doc)


def test_typo_in_an_unselected_environment_is_still_caught() -> None:
    doc = minimal()
    doc["environments"] = {"prod": {"replicaton_factor": 3}}
    assert "environments.prod: unknown key 'replicaton_factor'" in rejected(doc)


def test_topic_name_too_long_with_prefix() -> None:
    assert "not a valid Kafka topic name" in rejected(minimal(), prefix="x" * 240)


def test_yaml_duplicate_keys_and_syntax_errors_name_the_line() -> None:
    text = "version: 1\ntopics:\n  ares.events: {}\n  ares.events: {}\n"
    with pytest.raises(ConfigError, match=r"t\.yaml, line 4: duplicate key 'ares.events'"):
        parse_yaml(text, "t.yaml")
    with pytest.raises(ConfigError, match=r"t\.yaml, line 2: invalid YAML"):
        parse_yaml("version: 1\n  bad: [\n", "t.yaml")


# --- config values ----------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "value", "expected"), [
    ("retention.ms", "7d", "604800000"),
    ("retention.ms", "1h", "3600000"),
    ("segment.ms", "10m", "600000"),
    ("retention.ms", -1, "-1"),
    ("local.retention.ms", "-2", "-2"),
    ("max.message.bytes", "2MiB", "2097152"),
    ("retention.bytes", 1024, "1024"),
    ("cleanup.policy", ["delete", "compact"], "compact,delete"),
    ("cleanup.policy", "delete, compact", "compact,delete"),
    ("unclean.leader.election.enable", False, "false"),
    ("min.cleanable.dirty.ratio", 0.1, "0.1"),
    ("compression.type", " zstd ", "zstd"),
])
def test_canonical_values(key: str, value: object, expected: str) -> None:
    assert canonical_value(key, value) == expected


@pytest.mark.parametrize(("key", "value"), [
    ("retention.ms", "-5"), ("retention.ms", "3y"), ("max.message.bytes", "1MB"),
    ("compression.type", ["zstd"]), ("cleanup.policy", ""), ("retention.ms", {"a": 1}),
])
def test_invalid_values(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        canonical_value(key, value)


def test_same_value_is_the_brokers_notion_of_equal() -> None:
    assert same_value("cleanup.policy", "compact,delete", "delete,compact")
    assert same_value("min.cleanable.dirty.ratio", "0.10", "0.1")
    assert not same_value("retention.ms", "1000", "2000")
    assert not same_value("compression.type", "zstd", "lz4")


# --- diff: what apply does and refuses --------------------------------------------------------

def state(plan: TopicPlan, logical: str, *, partitions: int | None = None,
          rf: int | None = None, overrides: dict[str, str] | None = None) -> TopicState:
    spec = plan.topic(logical)
    return TopicState(name=spec.name, partitions=partitions or spec.partitions,
                      replication_factor=rf or spec.replication_factor,
                      overrides=dict(spec.configs) if overrides is None else overrides)


def in_sync(plan: TopicPlan) -> dict[str, TopicState | None]:
    return {t.name: state(plan, t.logical) for t in plan.topics}


def test_missing_topics_are_created_and_matching_ones_unchanged() -> None:
    plan = plan_of(minimal(), prefix="t.")
    states = in_sync(plan)
    states["t.ares.dlq"] = None
    changes = plan_changes(plan, states, brokers=1)
    created = [c.spec.logical for c in changes.changes if c.create]
    assert created == [DLQ]
    assert all(c.unchanged for c in changes.changes if not c.create)
    assert changes.refusals == ()
    assert next(c for c in changes.changes if c.create).status == "missing"


def test_config_drift_is_fixed_and_unmanaged_overrides_kept() -> None:
    plan = plan_of(minimal())
    states = in_sync(plan)
    overrides = {**plan.topic(EVENTS).configs, "cleanup.policy": "compact",
                 "segment.bytes": "1048576"}
    del overrides["min.insync.replicas"]
    states[EVENTS] = state(plan, EVENTS, overrides=overrides)
    change = plan_changes(plan, states, brokers=1).changes[0]
    assert change.status == "drift"
    assert {(d.field, d.desired, d.actual) for d in change.config_changes} == {
        ("cleanup.policy", "delete", "compact"), ("min.insync.replicas", "1", None)}
    assert change.unmanaged == {"segment.bytes": "1048576"}
    assert change.override_set() == {**plan.topic(EVENTS).configs, "segment.bytes": "1048576"}


def test_prune_removes_unmanaged_overrides() -> None:
    plan = plan_of(minimal())
    states = in_sync(plan)
    states[EVENTS] = state(plan, EVENTS, overrides={**plan.topic(EVENTS).configs,
                                                    "segment.bytes": "1048576"})
    assert plan_changes(plan, states, brokers=1).changes[0].unchanged
    change = plan_changes(plan, states, brokers=1, prune=True).changes[0]
    assert [(d.field, d.desired) for d in change.config_changes] == [("segment.bytes", None)]
    assert change.override_set() == dict(plan.topic(EVENTS).configs)


def test_partition_decrease_is_refused() -> None:
    plan = plan_of(minimal())
    states = in_sync(plan)
    states[DLQ] = state(plan, DLQ, partitions=12)
    changes = plan_changes(plan, states, brokers=1, allow_repartition=True)
    assert changes.refusals[0] == "ares.dlq: partition count cannot decrease (12 → 6)"
    assert "Kafka cannot remove partitions" in changes.refusals[1]


def test_copartitioned_increase_needs_allow_repartition() -> None:
    plan = plan_of(minimal())
    states = in_sync(plan)
    for name in PER_AGENT_TOPICS:
        states[name] = state(plan, name, partitions=4)
    refused = plan_changes(plan, states, brokers=1)
    assert len(refused.refusals) == len(PER_AGENT_TOPICS) + 1  # the explanation once
    assert "--allow-repartition" in refused.refusals[-1]
    allowed = plan_changes(plan, states, brokers=1, allow_repartition=True)
    assert allowed.refusals == ()
    assert [c.new_partitions for c in allowed.changes if c.spec.copartitioned] == [6] * len(
        PER_AGENT_TOPICS)
    assert "moves agents to other owners" in allowed.warnings[-1]


def test_other_topics_grow_with_a_loud_warning() -> None:
    plan = plan_of(minimal())
    states = in_sync(plan)
    states[DLQ] = state(plan, DLQ, partitions=2)
    changes = plan_changes(plan, states, brokers=1)
    assert changes.refusals == ()
    assert next(c for c in changes.changes if c.spec.logical == DLQ).new_partitions == 6
    assert changes.warnings[0] == "ares.dlq: partitions 2 → 6"
    assert "key → partition mapping" in changes.warnings[1]


def test_replication_factor_change_is_refused() -> None:
    plan = plan_of(minimal())
    states = in_sync(plan)
    states[ALERTS] = state(plan, ALERTS, rf=3)
    changes = plan_changes(plan, states, brokers=3)
    assert changes.refusals[0] == "ares.alerts: replication factor is 3, topics.yaml wants 1"


def test_replication_factor_above_broker_count_is_refused() -> None:
    doc = minimal()
    doc["replication_factor"] = 3
    plan = plan_of(doc)
    changes = plan_changes(plan, dict.fromkeys(t.name for t in plan.topics), brokers=1)
    assert "ares.events: replication factor 3 exceeds the 1 broker(s)" in changes.refusals[0]
    assert "ARES_TOPIC_REPLICATION_FACTOR" in changes.refusals[-1]
