"""The chaos run's own infrastructure: an isolated broker (and database), proxies, services.

Nothing here touches the shared development broker or database: the run roots its broker
(and, when a service needs one, its PostgreSQL) in its work directory on free ports, so it
may SIGKILL them at will. Every proxied service has its own broker listener, advertised at
its proxy's address: the service's clients reach the broker only through that proxy.
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

from ares.chaos.proxy import BuiltinProxies, Proxies, Toxiproxy
from ares.chaos.toxiproxy import ToxiproxyServer, ensure_binary, free_port
from ares.devenv import kafka as dev_kafka
from ares.devenv import postgres as dev_postgres
from ares.devenv.process import pid_alive, tail
from ares.errors import InfrastructureError
from ares.service import spawn


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
class _Listener:
    name: str  # broker listener name, e.g. PROXY1
    broker_port: int
    proxy_port: int


@dataclass(slots=True)
class ChaosCluster:
    workdir: Path
    specs: list[ServiceSpec]
    with_postgres: bool
    use_toxiproxy: bool = True
    kafka: dev_kafka.KafkaLayout = field(init=False)
    postgres: dev_postgres.PostgresLayout | None = field(init=False, default=None)
    proxies: Proxies = field(init=False)
    proxy_note: str = field(init=False, default="")
    services: dict[str, Service] = field(init=False, default_factory=dict)
    _listeners: dict[str, _Listener] = field(init=False, default_factory=dict)
    _toxiproxy: ToxiproxyServer | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.kafka = dev_kafka.KafkaLayout(self.workdir / "kafka", port=free_port(),
                                           controller_port=free_port())
        if self.with_postgres:
            self.postgres = dev_postgres.PostgresLayout(self.workdir / "postgres",
                                                        port=free_port())
        for index, spec in enumerate((s for s in self.specs if s.proxied), start=1):
            self._listeners[spec.name] = _Listener(f"PROXY{index}", free_port(), free_port())

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    def broker_overrides(self) -> dict[str, str]:
        """The default single-node settings plus one listener per proxied service,
        advertised at its proxy's port."""
        port, controller = self.kafka.port, self.kafka.controller_port
        listeners = [f"PLAINTEXT://127.0.0.1:{port}", f"CONTROLLER://127.0.0.1:{controller}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        for lst in self._listeners.values():
            listeners.append(f"{lst.name}://127.0.0.1:{lst.broker_port}")
            advertised.append(f"{lst.name}://127.0.0.1:{lst.proxy_port}")
            protocols.append(f"{lst.name}:PLAINTEXT")
        return {"listeners": ",".join(listeners),
                "advertised.listeners": ",".join(advertised),
                "listener.security.protocol.map": ",".join(protocols)}

    # -- infrastructure ------------------------------------------------------------------

    async def start_broker(self) -> None:
        await asyncio.to_thread(dev_kafka.start, self.kafka, dev_kafka.kafka_version(), 180.0,
                                self.broker_overrides())

    def broker_pid(self) -> int | None:
        return dev_kafka.running_pid(self.kafka)

    async def kill_broker(self) -> None:
        pid = self.broker_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        await asyncio.to_thread(_wait_gone, pid, 30.0)

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
        for name, lst in self._listeners.items():
            await self.proxies.create(name, lst.proxy_port, lst.broker_port)

    # -- services ------------------------------------------------------------------------

    def start_services(self, base_env: Mapping[str, str]) -> None:
        for spec in self.specs:
            env = dict(base_env)
            if spec.name in self._listeners:
                env["ARES_KAFKA_BOOTSTRAP"] = f"127.0.0.1:{self._listeners[spec.name].proxy_port}"
            else:
                env["ARES_KAFKA_BOOTSTRAP"] = self.bootstrap
            if spec.postgres and self.postgres is not None:
                env["ARES_POSTGRES_DSN"] = self.postgres.dsn
            service = Service(spec, env, self.workdir / "logs" / f"{spec.name}.log")
            self.services[spec.name] = service
            service.start()

    @property
    def proxied(self) -> list[str]:
        return list(self._listeners)

    def log_tails(self, lines: int = 30) -> dict[str, str]:
        tails = {name: tail(s.log, lines) for name, s in self.services.items()}
        tails["kafka"] = tail(self.kafka.log_file, lines)
        return tails

    async def close(self) -> None:
        for service in self.services.values():
            await asyncio.to_thread(service.stop)
        with contextlib.suppress(Exception):
            await self.proxies.close()
        if self._toxiproxy is not None:
            self._toxiproxy.stop()
        await asyncio.to_thread(dev_kafka.stop, self.kafka, 20.0)
        if self.postgres is not None:
            with contextlib.suppress(InfrastructureError):
                await self.stop_postgres()
