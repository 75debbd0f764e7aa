"""`ares acls plan`: the declared needs of each service, resolved against topics.yaml, and
tied to the names the code really uses (groups, transactional ids)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from ares.budgets.keeper import GROUP as BUDGET_GROUP
from ares.cli import cli
from ares.config import Settings
from ares.errors import ConfigError
from ares.events.kafka.dlq import OWNERS, DeadLetters
from ares.events.kafka.groups import runtime_group
from ares.events.kafka.partition_writer import transactional_id
from ares.health_checker.config import HealthConfig
from ares.health_checker.detector import HealthState
from ares.health_checker.feed import Feed
from ares.health_checker.metrics import HealthMetrics
from ares.security.acls import (
    CLUSTER,
    EVERY_TOPIC,
    FEATURES,
    GROUP,
    IDEMPOTENT_WRITE,
    PREFIXED,
    READ,
    SERVICES,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    kafka_acls_commands,
    markdown,
    plan_acls,
    writers,
)
from ares.summaries.store import SummaryWriter
from ares.topics import COMMANDS, EVENTS, SNAPSHOTS, SUMMARIES, TopicPlan, load_topics

PREFIX = "stg."


@pytest.fixture
def topics() -> TopicPlan:
    return load_topics(Settings(topic_prefix=PREFIX), env={})


def names(topics: TopicPlan, service: str, resource_type: str, operation: str,
          features: tuple[str, ...] = ()) -> set[str]:
    acl_plan = plan_acls(topics, features=features)
    return {a.name for a in acl_plan.of(service)
            if a.resource_type == resource_type and a.operation == operation}


def test_only_the_runtime_manager_writes_the_event_log_and_the_snapshots(
        topics: TopicPlan) -> None:
    everything = plan_acls(topics, features=FEATURES)
    assert writers(everything, topics.name(EVENTS)) == {"runtime-manager"}
    assert writers(everything, topics.name(SNAPSHOTS)) == {"runtime-manager"}


def test_an_external_producer_writes_commands_only(topics: TopicPlan) -> None:
    acl_plan = plan_acls(topics, services=["producer"])
    assert {(a.resource_type, a.name, a.operation) for a in acl_plan.acls} == {
        (TOPIC, topics.name(COMMANDS), WRITE), (TOPIC, "stg.ares.replies", READ)}


def test_every_topic_of_topics_yaml_has_a_writer_and_a_reader(topics: TopicPlan) -> None:
    acl_plan = plan_acls(topics)
    for spec in topics.topics:
        ops = {a.operation for a in acl_plan.acls
               if a.resource_type == TOPIC and a.name == spec.name
               and a.principal != "User:ares-topics"}
        assert {READ, WRITE} <= ops, (spec.logical, ops)


def test_the_topics_principal_manages_every_topic_and_reads_none(topics: TopicPlan) -> None:
    acls = plan_acls(topics, services=["topics"]).acls
    assert {a.name for a in acls} == {spec.name for spec in topics.topics}
    assert {a.operation for a in acls} == {"CREATE", "ALTER", "ALTER_CONFIGS"}
    assert any(n.name == EVERY_TOPIC for n in SERVICES["topics"].needs)


def test_group_and_transactional_id_names_are_the_ones_the_code_uses(
        topics: TopicPlan) -> None:
    settings = Settings(topic_prefix=PREFIX)
    assert names(topics, "runtime-manager", GROUP, READ) == {runtime_group(settings)}
    writer_ids = plan_acls(topics, services=["runtime-manager"]).acls
    [writer] = [a for a in writer_ids
                if a.resource_type == TRANSACTIONAL_ID and a.pattern == PREFIXED]
    assert transactional_id(topics.name(EVENTS), 7).startswith(writer.name)
    assert names(topics, "budget-keeper", GROUP, READ) == {f"{PREFIX}{BUDGET_GROUP}"}
    feed = Feed(settings, topics, HealthState(HealthConfig(),
                                              HealthMetrics(CollectorRegistry())), 60.0)
    assert feed.group_id in names(topics, "health-checker", GROUP, READ)
    assert names(topics, "compactor", GROUP, "DESCRIBE") == {runtime_group(settings)}
    # Read on the runtime group: removing a lost worker is a LeaveGroup (Read, KIP-231)
    assert runtime_group(settings) in names(topics, "health-checker", GROUP, READ)


async def test_the_compactors_transactional_id_is_its_summary_writers(
        topics: TopicPlan) -> None:
    writer = SummaryWriter(Settings(topic_prefix=PREFIX), topics.name(SUMMARIES))
    try:
        tid = writer.producer._txn_manager.transactional_id
    finally:
        await writer.stop()
    assert tid in names(topics, "compactor", TRANSACTIONAL_ID, WRITE)


def test_every_service_that_dead_letters_may_write_and_read_back_the_dlq(
        topics: TopicPlan) -> None:
    settings = Settings(topic_prefix=PREFIX)
    for service in set(OWNERS.values()):
        letters = DeadLetters(settings, topics.name, service)
        assert letters.transactional_id in names(topics, service, TRANSACTIONAL_ID, WRITE)
        assert letters.dlq_topic in names(topics, service, TOPIC, WRITE)
        assert letters.dlq_topic in names(topics, service, TOPIC, READ)
        for topic in letters.owned:  # it reads what it dead-letters
            assert topic in names(topics, service, TOPIC, READ), (service, topic)


def test_optional_features_add_their_rows_only_when_asked(topics: TopicPlan) -> None:
    assert topics.name(COMMANDS) not in names(topics, "replay-reader", TOPIC, WRITE)
    assert topics.name(COMMANDS) in names(topics, "replay-reader", TOPIC, WRITE,
                                          ("api-writes",))
    assert names(topics, "health-checker", GROUP, READ, ("webhook",)) == {
        f"{PREFIX}ares-health-checker", f"{PREFIX}ares-alert-webhook", f"{PREFIX}ares-runtime"}
    assert f"{PREFIX}ares-alert-webhook" not in names(topics, "health-checker", GROUP, READ)


def test_legacy_idempotence_adds_idempotent_write_for_idempotent_producers(
        topics: TopicPlan) -> None:
    acl_plan = plan_acls(topics, legacy_idempotence=True)
    having = {s for s in SERVICES if any(a.resource_type == CLUSTER
                                         and a.operation == IDEMPOTENT_WRITE
                                         for a in acl_plan.of(s))}
    assert having == set(SERVICES) - {"topics"}
    assert not any(a.resource_type == CLUSTER for a in plan_acls(topics).acls)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"services": ["runtime"]}, "unknown service(s) runtime"),
    ({"features": ["everything"]}, "unknown feature(s) everything"),
    ({"principals": {"compactor": "ares-compactor"}}, "must be User:<name>"),
])
def test_bad_selections_are_configuration_errors(topics: TopicPlan, kwargs: dict[str, object],
                                                 message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_acls(topics, **kwargs)  # type: ignore[arg-type]


def test_principals_default_per_service_and_can_be_named(topics: TopicPlan) -> None:
    acl_plan = plan_acls(topics, principals={"compactor": "User:trimmer"})
    assert acl_plan.principals["compactor"] == "User:trimmer"
    assert acl_plan.principals["runtime-manager"] == "User:ares-runtime-manager"
    assert len(set(acl_plan.principals.values())) == len(SERVICES)


def test_acls_plan_prints_the_table_and_json_without_a_broker() -> None:
    runner = CliRunner()
    env = {"ARES_TOPIC_PREFIX": PREFIX, "ARES_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    text = runner.invoke(cli, ["acls", "plan"], env=env)
    assert text.exit_code == 0, text.output
    assert "runtime-manager  User:ares-runtime-manager" in text.output
    assert f"{PREFIX}ares.events.writer-*" in text.output
    done = runner.invoke(cli, ["acls", "plan", "--json", "--service", "producer",
                               "--principal", "producer=User:crm"], env=env)
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    assert document["principals"] == {"producer": "User:crm"}
    assert {a["operation"] for a in document["acls"]} == {"READ", "WRITE"}
    for output, expected in (("markdown", "| producer `User:ares-producer` |"),
                             ("kafka-acls", "acl --allow-principal 'User:ares-producer'")):
        done = runner.invoke(cli, ["acls", "plan", "--format", output], env=env)
        assert done.exit_code == 0, done.output
        assert expected in done.output
    bad = runner.invoke(cli, ["acls", "plan", "--principal", "producer"], env=env)
    assert isinstance(bad.exception, ConfigError)  # exit 2 through run_cli


def test_the_operations_guide_shows_the_plan_as_it_is() -> None:
    """docs/operations.md, "ACLs each service needs", is `ares acls plan --format markdown`
    (prefix P, every feature): regenerate it with that command after changing a need."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    table = markdown(plan_acls(load_topics(Settings(topic_prefix="P"), env={}),
                               features=FEATURES))
    assert table in guide


def test_kafka_acls_commands_hold_every_rule(topics: TopicPlan) -> None:
    acl_plan = plan_acls(topics, services=["runtime-manager"])
    text = kafka_acls_commands(acl_plan)
    assert "--transactional-id 'stg.ares.events.writer-' --resource-pattern-type prefixed " \
           "--operation Write" in text
    operations = sum(line.count("--operation ") for line in text.splitlines()[1:])
    assert operations == len(acl_plan.acls)
