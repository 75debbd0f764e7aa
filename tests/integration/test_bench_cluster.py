"""``ares bench --cluster 3``'s machinery at tiny sizes: a fresh three-node cluster of the
run's own, benchmark topics with replication factor 3 and min ISR 2, the report saying so,
and nothing left behind, also when the run fails. Shapes and counts, never timings.

The cluster lives on free ports in a temporary directory: the shared broker is not touched.
Without Java or Maven this fails (``private_cluster`` raises): nothing here skips.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from bench import append
from bench.cluster import private_cluster
from bench.harness import bench_plan, bench_settings, bench_topics, topology

from ares.config import Settings
from ares.logs import quiet_aiokafka
from ares.topics import EVENTS
from tests.support.kafka import admin_client


class _Interrupted(Exception):
    """Stands for a failure or Ctrl-C in the middle of a run."""


async def _replication(settings: Settings, topic: str) -> tuple[set[int], str]:
    """Replicas per partition of ``topic``, and its min.insync.replicas."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    with quiet_aiokafka():
        async with admin_client(settings.kafka_bootstrap) as admin:
            (described,) = await admin.describe_topics([topic])
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)])
    (resource,) = responses[0].to_object()["resources"]
    configs = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    return {len(p["replicas"]) for p in described["partitions"]}, configs["min.insync.replicas"]


def _interrupted_run(lines: list[str], seen: dict[str, object]) -> None:
    """Checks inside a cluster run at tiny sizes, then a failure in the middle of it."""
    with private_cluster(Settings(), 3, progress=lines.append) as settings:
        seen["root"] = Path(lines[0].rsplit(" in ", 1)[1])
        assert len(settings.kafka_bootstrap.split(",")) == 3
        assert os.environ["ARES_TOPIC_ENVIRONMENT"] == "cluster"
        assert os.environ["ARES_KAFKA_BOOTSTRAP"] == settings.kafka_bootstrap

        assert asyncio.run(topology(settings)) == {
            "brokers": 3, "replication_factor": 3, "min_insync_replicas": 2, "acks": "all"}
        # The benchmark topics (bench_topics) and the plans of those that start workers
        # (bench_plan) replicate as the cluster environment says.
        scoped = bench_settings(settings)
        assert bench_plan(scoped, 2).topic(EVENTS).replication_factor == 3

        async def created() -> tuple[set[int], str]:
            async with bench_topics(scoped, [scoped.topic("ares.events")], 2) as (topic,):
                return await _replication(scoped, topic)

        assert asyncio.run(created()) == ({3}, "2")

        report = asyncio.run(append.run(settings, events=120, streams=12, rounds=2,
                                        latency_samples=10, partitions=3))
        assert report["ours"]["events"] == report["ceiling"]["events"] == 120
        assert report["ratio"] > 0
        raise _Interrupted


@pytest.mark.timeout(300)
def test_a_cluster_run_measures_on_rf_3_and_stops_its_cluster_even_when_it_fails() -> None:
    lines: list[str] = []
    seen: dict[str, object] = {}
    environment_before = os.environ.get("ARES_TOPIC_ENVIRONMENT")
    with pytest.raises(_Interrupted):
        _interrupted_run(lines, seen)

    root = seen["root"]
    assert isinstance(root, Path)
    assert not root.exists(), "the cluster's directory was left behind"
    assert os.environ.get("ARES_TOPIC_ENVIRONMENT") == environment_before
    assert any(line.startswith("stopping the 3-node Kafka cluster") for line in lines), lines
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _names(int(pid), root)]
    assert left == [], f"processes of the cluster survived: {left}"


def _names(pid: int, root: Path) -> bool:
    try:
        return str(root).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
