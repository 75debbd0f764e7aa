"""``ares dev up --brokers 3``: a three-node KRaft cluster, as a user runs it.

Like ``test_devenv.py`` this never touches the default environment (127.0.0.1:9092/9093 and
PostgreSQL on 5432, which the rest of the suite shares): the cluster lives in a temporary
``ARES_DEV_HOME`` on free ports (``--base-port``: six consecutive ones) and is driven through
the real command line, ``python -m ares``, from outside the repository. One cluster start for
the whole module; the tests run in file order and the last one brings it down. Nothing here
skips: without Java or Maven the fixture fails and says what to install.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from ares.config import Settings
from ares.devenv import kafka as dev_kafka
from ares.devenv.process import pid_alive, tail
from ares.errors import InfrastructureError
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.logs import quiet_aiokafka
from ares.topics import EVENTS, load_topics

NODES = 3
CLI_TIMEOUT_S = 400.0
# Where the default environment is: never inherited (ARES_DEV_PG_BINDIR and the jar cache are).
_DEV_VARIABLES = frozenset({"ARES_DEV_HOME", "ARES_DEV_KAFKA_PORT",
                            "ARES_DEV_KAFKA_CONTROLLER_PORT", "ARES_DEV_POSTGRES_PORT"})
LOCALHOST = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1 in /proc/net/tcp*


def _free_run(count: int) -> int:
    """The first of ``count`` consecutive ports that are all free right now."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError(f"no {count} consecutive free ports on 127.0.0.1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _traversable_base() -> Path:
    """As root, PostgreSQL runs as ``postgres`` and must reach the home: /var/tmp."""
    return Path("/var/tmp") if os.geteuid() == 0 else Path(tempfile.gettempdir())


@dataclass(frozen=True, slots=True)
class ClusterEnv:
    home: Path
    base_port: int
    postgres_port: int

    @property
    def cluster(self) -> dev_kafka.KafkaCluster:
        return dev_kafka.KafkaCluster.from_base_port(self.home / "kafka-cluster-3", NODES,
                                                     self.base_port)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + 2 * i}" for i in range(NODES))

    def environ(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in _DEV_VARIABLES and not k.startswith(("ARES_KAFKA_", "ARES_TOPIC"))}
        env.update({"ARES_DEV_HOME": str(self.home),
                    "ARES_DEV_POSTGRES_PORT": str(self.postgres_port),
                    "COLUMNS": "200"})
        env.update(extra)
        return env

    def ares(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """``python -m ares <args>`` against this environment, from outside the repo."""
        return subprocess.run([sys.executable, "-m", "ares", *args],
                              env=self.environ(**extra), cwd=self.home, capture_output=True,
                              text=True, timeout=CLI_TIMEOUT_S, check=False)

    def dev(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.ares("dev", command, "--base-port", str(self.base_port), *args)

    def logs(self) -> str:
        return "".join(f"\n--- tail of {node.log_file} ---\n{tail(node.log_file, 40)}"
                       f"{tail(node.out_file, 10)}" for node in self.cluster.nodes)


def _expect(result: subprocess.CompletedProcess[str], code: int, what: str) -> str:
    assert result.returncode == code, (
        f"`ares {what}` exited {result.returncode}, expected {code}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result.stdout


def _processes_in(home: Path) -> set[int]:
    """Live processes whose command line names ``home`` (every node's JVM does)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if state != "Z" and (str(home) in cmdline or cwd.startswith(str(home) + os.sep)):
            found.add(int(entry.name))
    return found


def _listening(port: int) -> set[str]:
    addresses: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            next(handle)
            for line in handle:
                fields = line.split()
                address, _, hex_port = fields[1].partition(":")
                if fields[3] == "0A" and int(hex_port, 16) == port:
                    addresses.add(address)
    return addresses


@pytest.fixture(scope="module")
def cluster_env() -> Iterator[ClusterEnv]:
    try:
        dev_kafka.require_tools()
    except InfrastructureError as exc:
        pytest.fail(str(exc), pytrace=False)
    home = Path(tempfile.mkdtemp(prefix="ares-dev-cluster-test-", dir=_traversable_base()))
    env = ClusterEnv(home, _free_run(2 * NODES), _free_port())
    try:
        up = env.dev("up", "--brokers", str(NODES))
        if up.returncode != 0:
            pytest.fail(f"`ares dev up --brokers 3` exited {up.returncode}:\n{up.stdout}\n"
                        f"{up.stderr}{env.logs()}", pytrace=False)
        (home / "up.out").write_text(up.stdout)
        yield env
    finally:
        env.dev("down")
        for pid in _processes_in(home):  # last resort after a failed `dev down`
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"cluster-{uuid.uuid4().hex[:8]}."


def _status(env: ClusterEnv, code: int = 0) -> dict[str, Any]:
    done = env.dev("status", "--json")
    return dict(json.loads(_expect(done, code, "dev status --json")))


async def _describe(bootstrap: str, topics: list[str]) -> dict[str, list[dict[str, Any]]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    with quiet_aiokafka():
        await admin.start()
        try:
            found = await admin.describe_topics(topics)
        finally:
            await admin.close()
    return {topic["topic"]: topic["partitions"] for topic in found}


async def _broker_config(bootstrap: str, node: int) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    with quiet_aiokafka():
        await admin.start()
        try:
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, str(node))])
        finally:
            await admin.close()
    (resource,) = responses[0].to_object()["resources"]
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


def test_up_prints_the_cluster_bootstrap_and_topic_environment(cluster_env: ClusterEnv) -> None:
    up = (cluster_env.home / "up.out").read_text()
    assert f"export ARES_KAFKA_BOOTSTRAP={cluster_env.bootstrap}" in up
    assert "export ARES_TOPIC_ENVIRONMENT=cluster" in up
    assert (f"export ARES_POSTGRES_DSN=postgresql://ares:ares@127.0.0.1:"
            f"{cluster_env.postgres_port}/ares") in up
    # The same lines for scripts: `. $ARES_DEV_HOME/dev.env`.
    saved = (cluster_env.home / "dev.env").read_text()
    assert f"export ARES_KAFKA_BOOTSTRAP={cluster_env.bootstrap}\n" in saved
    assert "export ARES_TOPIC_ENVIRONMENT=cluster\n" in saved
    # Each node has its own directory, its own two ports, on 127.0.0.1 only.
    for node in cluster_env.cluster.nodes:
        assert (node.data_dir / "meta.properties").is_file()
        for port in (node.port, node.controller_port):
            addresses = _listening(port)
            assert addresses, f"nothing listens on port {port} (node {node.node_id})"
            assert addresses <= LOCALHOST, f"port {port} listens beyond 127.0.0.1: {addresses}"
    assert not (cluster_env.home / "kafka").exists(), "the single-node directory was made"


def test_internal_topics_have_three_replicas_and_min_isr_two(cluster_env: ClusterEnv) -> None:
    internal = asyncio.run(_describe(cluster_env.bootstrap,
                                     ["__consumer_offsets", "__transaction_state"]))
    for topic, partitions in internal.items():
        assert partitions, f"{topic} has no partitions"
        assert {len(p["replicas"]) for p in partitions} == {3}, topic
    config = asyncio.run(_broker_config(cluster_env.bootstrap, 2))
    assert config["offsets.topic.replication.factor"] == "3"
    assert config["transaction.state.log.replication.factor"] == "3"
    assert config["transaction.state.log.min.isr"] == "2"
    assert config["controller.quorum.voters"] == ",".join(
        f"{i + 1}@127.0.0.1:{cluster_env.base_port + 2 * i + 1}" for i in range(NODES))


def test_topics_apply_takes_the_cluster_environment(cluster_env: ClusterEnv,
                                                    prefix: str) -> None:
    # What a user does after `eval` of the export lines: no --environment flag.
    exports = {"ARES_KAFKA_BOOTSTRAP": cluster_env.bootstrap,
               "ARES_TOPIC_ENVIRONMENT": "cluster", "ARES_TOPIC_PREFIX": prefix}
    _expect(cluster_env.ares("topics", "apply", **exports), 0, "topics apply")
    listed = json.loads(_expect(cluster_env.ares("topics", "list", "--json", **exports), 0,
                                "topics list --json"))
    assert listed["environment"] == "cluster"
    assert listed["topics"], listed
    for topic in listed["topics"]:
        assert topic["desired"]["replication_factor"] == 3, topic
        assert topic["actual"]["replication_factor"] == 3, topic
        assert topic["desired"]["configs"]["min.insync.replicas"] == "2", topic
        assert topic["actual"]["configs"]["min.insync.replicas"] == "2", topic


def test_status_shows_three_nodes_a_quorum_and_no_under_replicated_partition(
        cluster_env: ClusterEnv) -> None:
    status = _status(cluster_env)
    kafka = status["kafka"]
    assert kafka["brokers"] == NODES
    assert kafka["topic_environment"] == "cluster"
    assert kafka["error"] is None
    nodes = kafka["nodes"]
    assert [n["id"] for n in nodes] == [1, 2, 3]
    assert all(n["alive"] for n in nodes), nodes
    assert [n["port"] for n in nodes] == [cluster_env.base_port + 2 * i for i in range(NODES)]
    for node, layout in zip(nodes, cluster_env.cluster.nodes, strict=True):
        assert node["pid"] == int(layout.pid_file.read_text().split()[0])
        assert pid_alive(node["pid"])
    assert kafka["registered_brokers"] == [1, 2, 3]
    quorum = kafka["quorum"]
    assert quorum["voters"] == [1, 2, 3]
    assert quorum["leader"] in (1, 2, 3)
    # Right after `topics apply` every new partition starts with its full replica set in
    # sync; internal topics too.
    assert kafka["under_replicated"] == []
    assert status["postgres"]["running"]

    text = _expect(cluster_env.dev("status"), 0, "dev status")
    assert text.count("running") == NODES + 1
    assert "voters 1, 2, 3" in text
    assert "under-replicated  0" in text


def test_a_transactional_append_on_rf_3_and_min_isr_2(cluster_env: ClusterEnv,
                                                      prefix: str) -> None:
    settings = Settings(kafka_bootstrap=cluster_env.bootstrap, topic_prefix=prefix)
    plan = load_topics(settings, environment="cluster")
    events = next(spec for spec in plan.topics if spec.logical == EVENTS)
    assert (events.replication_factor, events.configs["min.insync.replicas"]) == (3, "2")

    async def append() -> list[int]:
        stream = f"agent-{uuid.uuid4().hex[:12]}"
        with quiet_aiokafka():
            store = await KafkaEventStore.open(settings, topic=plan.name(EVENTS))
            try:
                new = [NewEvent(type="cluster.tested", module="test", payload={"n": i})
                       for i in range(3)]
                assert await store.append(stream, new, expected_version=0) == 3
                read = await store.read(stream)
            finally:
                await store.close()
        return [event.version for event in read]

    assert asyncio.run(append()) == [1, 2, 3]


def test_the_demo_keeps_every_promise_on_the_cluster(cluster_env: ClusterEnv) -> None:
    """`ares dev up --brokers 3` then `ares demo`, with the environment `up` exported
    (ARES_TOPIC_ENVIRONMENT=cluster: every topic RF 3 / min ISR 2); afterwards no partition
    is under-replicated."""
    exported = dict(line.removeprefix("export ").split("=", 1) for line in
                    (cluster_env.home / "dev.env").read_text().splitlines()
                    if line.startswith("export "))
    demo = cluster_env.home / "demo"
    # the demo's own step length: each kill lands mid-task (a miss is a broken promise)
    done = cluster_env.ares("demo", "--agents", "6", "--chats", "1", "--steps", "8",
                            "--step-ms", "250", "--json", "--workdir", str(demo), **exported)
    report = json.loads(_expect(done, 0, "demo --json"))
    assert report["promises_kept"] is True, report["broken_promises"]
    assert report["emails_sent_twice"] == report["steps_executed_twice"] == []
    assert any(fault.startswith("SIGKILL runtime-manager") for fault in report["faults"])
    assert "worker_lost" in {r["cause"] for r in report["resurrections"]}
    events = asyncio.run(_describe(cluster_env.bootstrap, [
        name for name in _topic_names(cluster_env.bootstrap) if name.endswith("ares.events")]))
    assert events, "the demo's events topic is not on the cluster"
    assert all(len(p["replicas"]) == 3 for ps in events.values() for p in ps), events
    assert _status(cluster_env)["kafka"]["under_replicated"] == []


def _topic_names(bootstrap: str) -> list[str]:
    async def names() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        with quiet_aiokafka():
            await admin.start()
            try:
                return list(await admin.list_topics())
            finally:
                await admin.close()
    return asyncio.run(names())


def test_a_single_node_up_is_refused_while_the_cluster_runs(cluster_env: ClusterEnv) -> None:
    pids = [int(node.pid_file.read_text().split()[0]) for node in cluster_env.cluster.nodes]
    refused = cluster_env.dev("up")
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "3-node Kafka cluster" in refused.stderr
    assert "ares dev down" in refused.stderr
    # Nothing was formatted for one node, and the cluster runs on untouched.
    assert not (cluster_env.home / "kafka" / "data").exists()
    assert all(pid_alive(pid) for pid in pids)
    status = _status(cluster_env)
    assert [n["pid"] for n in status["kafka"]["nodes"]] == pids


def test_down_stops_every_node(cluster_env: ClusterEnv) -> None:
    pids = [int(node.pid_file.read_text().split()[0]) for node in cluster_env.cluster.nodes]
    assert _processes_in(cluster_env.home) >= set(pids), "the scan cannot see the nodes"
    down = _expect(cluster_env.dev("down"), 0, "dev down")
    for node in range(1, NODES + 1):
        assert f"kafka node {node}" in down
    assert "postgres" in down
    assert not any(pid_alive(pid) for pid in pids)
    assert _processes_in(cluster_env.home) == set(), "processes survived `dev down`"
    status = _status(cluster_env, code=1)
    assert [n["alive"] for n in status["kafka"]["nodes"]] == [False] * NODES
    assert status["kafka"]["quorum"] is None
