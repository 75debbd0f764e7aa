"""The chaos run's own infrastructure: isolated brokers (and database), proxies, services.

Nothing here touches the shared development broker or database: the run roots its broker,
or its three-node KRaft cluster (``--cluster 3``), and, when a service needs one, its
PostgreSQL in its work directory on free ports, so it may SIGKILL them at will. Every
proxied service has its own listener on every broker, advertised at its proxy's address:
its clients reach the brokers only through those proxies; on a cluster the brokers reach
each other through proxies as well (``ares.chaos.mesh``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ares.chaos.mesh import NODE, Mesh, build_mesh
from ares.chaos.proxy import BuiltinProxies, Proxies, Toxiproxy
from ares.chaos.toxiproxy import ToxiproxyServer, ensure_binary, free_port
from ares.devenv import kafka as dev_kafka
from ares.devenv import postgres as dev_postgres
from ares.devenv.process import pid_alive, tail
from ares.errors import InfrastructureError
from ares.service import spawn

LOAD = "load"  # the load's clients: a proxied client of their own on a cluster


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


@dataclass(slots=True)
class ServiceSpec:
    name: str  # unique: "runtime-manager-1", "health-checker", ...
    args: list[str]  # after `ares run`
    proxied: bool = False
    postgres: bool = False  # needs ARES_POSTGRES_DSN


@dataclass(slots=True)
class Service:
    """One `ares run` process; restarted by the run's supervisor when it dies."""

    spec: ServiceSpec
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    down_by_fault: bool = False  # killed on purpose: not an unexpected exit
    starts: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self) -> None:
        self.proc = spawn(self.spec.args, self.env, self.log)
        self.starts += 1
        self.down_by_fault = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.down_by_fault = True
        if self.proc is not None and self.alive:
            self.signal(signal.SIGCONT)  # a stopped process dies at once too
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (graceful), SIGKILL if it does not exit in time."""
        if self.proc is None or not self.alive:
            return
        self.down_by_fault = True
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


@dataclass(slots=True)
class ChaosCluster:
    """The run's brokers (one, or a KRaft cluster), its PostgreSQL, proxies and services."""

    workdir: Path
    specs: list[ServiceSpec]
    with_postgres: bool
    use_toxiproxy: bool = True
    brokers: int = 1
    kafka: dev_kafka.KafkaCluster = field(init=False)
    mesh: Mesh = field(init=False)
    postgres: dev_postgres.PostgresLayout | None = field(init=False, default=None)
    proxies: Proxies = field(init=False)
    proxy_note: str = field(init=False, default="")
    services: dict[str, Service] = field(init=False, default_factory=dict)
    _toxiproxy: ToxiproxyServer | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        root = self.workdir / "kafka"
        self.kafka = (dev_kafka.KafkaCluster.on_free_ports(root, self.brokers)
                      if self.brokers > 1 else dev_kafka.KafkaCluster.single(
                          dev_kafka.KafkaLayout(root, port=free_port(),
                                                controller_port=free_port())))
        if self.with_postgres:
            self.postgres = dev_postgres.PostgresLayout(self.workdir / "postgres",
                                                        port=free_port())
        clients = [spec.name for spec in self.specs if spec.proxied]
        if self.brokers > 1:
            clients.append(LOAD)  # a partitioned broker is cut off from every client
        self.mesh = build_mesh(self.kafka, clients, free_port)

    @property
    def bootstrap(self) -> str:
        """Every broker's direct listener: the run's own observer, never a service."""
        return self.kafka.bootstrap

    @property
    def load_bootstrap(self) -> str:
        """Where the load's clients connect: through its proxies on a cluster."""
        return self.mesh.bootstrap(LOAD) if LOAD in self.mesh.clients else self.bootstrap

    @property
    def node_ids(self) -> list[int]:
        return [node.node_id for node in self.kafka.nodes]

    # -- infrastructure ------------------------------------------------------------------

    async def start_broker(self) -> None:
        """Start every broker that is not running; wait until the cluster serves."""
        await asyncio.to_thread(dev_kafka.start_cluster, self.kafka, dev_kafka.kafka_version(),
                                180.0, self.mesh.overrides)

    def broker_pid(self) -> int | None:
        """The single broker's pid (None when down); on a cluster, None when any is down."""
        pids = self.kafka.pids()
        return None if any(pid is None for pid in pids.values()) else next(iter(pids.values()))

    async def kill_broker(self, node: int | None = None) -> None:
        """SIGKILL broker ``node`` (default: the first, the only one of a single node)."""
        layout = self.kafka.node(node) if node is not None else self.kafka.first
        pid = dev_kafka.running_pid(layout)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        await asyncio.to_thread(_wait_gone, pid, 30.0)

    async def stop_broker(self, node: int) -> None:
        """A graceful stop (SIGTERM: leadership handed over, logs flushed)."""
        await asyncio.to_thread(dev_kafka.stop, self.kafka.node(node), 60.0)

    async def start_postgres(self) -> None:
        if self.postgres is not None:
            await asyncio.to_thread(dev_postgres.start, self.postgres, 120.0)

    async def stop_postgres(self) -> None:
        if self.postgres is not None:
            await asyncio.to_thread(dev_postgres.stop, self.postgres)

    async def start_proxies(self) -> None:
        if self.use_toxiproxy:
            try:
                binary = await asyncio.to_thread(ensure_binary)
                server = ToxiproxyServer(binary, self.workdir / "logs" / "toxiproxy.log")
                await asyncio.to_thread(server.start)
                self._toxiproxy = server
                self.proxies = Toxiproxy(server.port)
                self.proxy_note = f"toxiproxy ({binary})"
            except InfrastructureError as exc:
                self.proxy_note = f"builtin asyncio proxy: toxiproxy unavailable ({exc})"
                self.proxies = BuiltinProxies()
        else:
            self.proxies = BuiltinProxies()
            self.proxy_note = "builtin asyncio proxy (--no-toxiproxy)"
        for route in self.mesh.routes:
            await self.proxies.create(route.name, route.listen_port, route.upstream_port)

    def routes_of(self, target: str) -> list[str]:
        """The proxies a network fault on ``target`` (a client, or "node-<n>") acts on."""
        if target.startswith(NODE):
            return [r.name for r in self.mesh.of_node(int(target.removeprefix(NODE)))]
        return [r.name for r in self.mesh.of_client(target)]

    # -- services ------------------------------------------------------------------------

    def start_services(self, base_env: Mapping[str, str]) -> None:
        for spec in self.specs:
            env = dict(base_env)
            env["ARES_KAFKA_BOOTSTRAP"] = (self.mesh.bootstrap(spec.name) if spec.proxied
                                           else self.bootstrap)
            if spec.postgres and self.postgres is not None:
                env["ARES_POSTGRES_DSN"] = self.postgres.dsn
            service = Service(spec, env, self.workdir / "logs" / f"{spec.name}.log")
            self.services[spec.name] = service
            service.start()

    @property
    def proxied(self) -> list[str]:
        """The services behind proxies (the load's own proxies are not a fault target)."""
        return [spec.name for spec in self.specs if spec.proxied]

    def log_tails(self, lines: int = 30) -> dict[str, str]:
        tails = {name: tail(s.log, lines) for name, s in self.services.items()}
        for node in self.kafka.nodes:
            tails[f"kafka-{node.node_id}" if self.brokers > 1 else "kafka"] = tail(
                node.log_file, lines)
        return tails

    async def close(self) -> None:
        for service in self.services.values():
            await asyncio.to_thread(service.stop)
        with contextlib.suppress(Exception):
            await self.proxies.close()
        if self._toxiproxy is not None:
            self._toxiproxy.stop()
        await asyncio.to_thread(dev_kafka.stop_cluster, self.kafka, 20.0)
        if self.postgres is not None:
            with contextlib.suppress(InfrastructureError):
                await self.stop_postgres()
