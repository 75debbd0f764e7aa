"""The local Kafka cluster's layout and settings: ports, directories, node properties, the
KRaft quorum, the cluster id every node is formatted with, and what `dev status` reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from ares.config import Settings
from ares.devenv import DevEnvironment
from ares.devenv.environment import BROKERS_FILE, last_brokers
from ares.devenv.kafka import KafkaCluster, KafkaLayout, broker_properties, formatted_cluster_id
from ares.devenv.quorum import (
    METADATA_TOPIC,
    DescribeQuorumResponse_v0,
    DescribeQuorumResponse_v1,
    Quorum,
    UnderReplicated,
    parse_quorum,
    under_replicated,
)
from ares.errors import ConfigError, InfrastructureError
from ares.topics import load_topics


@pytest.fixture(autouse=True)
def _no_dev_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ARES_DEV_HOME", "ARES_DEV_KAFKA_PORT", "ARES_DEV_KAFKA_CONTROLLER_PORT",
                 "ARES_DEV_POSTGRES_PORT"):
        monkeypatch.delenv(name, raising=False)


def test_three_nodes_take_consecutive_port_pairs_and_directories_of_their_own(
        tmp_path: Path) -> None:
    cluster = KafkaCluster.from_base_port(tmp_path, 3, 9092)
    assert [(n.node_id, n.port, n.controller_port) for n in cluster.nodes] == [
        (1, 9092, 9093), (2, 9094, 9095), (3, 9096, 9097)]
    assert [n.root for n in cluster.nodes] == [tmp_path / f"node-{i}" for i in (1, 2, 3)]
    assert len({n.data_dir for n in cluster.nodes}) == 3
    assert cluster.bootstrap == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
    assert {n.quorum_voters for n in cluster.nodes} == {
        "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"}
    assert cluster.first.bootstrap == "127.0.0.1:9092"


def test_one_node_is_the_single_broker_as_before(tmp_path: Path) -> None:
    cluster = KafkaCluster.from_base_port(tmp_path, 1, 9092)
    (node,) = cluster.nodes
    assert node == KafkaLayout(tmp_path, port=9092, controller_port=9093)
    assert node.quorum_voters == "1@127.0.0.1:9093"
    props = broker_properties(node)
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr",
                "share.coordinator.state.topic.replication.factor",
                "share.coordinator.state.topic.min.isr"):
        assert props[key] == "1", key


def test_each_node_of_three_is_broker_and_controller_with_rf_3_internal_topics(
        tmp_path: Path) -> None:
    cluster = KafkaCluster.from_base_port(tmp_path, 3, 29092)
    for node in cluster.nodes:
        props = broker_properties(node)
        assert props["process.roles"] == "broker,controller"
        assert props["node.id"] == str(node.node_id)
        assert props["controller.quorum.voters"] == (
            "1@127.0.0.1:29093,2@127.0.0.1:29095,3@127.0.0.1:29097")
        assert props["listeners"] == (f"PLAINTEXT://127.0.0.1:{node.port},"
                                      f"CONTROLLER://127.0.0.1:{node.controller_port}")
        assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{node.port}"
        assert props["log.dirs"] == str(node.data_dir)
        assert props["offsets.topic.replication.factor"] == "3"
        assert props["transaction.state.log.replication.factor"] == "3"
        assert props["transaction.state.log.min.isr"] == "2"
        assert props["share.coordinator.state.topic.replication.factor"] == "3"
        assert props["share.coordinator.state.topic.min.isr"] == "2"
        assert props["auto.create.topics.enable"] == "false"
    # Overrides still win, per node.
    assert broker_properties(cluster.nodes[1], {"num.io.threads": "2"})["num.io.threads"] == "2"


def test_ports_must_differ_and_exist(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must all differ"):
        KafkaCluster.from_base_port(tmp_path, 3, 9092, controller_base=9094)
    with pytest.raises(ValueError, match="not a TCP port"):
        KafkaCluster.from_base_port(tmp_path, 3, 65532)
    with pytest.raises(ValueError, match="at least one node"):
        KafkaCluster.on_ports(tmp_path, [])


def test_free_ports_give_a_cluster_of_its_own(tmp_path: Path) -> None:
    cluster = KafkaCluster.on_free_ports(tmp_path, 3)
    ports = [p for n in cluster.nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6
    assert all(p not in (9092, 9093) for p in ports)


def test_environment_sizes_live_apart_and_export_the_topic_environment(
        tmp_path: Path) -> None:
    single = DevEnvironment.default(1, home=tmp_path, base_port=29092)
    three = DevEnvironment.default(3, home=tmp_path, base_port=29092)
    assert single.kafka.root == tmp_path / "kafka"
    assert [n.root for n in three.cluster.nodes] == [
        tmp_path / "kafka-cluster-3" / f"node-{i}" for i in (1, 2, 3)]
    # The first node of both is the default address: every default keeps working.
    assert single.kafka.port == three.kafka.port == 29092
    assert "ARES_TOPIC_ENVIRONMENT" not in single.exports()
    assert three.exports() == {
        "ARES_KAFKA_BOOTSTRAP": "127.0.0.1:29092,127.0.0.1:29094,127.0.0.1:29096",
        "ARES_POSTGRES_DSN": "postgresql://ares:ares@127.0.0.1:5432/ares",
        "ARES_TOPIC_ENVIRONMENT": "cluster"}
    # Each sees the other, to refuse starting beside it and to stop it on `down`.
    assert [c.root for c in three.kafka_clusters()] == [tmp_path / "kafka-cluster-3"]
    three.cluster.root.mkdir()
    assert [c.root for c in single.kafka_clusters()] == [tmp_path / "kafka",
                                                         tmp_path / "kafka-cluster-3"]


def test_default_ports_come_from_the_environment(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARES_DEV_HOME", str(tmp_path))
    assert DevEnvironment.default().kafka.bootstrap == "127.0.0.1:9092"
    assert DevEnvironment.default().kafka.controller_port == 9093
    monkeypatch.setenv("ARES_DEV_KAFKA_PORT", "19092")
    assert [(n.port, n.controller_port) for n in DevEnvironment.default(3).cluster.nodes] == [
        (19092, 19093), (19094, 19095), (19096, 19097)]
    monkeypatch.setenv("ARES_DEV_KAFKA_CONTROLLER_PORT", "19094")
    with pytest.raises(ConfigError, match="must all differ"):
        DevEnvironment.default(3)
    monkeypatch.setenv("ARES_DEV_KAFKA_PORT", "x")
    with pytest.raises(ConfigError, match="ARES_DEV_KAFKA_PORT"):
        DevEnvironment.default()


def test_status_and_down_follow_the_size_of_the_last_up(tmp_path: Path) -> None:
    assert last_brokers(tmp_path) == 1
    (tmp_path / BROKERS_FILE).write_text("3\n")
    assert last_brokers(tmp_path) == 3
    assert DevEnvironment.default(home=tmp_path).brokers == 3
    assert DevEnvironment.default(1, home=tmp_path).brokers == 1


def _format(node: KafkaLayout, cluster_id: str) -> None:
    node.data_dir.mkdir(parents=True)
    (node.data_dir / "meta.properties").write_text(
        f"#\nnode.id={node.node_id}\nversion=1\ncluster.id={cluster_id}\n")


def test_every_node_is_formatted_with_one_cluster_id(tmp_path: Path) -> None:
    cluster = KafkaCluster.from_base_port(tmp_path, 3, 29092)
    first = cluster.cluster_id()
    assert not first.startswith("-")
    assert cluster.cluster_id() == first, "a second call must not make a new id"
    assert cluster.cluster_id_file.read_text().strip() == first


def test_a_half_formatted_cluster_keeps_the_id_of_its_formatted_nodes(tmp_path: Path) -> None:
    cluster = KafkaCluster.from_base_port(tmp_path, 3, 29092)
    _format(cluster.nodes[0], "abcdefghijklmnopqrstuv")
    assert formatted_cluster_id(cluster.nodes[0]) == "abcdefghijklmnopqrstuv"
    assert formatted_cluster_id(cluster.nodes[1]) is None
    assert cluster.cluster_id() == "abcdefghijklmnopqrstuv"


def test_nodes_of_different_clusters_are_refused(tmp_path: Path) -> None:
    cluster = KafkaCluster.from_base_port(tmp_path, 3, 29092)
    _format(cluster.nodes[0], "abcdefghijklmnopqrstuv")
    _format(cluster.nodes[2], "zyxwvutsrqponmlkjihgfe")
    with pytest.raises(InfrastructureError, match="different clusters"):
        cluster.cluster_id()


def test_a_single_node_formatted_before_cluster_ids_were_recorded_keeps_its_id(
        tmp_path: Path) -> None:
    cluster = KafkaCluster.from_base_port(tmp_path / "kafka", 1, 9092)
    _format(cluster.first, "oldsinglenodeclusterid")
    assert cluster.cluster_id() == "oldsinglenodeclusterid"


def _replica(node: int, version: int) -> tuple[object, ...]:
    return (node, 100, -1, -1, {}) if version else (node, 100, {})


@pytest.mark.parametrize("response_type", [DescribeQuorumResponse_v0,
                                           DescribeQuorumResponse_v1])
def test_describe_quorum_answers_decode(response_type: type) -> None:
    version = response_type.API_VERSION
    voters = [_replica(n, version) for n in (3, 1, 2)]
    encoded = response_type(
        error_code=0,
        topics=[(METADATA_TOPIC, [(0, 0, 2, 7, 1234, voters, [], {})], {})],
        tags={}).encode()
    decoded = response_type.decode(encoded)
    assert parse_quorum(decoded) == Quorum(leader=2, leader_epoch=7, high_watermark=1234,
                                           voters=(1, 2, 3), observers=())


def test_under_replicated_partitions_are_those_with_fewer_in_sync_replicas() -> None:
    topics = [
        {"topic": "ares.events", "partitions": [
            {"partition": 0, "replicas": [1, 2, 3], "isr": [2, 3, 1]},
            {"partition": 1, "replicas": [2, 3, 1], "isr": [2, 1]}]},
        {"topic": "__consumer_offsets", "partitions": [
            {"partition": 4, "replicas": [3, 1, 2], "isr": [3]}]},
    ]
    assert under_replicated(topics) == (
        UnderReplicated("__consumer_offsets", 4, (3, 1, 2), (3,)),
        UnderReplicated("ares.events", 1, (2, 3, 1), (2, 1)))


def test_the_cluster_topic_environment_is_rf_3_and_min_isr_2() -> None:
    plan = load_topics(Settings(), environment="cluster", env={})
    assert plan.environment == "cluster"
    assert plan.topics
    for spec in plan.topics:
        assert spec.replication_factor == 3, spec.logical
        assert spec.configs["min.insync.replicas"] == "2", spec.logical
    default = load_topics(Settings(), env={})
    assert {spec.replication_factor for spec in default.topics} == {1}
