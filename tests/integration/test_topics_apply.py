"""``ares topics apply|list`` against the real broker.

Each test works under a prefix of its own and deletes its topics at the end. The cluster is
checked with a bare aiokafka admin client, not with ares.topics, so a bug in our describe
cannot hide a bug in our apply. Most tests shrink the co-partitioned count to 2 through
ARES_TOPIC_PARTITIONS to keep the broker light.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from click.testing import CliRunner, Result

from ares.cli import cli
from ares.config import Settings
from ares.topics import (
    ALERTS,
    EVENTS,
    HEARTBEATS,
    PER_AGENT_TOPICS,
    RefusedChangeError,
    TopicPlan,
    apply_topics,
    delete_topics,
    load_topics,
)

SMALL = {"ARES_TOPIC_PARTITIONS": "2"}
ARES = Path(sys.executable).parent / "ares"
_TOPIC_ENV = ("ARES_TOPICS_FILE", "ARES_TOPIC_ENVIRONMENT", "ARES_TOPIC_PARTITIONS",
              "ARES_TOPIC_REPLICATION_FACTOR", "ARES_TOPIC_PREFIX", "ARES_KAFKA_BOOTSTRAP")


@dataclass(frozen=True)
class Actual:
    partitions: int
    replication_factor: int
    overrides: dict[str, str]


@pytest.fixture
def topic_settings(settings: Settings, unique: str) -> Iterator[Settings]:
    """Settings with a prefix of this test's own; its topics are deleted afterwards."""
    scoped = settings.with_overrides(topic_prefix=f"{settings.topic_prefix}{unique}.")
    yield scoped
    asyncio.run(delete_topics(load_topics(scoped, env={}), scoped))


def plan_for(settings: Settings, **env: str) -> TopicPlan:
    return load_topics(settings, env=env)


def describe(settings: Settings, plan: TopicPlan) -> dict[str, Actual]:
    """The plan's topics that exist, as a bare aiokafka admin client sees them."""

    async def run() -> dict[str, Actual]:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
        await admin.start()
        try:
            wanted = {spec.name: spec.logical for spec in plan.topics}
            metadata = {t["topic"]: t["partitions"] for t in await admin.describe_topics()
                        if t["topic"] in wanted}
            if not metadata:
                return {}
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in metadata])
            overrides = {
                r["resource_name"]: {e["config_names"]: e["config_value"]
                                     for e in r["config_entries"] if e["config_source"] == 1}
                for response in responses for r in response.to_object()["resources"]}
            return {wanted[name]: Actual(len(parts), len(parts[0]["replicas"]), overrides[name])
                    for name, parts in metadata.items()}
        finally:
            await admin.close()

    return asyncio.run(run())


def alter(settings: Settings, plan: TopicPlan, logical: str, overrides: dict[str, str]) -> None:
    """Replace a topic's overrides behind apply's back (legacy AlterConfigs), and wait until
    the broker reports them: its metadata follows the controller a moment later."""

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
        await admin.start()
        try:
            await admin.alter_configs([ConfigResource(
                ConfigResourceType.TOPIC, plan.name(logical), overrides)])
        finally:
            await admin.close()

    asyncio.run(run())
    deadline = time.monotonic() + 10
    while describe(settings, plan)[logical].overrides != overrides:
        assert time.monotonic() < deadline, f"{logical}: overrides not visible after 10s"
        time.sleep(0.1)


def invoke(settings: Settings, *args: str, **env: str) -> Result:
    """The CLI in-process, with this test's bootstrap and prefix and no stray ARES_TOPIC_*."""
    clean: dict[str, str | None] = dict.fromkeys(_TOPIC_ENV)
    clean.update(env)
    return CliRunner().invoke(
        cli, ["--bootstrap-servers", settings.kafka_bootstrap,
              "--topic-prefix", settings.topic_prefix, *args], env=clean)


def run_ares(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed ``ares`` script: the real exit-code mapping of run_cli."""
    base = {k: v for k, v in os.environ.items() if k not in _TOPIC_ENV}
    base.update({"ARES_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
                 "ARES_TOPIC_PREFIX": settings.topic_prefix, "COLUMNS": "200", **env})
    return subprocess.run([str(ARES), *args], env=base, capture_output=True, text=True,
                          timeout=120, check=False)


def test_apply_creates_every_topic_with_its_configs(topic_settings: Settings) -> None:
    plan = plan_for(topic_settings)
    changes = asyncio.run(apply_topics(plan, topic_settings))
    assert all(c.create for c in changes.changes)
    actual = describe(topic_settings, plan)
    assert set(actual) == {spec.logical for spec in plan.topics}
    for spec in plan.topics:
        have = actual[spec.logical]
        assert (have.partitions, have.replication_factor) == (spec.partitions,
                                                              spec.replication_factor)
        assert have.overrides == dict(spec.configs), spec.logical
    assert {actual[name].partitions for name in PER_AGENT_TOPICS} == {plan.partitions}
    assert actual[EVENTS].overrides["retention.ms"] == "-1"
    assert actual["ares.summaries"].overrides["cleanup.policy"] == "compact,delete"


def test_reapply_is_a_noop_that_says_unchanged(topic_settings: Settings) -> None:
    count = len(plan_for(topic_settings, **SMALL).topics)  # every topic of topics.yaml
    first = invoke(topic_settings, "topics", "apply", **SMALL)
    assert first.exit_code == 0, first.output
    assert first.output.count("created ") == count
    second = invoke(topic_settings, "topics", "apply", **SMALL)
    assert second.exit_code == 0, second.output
    assert second.output.count("unchanged ") == count
    assert f"{count} topics: 0 created, 0 updated, {count} unchanged" in second.output


def test_dry_run_and_list_change_nothing(topic_settings: Settings) -> None:
    plan = plan_for(topic_settings, **SMALL)
    dry = invoke(topic_settings, "topics", "apply", "--dry-run", **SMALL)
    assert dry.exit_code == 0, dry.output
    assert dry.output.count("would create") == len(plan.topics)
    listed = invoke(topic_settings, "topics", "list", "--json", **SMALL)
    assert listed.exit_code == 0, listed.output
    report = json.loads(listed.output)
    assert report["drift"] is True
    assert {t["status"] for t in report["topics"]} == {"missing"}
    assert describe(topic_settings, plan) == {}


def test_config_drift_is_listed_then_fixed_keeping_foreign_overrides(
    topic_settings: Settings,
) -> None:
    plan = plan_for(topic_settings, **SMALL)
    asyncio.run(apply_topics(plan, topic_settings))
    heartbeats = plan.topic(HEARTBEATS)
    drifted = {**heartbeats.configs, "retention.ms": "86400000", "segment.bytes": "104857600"}
    del drifted["cleanup.policy"]
    alter(topic_settings, plan, HEARTBEATS, drifted)

    report = json.loads(invoke(topic_settings, "topics", "list", "--json", **SMALL).output)
    entry = next(t for t in report["topics"] if t["topic"] == HEARTBEATS)
    assert entry["status"] == "drift"
    assert {d["field"]: d["actual"] for d in entry["differences"]} == {
        "retention.ms": "86400000", "cleanup.policy": None}
    assert entry["unmanaged_configs"] == {"segment.bytes": "104857600"}
    assert all(t["status"] == "ok" for t in report["topics"] if t["topic"] != HEARTBEATS)

    fixed = invoke(topic_settings, "topics", "apply", **SMALL)
    assert fixed.exit_code == 0, fixed.output
    assert "retention.ms: 86400000 → 3600000" in fixed.output
    assert f"1 updated, {len(plan.topics) - 1} unchanged" in fixed.output
    have = describe(topic_settings, plan)[HEARTBEATS].overrides
    assert have == {**heartbeats.configs, "segment.bytes": "104857600"}

    pruned = invoke(topic_settings, "topics", "apply", "--prune", **SMALL)
    assert "segment.bytes: 104857600 → (removed)" in pruned.output
    assert describe(topic_settings, plan)[HEARTBEATS].overrides == dict(heartbeats.configs)
    listed = invoke(topic_settings, "topics", "list", **SMALL)
    assert f"{len(plan.topics)} topics, 0 missing or drifted" in listed.output


def test_partition_decrease_is_refused_and_nothing_is_changed(topic_settings: Settings) -> None:
    plan = plan_for(topic_settings, ARES_TOPIC_PARTITIONS="3")
    asyncio.run(apply_topics(plan, topic_settings))
    alerts = plan.topic(ALERTS)
    alter(topic_settings, plan, ALERTS, {**alerts.configs, "retention.ms": "1000"})

    smaller = plan_for(topic_settings, **SMALL)
    with pytest.raises(RefusedChangeError) as info:
        asyncio.run(apply_topics(smaller, topic_settings))
    assert f"{plan.name(EVENTS)}: partition count cannot decrease (3 → 2)" in info.value.refusals

    done = run_ares(topic_settings, "topics", "apply", ARES_TOPIC_PARTITIONS="2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "partition count cannot decrease (3 → 2)" in done.stderr
    assert "nothing was changed" in done.stderr
    actual = describe(topic_settings, plan)
    assert {actual[name].partitions for name in PER_AGENT_TOPICS} == {3}
    assert actual[ALERTS].overrides["retention.ms"] == "1000"  # the drift was not fixed either


def test_copartitioned_topics_grow_only_together_and_with_consent(
    topic_settings: Settings,
) -> None:
    plan = plan_for(topic_settings, **SMALL)
    asyncio.run(apply_topics(plan, topic_settings))

    refused = run_ares(topic_settings, "topics", "apply", ARES_TOPIC_PARTITIONS="3")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "--allow-repartition" in refused.stderr
    assert {describe(topic_settings, plan)[n].partitions for n in PER_AGENT_TOPICS} == {2}

    grown = run_ares(topic_settings, "topics", "apply", "--allow-repartition",
                     ARES_TOPIC_PARTITIONS="3")
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert "key → partition mapping" in grown.stderr
    actual = describe(topic_settings, plan)
    assert {actual[name].partitions for name in PER_AGENT_TOPICS} == {3}
    assert actual[ALERTS].partitions == 3  # its own count, untouched


def test_replication_factor_above_the_broker_count_is_refused(topic_settings: Settings) -> None:
    done = run_ares(topic_settings, "topics", "apply", ARES_TOPIC_REPLICATION_FACTOR="3",
                    ARES_TOPIC_PARTITIONS="2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "replication factor 3 exceeds the 1 broker(s)" in done.stderr
    assert describe(topic_settings, plan_for(topic_settings)) == {}


def test_unreachable_broker_exits_4_and_says_what_to_do(topic_settings: Settings) -> None:
    for command in (["topics", "apply"], ["topics", "list"]):
        # The retry budget shortened: what is checked is the exit and the advice.
        done = run_ares(topic_settings, *command, ARES_KAFKA_BOOTSTRAP="127.0.0.1:1",
                        ARES_RETRY_TIMEOUT_S="1")
        assert done.returncode == 4, done.stdout + done.stderr
        assert "ares dev up" in done.stderr
        assert "ARES_KAFKA_BOOTSTRAP" in done.stderr


def test_invalid_topics_file_exits_2_naming_topic_and_key(topic_settings: Settings,
                                                          tmp_path: Path) -> None:
    bad = tmp_path / "topics.yaml"
    text = (Path(__file__).resolve().parents[2] / "topics.yaml").read_text()
    bad.write_text(text.replace("      retention.ms: 7d", "      retention.msx: 7d"))
    done = run_ares(topic_settings, "topics", "apply", "--file", str(bad))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "topic 'ares.commands'" in done.stderr
    assert "retention.msx" in done.stderr
    unparsable = tmp_path / "broken.yaml"
    unparsable.write_text("version: 1\n  topics: [\n")
    done = run_ares(topic_settings, "topics", "list", "--file", str(unparsable))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "invalid YAML" in done.stderr
