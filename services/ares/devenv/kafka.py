"""A single-node Apache Kafka broker in KRaft combined mode, from Maven Central jars."""

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
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ares.devenv import process, readiness
from ares.devenv.paths import cache_dir
from ares.errors import InfrastructureError

# The newest Kafka on which every broker feature ares relies on passes with aiokafka
# (transactions, fencing, read_committed, static membership): see docs/development.md.
DEFAULT_KAFKA_VERSION = "4.4.0"
HEAP = "-Xmx1g"


@dataclass(frozen=True, slots=True)
class KafkaLayout:
    """Files of the local broker under the dev home."""

    root: Path
    port: int
    controller_port: int

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
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


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
    binding. Maven's own repository (~/.m2) caches the downloads across versions.
    """
    _, mvn = require_tools()
    libs = cache_dir() / f"kafka-{version}" / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    pom = resources.files("ares.devenv") / "templates" / "broker-pom.xml"
    with resources.as_file(pom) as pom_path:
        print(f"resolving Apache Kafka {version} from Maven Central into {libs} ...",
              file=sys.stderr)
        result = subprocess.run(
            [mvn, "-B", "-q", "-f", str(pom_path), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={libs}",
             f"-Dkafka.version={version}"],
            capture_output=True, text=True, check=False,
        )
    if result.returncode != 0:
        raise InfrastructureError(
            f"Maven could not resolve org.apache.kafka:kafka_2.13:{version}:\n"
            f"{(result.stdout + result.stderr)[-3000:]}"
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


def write_config(layout: KafkaLayout, overrides: Mapping[str, str] | None = None) -> None:
    """Single-node KRaft settings sized for a 2-core development box.

    ``overrides`` (opt-in, default none) replaces or adds broker properties: extra listeners
    for the chaos suite's proxies, a SASL_SSL listener with an authorizer for the security
    tests (``ares.devenv.security``).
    """
    layout.root.mkdir(parents=True, exist_ok=True)
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{layout.controller_port}",
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{layout.port},CONTROLLER://127.0.0.1:{layout.controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{layout.port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(layout.data_dir),
        "num.partitions": "1",
        # Topics come from topics.yaml (`ares topics apply`), never from a typo.
        "auto.create.topics.enable": "false",
        # One node: internal topics cannot have more replicas, and without these, groups
        # and transactions never become available.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Fast failover tests: allow short consumer session timeouts.
        "group.min.session.timeout.ms": "1000",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "log.retention.check.interval.ms": "30000",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }
    props.update(overrides or {})
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
        java, HEAP, "-Xms256m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={layout.log4j_file}",
        f"-Dkafka.logs.dir={layout.root}",
        "-cp", f"{libs}/*", main, *args,
    ]


def format_storage(libs: Path, layout: KafkaLayout) -> None:
    if (layout.data_dir / "meta.properties").exists():
        return
    result = subprocess.run(
        _java_command(libs, layout, "kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                      "-c", str(layout.config_file), "--ignore-formatted"),
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise InfrastructureError(
            f"formatting Kafka storage failed:\n{(result.stdout + result.stderr)[-3000:]}"
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
           overrides: Mapping[str, str] | None = None) -> int:
    """Format (first time only) and start the broker; return its pid at once, ready or not.

    ``start`` waits for readiness; the first-run tests use this alone, to meet the broker
    as a user who types a command the moment ``ares dev up`` was started elsewhere would.
    """
    libs = resolve_classpath(version)
    write_config(layout, overrides)
    format_storage(libs, layout)
    with (layout.root / "broker.out").open("ab") as out:
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
        raise InfrastructureError(
            f"{exc}; last lines of {layout.log_file}:\n{process.tail(layout.log_file)}"
            f"{process.tail(layout.root / 'broker.out', 10)}") from None


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
        await asyncio.wait_for(admin.start(), timeout_s)
        cluster = await asyncio.wait_for(admin.describe_cluster(), timeout_s)
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
