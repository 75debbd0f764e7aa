"""`ares dev up | down | status`: the broker(s) and the database as one environment.

The dev home holds one directory per cluster size, so that switching between one node and
three never meets storage formatted for the other: ``kafka/`` is the single-node broker
(as always), ``kafka-cluster-3/node-{1,2,3}/`` the three-node cluster. Both put their first
node on the same client port (9092), so only one runs at a time: ``up`` of one while the
other runs is an error that says to run ``ares dev down`` first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ares.devenv import kafka as dev_kafka
from ares.devenv import postgres
from ares.devenv.paths import dev_home
from ares.devenv.readiness import Progress
from ares.errors import ConfigError, InfrastructureError

DEFAULT_KAFKA_PORT = 9092
BROKERS_FILE = "kafka-brokers"  # the node count of the last `up`, for `status` and `down`
ENV_FILE = "dev.env"  # the export lines `up` prints, for scripts: `. <home>/dev.env`
CLUSTER_TOPIC_ENVIRONMENT = "cluster"  # topics.yaml's section for three brokers or more
_CLUSTER_DIR = re.compile(r"^kafka-cluster-(\d+)$")


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    name: str
    running: bool
    version: str
    address: str
    pid: int | None
    data_dir: Path
    log_file: Path
    node_id: int | None = None  # a Kafka node's id; None for PostgreSQL
    controller_port: int | None = None


def _port(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a port number (got {raw!r})") from None


def kafka_dir(root: Path, brokers: int) -> Path:
    """Where a cluster of ``brokers`` nodes lives under the dev home."""
    return root / "kafka" if brokers == 1 else root / f"kafka-cluster-{brokers}"


def topic_environment(brokers: int) -> str | None:
    """The topics.yaml environment for a local cluster: RF 3 needs three brokers."""
    return CLUSTER_TOPIC_ENVIRONMENT if brokers >= 3 else None


@dataclass(frozen=True, slots=True)
class DevEnvironment:
    """The local Kafka node(s) and PostgreSQL cluster, rooted at one directory."""

    root: Path
    cluster: dev_kafka.KafkaCluster
    postgres: postgres.PostgresLayout

    @classmethod
    def default(cls, brokers: int | None = None, *, home: Path | None = None,
                base_port: int | None = None) -> DevEnvironment:
        """The environment of ``home`` (default ``ARES_DEV_HOME``, ``paths.dev_home``).

        ``brokers``: the cluster size; None is the size of the last ``up`` of this home
        (one if none). ``base_port`` (default ``ARES_DEV_KAFKA_PORT``, 9092) is the first
        node's client port; the controller port is ``ARES_DEV_KAFKA_CONTROLLER_PORT``, else
        the next one, and each further node takes the next two
        (``KafkaCluster.from_base_port``).
        """
        root = (home.expanduser().resolve() if home is not None else dev_home())
        if brokers is None:
            brokers = last_brokers(root)
        if brokers < 1:
            raise ConfigError(f"--brokers must be at least 1 (got {brokers})")
        port = base_port if base_port is not None else _port("ARES_DEV_KAFKA_PORT",
                                                              DEFAULT_KAFKA_PORT)
        controller = _port("ARES_DEV_KAFKA_CONTROLLER_PORT", port + 1)
        try:
            cluster = dev_kafka.KafkaCluster.from_base_port(kafka_dir(root, brokers), brokers,
                                                        port, controller)
        except ValueError as exc:
            raise ConfigError(f"Kafka ports (ARES_DEV_KAFKA_PORT / --base-port {port}, "
                              f"ARES_DEV_KAFKA_CONTROLLER_PORT {controller}): {exc}") from None
        return cls(
            root=root,
            cluster=cluster,
            postgres=postgres.PostgresLayout(
                root / "postgres", port=_port("ARES_DEV_POSTGRES_PORT", 5432)
            ),
        )

    @property
    def kafka(self) -> dev_kafka.KafkaLayout:
        """The first node: its port is the default bootstrap, its log the broker log."""
        return self.cluster.first

    @property
    def brokers(self) -> int:
        return self.cluster.size

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def topic_environment(self) -> str | None:
        return topic_environment(self.brokers)

    def exports(self) -> dict[str, str]:
        """What a shell needs to use this environment (``up`` prints it)."""
        exports = {"ARES_KAFKA_BOOTSTRAP": self.bootstrap,
                   "ARES_POSTGRES_DSN": self.postgres.dsn}
        if self.topic_environment is not None:
            exports["ARES_TOPIC_ENVIRONMENT"] = self.topic_environment
        return exports

    def up(self, progress: Progress | None = None) -> list[ServiceStatus]:
        """Start what is not running, wait for readiness, return the status (idempotent).

        ``progress`` hears what is being waited for, one line a stage."""
        self.up_kafka(progress)
        if progress is not None:
            progress("waiting for PostgreSQL")
        postgres.start(self.postgres)
        (self.root / ENV_FILE).write_text(
            "".join(f"export {name}={value}\n" for name, value in self.exports().items()))
        return self.status()

    def up_kafka(self, progress: Progress | None = None) -> str:
        """Start the Kafka node(s) and wait until they serve; returns the bootstrap."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._refuse_other_clusters()
        (self.root / BROKERS_FILE).write_text(f"{self.brokers}\n")
        timeout_s = 120.0 if self.brokers == 1 else 180.0
        dev_kafka.start_cluster(self.cluster, dev_kafka.kafka_version(), timeout_s,
                                progress=progress)
        return self.bootstrap

    def up_postgres(self) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        postgres.start(self.postgres)
        return self.postgres.dsn

    def down(self) -> list[str]:
        """Stop every Kafka node of the home (whatever its cluster size) and PostgreSQL;
        returns the names of what was running."""
        stopped = []
        for cluster in self.kafka_clusters():
            for node in dev_kafka.stop_cluster(cluster):
                stopped.append("kafka" if cluster.size == 1 else f"kafka node {node}")
        if postgres.stop(self.postgres):
            stopped.append("postgres")
        return stopped

    def kafka_clusters(self) -> list[dev_kafka.KafkaCluster]:
        """This environment's cluster and every other one found under the home (their
        ports do not matter to find or stop them: the pid files and configs do)."""
        clusters = [self.cluster]
        sizes = {1} if (self.root / "kafka").is_dir() else set()
        if self.root.is_dir():
            sizes |= {int(m.group(1)) for entry in self.root.iterdir()
                      if (m := _CLUSTER_DIR.match(entry.name)) and int(m.group(1)) > 1}
        port = self.kafka.port
        for size in sorted(sizes - {self.brokers}):
            clusters.append(dev_kafka.KafkaCluster.from_base_port(
                kafka_dir(self.root, size), size, port, self.kafka.controller_port))
        return clusters

    def _refuse_other_clusters(self) -> None:
        for other in self.kafka_clusters()[1:]:
            running = {node: pid for node, pid in other.pids().items() if pid is not None}
            if running:
                what = ("the single-node Kafka broker" if other.size == 1
                        else f"the {other.size}-node Kafka cluster")
                raise InfrastructureError(
                    f"{what} of {self.root} is running (pid "
                    f"{', '.join(str(pid) for pid in running.values())}): run `ares dev down` "
                    f"first, then `ares dev up --brokers {self.brokers}` (each size keeps "
                    f"its own data under {other.root.parent})")

    def status(self) -> list[ServiceStatus]:
        """One row per Kafka node, then PostgreSQL."""
        version_file = self.kafka.version_file
        kafka_version = version_file.read_text().strip() if version_file.exists() else "-"
        rows = []
        for node in self.cluster.nodes:
            pid = dev_kafka.running_pid(node)
            name = "kafka" if self.brokers == 1 else f"kafka node {node.node_id}"
            rows.append(ServiceStatus(name, pid is not None, f"Apache Kafka {kafka_version}",
                                      node.bootstrap, pid, node.data_dir, node.log_file,
                                      node.node_id, node.controller_port))
        pg_pid = postgres.running_pid(self.postgres)
        rows.append(ServiceStatus("postgres", pg_pid is not None,
                                  f"PostgreSQL {_safe(postgres.server_version)}",
                                  self.postgres.dsn, pg_pid, self.postgres.data_dir,
                                  self.postgres.log_file))
        return rows


def last_brokers(root: Path) -> int:
    """The cluster size of the last ``up`` of the home at ``root``; 1 if none."""
    try:
        return max(1, int((root / BROKERS_FILE).read_text().strip()))
    except (OSError, ValueError):
        return 1


def _safe(fn: object) -> str:
    try:
        return str(fn())  # type: ignore[operator]
    except Exception:  # status must print even when the binaries are missing
        return "not installed"
