"""Apache Kafka in KRaft combined mode from Maven Central jars: one node, or a cluster.

Every node is a ``KafkaLayout`` (its own directory, client port and controller port) and
one JVM that is both broker and KRaft controller; a ``KafkaCluster`` is the nodes of one
quorum. The single-node broker of ``ares dev up`` is the one-node case of the same code.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ares.devenv import process, readiness
from ares.devenv.paths import cache_dir
from ares.errors import InfrastructureError
from ares.tasks import wait_for

# The newest Kafka on which every broker feature ares relies on passes with aiokafka
# (transactions, fencing, read_committed, static membership): see docs/development.md.
DEFAULT_KAFKA_VERSION = "4.4.0"
# Per node: three nodes of a local cluster take 3 GiB of heap at most on the 24 GiB box.
HEAP = "-Xmx1g"
INITIAL_HEAP = "-Xms256m"
HOST = "127.0.0.1"
CLUSTER_ID_FILE = "cluster.id"


@dataclass(frozen=True, slots=True)
class KafkaLayout:
    """Files and ports of one KRaft node (broker and controller in one JVM).

    ``voters`` lists every voter of the quorum as (node id, controller port); empty means
    a quorum of this node alone, the single-node broker.
    """

    root: Path
    port: int
    controller_port: int
    node_id: int = 1
    voters: tuple[tuple[int, int], ...] = ()

    @property
    def quorum(self) -> tuple[tuple[int, int], ...]:
        return self.voters or ((self.node_id, self.controller_port),)

    @property
    def quorum_voters(self) -> str:
        """``controller.quorum.voters``: a static quorum, so ``format`` needs no
        ``--standalone`` nor ``--initial-controllers``."""
        return ",".join(f"{node}@{HOST}:{port}" for node, port in self.quorum)

    @property
    def cluster_size(self) -> int:
        return len(self.quorum)

    @property
    def internal_replication(self) -> tuple[int, int]:
        """(replication factor, min ISR) of the internal topics (``__consumer_offsets``,
        ``__transaction_state``, share-group state): 3 and 2 from three nodes on, so that
        one node down loses no coordinator state; 1 and 1 on one node, where more replicas
        cannot exist and groups and transactions would otherwise never become available."""
        replicas = min(self.cluster_size, 3)
        return replicas, 2 if replicas >= 3 else 1

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def config_file(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j_file(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def log_file(self) -> Path:
        return self.root / "broker.log"

    @property
    def pid_file(self) -> Path:
        return self.root / "broker.pid"

    @property
    def version_file(self) -> Path:
        return self.root / "version"

    @property
    def out_file(self) -> Path:
        return self.root / "broker.out"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass(frozen=True, slots=True)
class KafkaCluster:
    """The nodes of one KRaft quorum on 127.0.0.1, each in a directory of its own.

    One node lives directly in ``root`` (the layout of the single-node broker, unchanged);
    several live in ``root/node-<id>``, with the cluster id they were formatted with in
    ``root/cluster.id``, so that a node formatted later joins the same cluster.
    """

    root: Path
    nodes: tuple[KafkaLayout, ...]

    @classmethod
    def single(cls, layout: KafkaLayout) -> KafkaCluster:
        return cls(layout.root, (layout,))

    @classmethod
    def on_ports(cls, root: Path, ports: Sequence[tuple[int, int]]) -> KafkaCluster:
        """Node ``i`` (from 1) gets ``ports[i - 1]``: (client port, controller port)."""
        if not ports:
            raise ValueError("a Kafka cluster needs at least one node")
        flat = [port for pair in ports for port in pair]
        if len(set(flat)) != len(flat):
            raise ValueError(f"the ports of a Kafka cluster must all differ: {flat}")
        if any(not 0 < port < 65536 for port in flat):
            raise ValueError(f"not a TCP port: {[p for p in flat if not 0 < p < 65536]}")
        if len(ports) == 1:
            return cls.single(KafkaLayout(root, port=ports[0][0], controller_port=ports[0][1]))
        voters = tuple((node, controller) for node, (_, controller) in
                       enumerate(ports, start=1))
        return cls(root, tuple(
            KafkaLayout(root / f"node-{node}", port=port, controller_port=controller,
                        node_id=node, voters=voters)
            for node, (port, controller) in enumerate(ports, start=1)))

    @classmethod
    def from_base_port(cls, root: Path, nodes: int, base_port: int,
                       controller_base: int | None = None) -> KafkaCluster:
        """Node ``i`` listens on ``base_port + 2(i-1)``, its controller on
        ``controller_base + 2(i-1)`` (default ``base_port + 1``): 9092/9093, 9094/9095,
        9096/9097 for three nodes, and 9092/9093 for one, as before."""
        controller_base = base_port + 1 if controller_base is None else controller_base
        return cls.on_ports(root, [(base_port + 2 * i, controller_base + 2 * i)
                                   for i in range(nodes)])

    @classmethod
    def on_free_ports(cls, root: Path, nodes: int) -> KafkaCluster:
        """``nodes`` nodes on ports the kernel hands out as free right now: a cluster of
        its own for a test or a chaos run, beside any other on this machine."""
        with contextlib.ExitStack() as stack:
            sockets = [stack.enter_context(socket.socket()) for _ in range(2 * nodes)]
            for sock in sockets:
                sock.bind((HOST, 0))
            ports = [sock.getsockname()[1] for sock in sockets]
        return cls.on_ports(root, list(zip(ports[::2], ports[1::2], strict=True)))

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def first(self) -> KafkaLayout:
        return self.nodes[0]

    @property
    def bootstrap(self) -> str:
        """Every node's client address: a client reaches the cluster with any one up."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def cluster_id_file(self) -> Path:
        return self.root / CLUSTER_ID_FILE

    def node(self, node_id: int) -> KafkaLayout:
        for layout in self.nodes:
            if layout.node_id == node_id:
                return layout
        raise KeyError(node_id)

    def pids(self) -> dict[int, int | None]:
        """Node id -> pid of its running broker, or None."""
        return {node.node_id: running_pid(node) for node in self.nodes}

    def running(self) -> bool:
        return any(pid is not None for pid in self.pids().values())

    def cluster_id(self) -> str:
        """The id every node is formatted with: the one on disk, else a new one.

        Nodes formatted before (a single-node home from an older release has no
        ``cluster.id`` file) decide it; nodes that disagree are an error that names them,
        never a cluster of strangers.
        """
        formatted = {node.node_id: found for node in self.nodes
                     if (found := formatted_cluster_id(node)) is not None}
        recorded = (self.cluster_id_file.read_text().strip()
                    if self.cluster_id_file.exists() else None)
        ids = set(formatted.values()) | ({recorded} if recorded else set())
        if len(ids) > 1:
            raise InfrastructureError(
                f"the Kafka nodes under {self.root} belong to different clusters "
                f"({', '.join(f'node {n}: {c}' for n, c in sorted(formatted.items()))}; "
                f"{self.cluster_id_file.name}: {recorded or '-'}): stop them and remove "
                f"{self.root} to start afresh")
        cluster_id = ids.pop() if ids else _cluster_id()
        if recorded != cluster_id:
            self.root.mkdir(parents=True, exist_ok=True)
            self.cluster_id_file.write_text(f"{cluster_id}\n")
        return cluster_id


def formatted_cluster_id(layout: KafkaLayout) -> str | None:
    """The ``cluster.id`` in a formatted node's ``meta.properties``, else None."""
    try:
        text = (layout.data_dir / "meta.properties").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id":
            return value.strip()
    return None


def kafka_version() -> str:
    return os.environ.get("ARES_DEV_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)


def require_tools() -> tuple[str, str]:
    """Paths of java and mvn, or an error that says exactly what to install."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    if java is None or mvn is None:
        missing = [name for name, path in (("java", java), ("mvn", mvn)) if path is None]
        raise InfrastructureError(
            f"{' and '.join(missing)} not found on PATH: the local Kafka broker needs a Java 17+ "
            "runtime and Apache Maven (Debian: apt-get install openjdk-17-jre-headless maven)"
        )
    return java, mvn


def resolve_classpath(version: str) -> Path:
    """Resolve the broker jars through Maven into the cache, once per version.

    kafka-tools stays off this classpath: it drags in connect-runtime and a second logging
    binding (``ares.devenv.kafka_tools`` resolves it apart). Maven's own repository (~/.m2)
    caches the downloads across versions.
    """
    return maven_classpath("broker-pom.xml", f"kafka-{version}", version,
                           f"org.apache.kafka:kafka_2.13:{version}")


def maven_classpath(template: str, name: str, version: str, artifact: str) -> Path:
    """The jars ``templates/<template>`` resolves for ``version`` (``-Dkafka.version``),
    copied once into ``<cache>/<name>/libs``; ``artifact`` names it in the error."""
    _, mvn = require_tools()
    libs = cache_dir() / name / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    pom = resources.files("ares.devenv") / "templates" / template
    with resources.as_file(pom) as pom_path:
        print(f"resolving {artifact} from Maven Central into {libs} ...", file=sys.stderr)
        result = subprocess.run(
            [mvn, "-B", "-q", "-f", str(pom_path), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={libs}",
             f"-Dkafka.version={version}"],
            capture_output=True, text=True, check=False,
        )
    if result.returncode != 0:
        raise InfrastructureError(
            f"Maven could not resolve {artifact}:\n{(result.stdout + result.stderr)[-3000:]}"
        )
    marker.write_text(version)
    return libs


def _cluster_id() -> str:
    """A random KRaft cluster id (base64url of a UUID). Never one that starts with "-",
    as Kafka's own ``Uuid.randomUuid`` does: ``kafka-storage format -t -abc...`` would read
    the id as an option (1 draw in 64; found by CI)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def broker_properties(layout: KafkaLayout,
                      overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The node's ``server.properties``: KRaft combined mode sized for a 2-core box.

    ``overrides`` (opt-in, default none) replaces or adds broker properties: extra listeners
    for the chaos suite's proxies, a SASL_SSL listener with an authorizer for the security
    tests (``ares.devenv.security``).
    """
    replicas, min_isr = layout.internal_replication
    props = {
        "process.roles": "broker,controller",
        "node.id": str(layout.node_id),
        "controller.quorum.voters": layout.quorum_voters,
        "listeners": (
            f"PLAINTEXT://{HOST}:{layout.port},CONTROLLER://{HOST}:{layout.controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{HOST}:{layout.port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(layout.data_dir),
        "num.partitions": "1",
        # Topics come from topics.yaml (`ares topics apply`), never from a typo.
        "auto.create.topics.enable": "false",
        # Internal topics: RF 3 / min ISR 2 on a cluster; on one node they cannot have more
        # replicas, and without these groups and transactions never become available.
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "group.initial.rebalance.delay.ms": "0",
        # Fast failover tests: allow short consumer session timeouts.
        "group.min.session.timeout.ms": "1000",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "log.retention.check.interval.ms": "30000",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }
    props.update(overrides or {})
    return props


def write_config(layout: KafkaLayout, overrides: Mapping[str, str] | None = None) -> None:
    """Write the node's ``server.properties`` (``broker_properties``) and log4j2 config."""
    layout.root.mkdir(parents=True, exist_ok=True)
    props = broker_properties(layout, overrides)
    layout.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    layout.log4j_file.write_text(
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {layout.log_file}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
        "logger.kafka.name = kafka\nlogger.kafka.level = INFO\n"
        "logger.state.name = state.change.logger\nlogger.state.level = WARN\n"
    )


def _java_command(libs: Path, layout: KafkaLayout, main: str, *args: str) -> list[str]:
    java, _ = require_tools()
    return [
        java, HEAP, INITIAL_HEAP, "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={layout.log4j_file}",
        f"-Dkafka.logs.dir={layout.root}",
        "-cp", f"{libs}/*", main, *args,
    ]


def format_storage(libs: Path, layout: KafkaLayout, cluster_id: str | None = None) -> None:
    """Format the node's storage once (``cluster_id``: every node of a cluster shares it)."""
    if (layout.data_dir / "meta.properties").exists():
        return
    result = subprocess.run(
        _java_command(libs, layout, "kafka.tools.StorageTool", "format", "-t",
                      cluster_id or _cluster_id(),
                      "-c", str(layout.config_file), "--ignore-formatted"),
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise InfrastructureError(
            f"formatting Kafka storage of {layout.data_dir} failed:\n"
            f"{(result.stdout + result.stderr)[-3000:]}"
        )


def running_pid(layout: KafkaLayout) -> int | None:
    # Our broker's command line names its config file: a recycled pid does not.
    return process.read_pid(layout.pid_file, expect=str(layout.config_file))


def start(layout: KafkaLayout, version: str, timeout_s: float = 120.0,
          overrides: Mapping[str, str] | None = None,
          progress: readiness.Progress | None = None) -> int:
    """Start the broker (idempotent) and wait until it serves groups and transactions.

    ``overrides``: extra broker properties (see ``write_config``); the readiness probe still
    speaks PLAINTEXT to ``layout.port``, so that listener must stay. ``progress`` hears
    what is being waited for (``ares dev up`` shows it).
    """
    pid = running_pid(layout)
    if pid is None:
        pid = launch(layout, version, overrides)
    wait_ready(layout, pid, timeout_s, progress)
    return pid


def launch(layout: KafkaLayout, version: str,
           overrides: Mapping[str, str] | None = None, cluster_id: str | None = None) -> int:
    """Format (first time only) and start the broker; return its pid at once, ready or not.

    ``start`` waits for readiness; the first-run tests use this alone, to meet the broker
    as a user who types a command the moment ``ares dev up`` was started elsewhere would.
    """
    libs = resolve_classpath(version)
    write_config(layout, overrides)
    format_storage(libs, layout, cluster_id)
    with layout.out_file.open("ab") as out:
        proc = subprocess.Popen(
            _java_command(libs, layout, "kafka.Kafka", str(layout.config_file)),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=layout.root,
        )
    layout.pid_file.write_text(f"{proc.pid}\n")
    layout.version_file.write_text(version)
    return proc.pid


def wait_ready(layout: KafkaLayout, pid: int, timeout_s: float,
               progress: readiness.Progress | None = None) -> None:
    """Until the broker serves metadata, group coordination and transactions
    (``ares.devenv.readiness``); an ``InfrastructureError`` with the log's tail if not."""
    try:
        asyncio.run(readiness.wait_until_serving(
            layout.bootstrap, timeout_s=timeout_s, progress=progress,
            alive=lambda: process.pid_alive(pid)))
    except InfrastructureError as exc:
        raise InfrastructureError(f"{exc}; {_log_tails(layout)}") from None


def _log_tails(layout: KafkaLayout, lines: int = 40) -> str:
    return (f"last lines of {layout.log_file}:\n{process.tail(layout.log_file, lines)}"
            f"{process.tail(layout.out_file, 10)}")


def start_cluster(cluster: KafkaCluster, version: str, timeout_s: float = 180.0,
                  overrides: Mapping[int, Mapping[str, str]] | None = None,
                  progress: readiness.Progress | None = None) -> dict[int, int]:
    """Start every node that is not running (idempotent: a running node is left alone, a
    node that died is started again) and wait until the cluster serves groups and
    transactions with every node registered. Returns node id -> pid.

    ``overrides``: extra broker properties per node id (see ``write_config``).
    """
    if cluster.size == 1:
        node = cluster.first
        return {node.node_id: start(node, version, timeout_s, (overrides or {}).get(
            node.node_id), progress)}
    pids = launch_cluster(cluster, version, overrides)
    wait_cluster_ready(cluster, pids, timeout_s, progress)
    return pids


def launch_cluster(cluster: KafkaCluster, version: str,
                   overrides: Mapping[int, Mapping[str, str]] | None = None) -> dict[int, int]:
    """Format (once, one cluster id for all) and start the nodes not running; no wait."""
    pids = cluster.pids()
    missing = [node for node in cluster.nodes if pids[node.node_id] is None]
    if missing:
        cluster_id = cluster.cluster_id()
        for node in missing:
            pids[node.node_id] = launch(node, version, (overrides or {}).get(node.node_id),
                                        cluster_id)
    return {node: pid for node, pid in pids.items() if pid is not None}


def wait_cluster_ready(cluster: KafkaCluster, pids: Mapping[int, int], timeout_s: float,
                       progress: readiness.Progress | None = None) -> None:
    """Until every node is registered and the cluster serves groups and transactions; an
    ``InfrastructureError`` with the tails of the logs of the dead nodes (of all if none
    died)."""
    def alive() -> bool:
        return all(process.pid_alive(pid) for pid in pids.values())

    try:
        asyncio.run(readiness.wait_until_serving(
            cluster.bootstrap, timeout_s=timeout_s, progress=progress, alive=alive,
            brokers=cluster.size))
    except InfrastructureError as exc:
        dead = [node for node in cluster.nodes if not process.pid_alive(pids[node.node_id])]
        shown = dead or list(cluster.nodes)
        raise InfrastructureError(
            f"{exc}; " + "; ".join(f"node {node.node_id}: {_log_tails(node, 20)}"
                                   for node in shown)) from None


def stop_cluster(cluster: KafkaCluster, grace_s: float = 30.0) -> list[int]:
    """Stop every node (all signalled first, then waited for, so that the controllers
    shut down together instead of each waiting for a quorum that is leaving); returns the
    ids of the nodes that were running."""
    running = {node.node_id: pid for node, pid in
               ((node, running_pid(node)) for node in cluster.nodes) if pid is not None}
    process.terminate_all(list(running.values()), grace_s)
    for node in cluster.nodes:
        node.pid_file.unlink(missing_ok=True)
    return sorted(running)


def wait_listening(layout: KafkaLayout, pid: int, timeout_s: float = 120.0) -> None:
    """Until the broker's client port accepts a TCP connection (and nothing more)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process.pid_alive(pid):
            raise InfrastructureError(f"the Kafka broker exited during start-up; see "
                                      f"{layout.log_file}:\n{process.tail(layout.log_file)}")
        with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", layout.port), timeout=1.0):
            return
        time.sleep(0.05)
    raise InfrastructureError(f"the Kafka broker's port {layout.port} did not open within "
                              f"{timeout_s:.0f}s; see {layout.log_file}")


async def probe(bootstrap: str, timeout_s: float = 5.0) -> int:
    """A real metadata request; returns the number of brokers in the cluster."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        await wait_for(admin.start(), timeout_s)
        cluster = await wait_for(admin.describe_cluster(), timeout_s)
        return len(cluster["brokers"])
    finally:
        await admin.close()


def stop(layout: KafkaLayout, grace_s: float = 30.0) -> bool:
    pid = running_pid(layout)
    if pid is None:
        layout.pid_file.unlink(missing_ok=True)
        return False
    process.terminate(pid, grace_s)
    layout.pid_file.unlink(missing_ok=True)
    return True
