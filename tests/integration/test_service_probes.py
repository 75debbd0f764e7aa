"""Every service serves /healthz, /readyz and /metrics; the runtime manager is not ready
until it has recovered its partitions."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ares.chaos.proxy import BuiltinProxies
from ares.chaos.toxiproxy import free_port
from ares.config import Settings
from ares.probes import DEFAULT_PORTS
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares, ares_env, service

PARTITIONS = 2


@pytest.fixture(scope="module")
def probe_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap,
                    topic_prefix=f"probe-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def plan(probe_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(probe_settings, partitions=PARTITIONS) as plan:
        yield plan


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""  # not listening yet


def _readiness_trace(port: int, timeout_s: float = 90) -> list[int]:
    """The /readyz statuses seen from the first answer until the first 200."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _ = _get(port, "/readyz")
        if status:
            seen.append(status)
        if status == 200:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"never ready; /readyz answered {seen[-5:]}")


@pytest.mark.parametrize("name", ["runtime-manager", "health-checker", "compactor",
                                  "replay-reader"])
def test_every_service_serves_its_probes(name: str, probe_settings: Settings, plan: TopicPlan,
                                         postgres_dsn: str, tmp_path: Path) -> None:
    port = free_port()
    env = ares_env(probe_settings, PARTITIONS, ARES_HTTP_PORT=str(port),
                   ARES_POSTGRES_DSN=postgres_dsn)
    with service(name, env, tmp_path) as proc:
        trace = _readiness_trace(port)
        assert proc.poll() is None, f"{name} exited"
        assert _get(port, "/healthz")[0] == 200
        status, text = _get(port, "/metrics")
        assert status == 200
        assert "process_cpu_seconds_total" in text or "python_info" in text
        # Every service runs under the collector policy (ares.gc_policy), named in its log.
        _log_with(tmp_path, "garbage collector: young-generation threshold 20000")
        if name == "runtime-manager":
            # Not ready while it joined the group and recovered its partitions.
            assert trace[0] == 503, trace
            assert "ares_owned_partitions 2.0" in text


# -- started before the broker ------------------------------------------------------------

WAITING = "waiting for the Kafka broker"


def _log_with(log_dir: Path, needle: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = "".join(p.read_text(errors="replace") for p in log_dir.glob("*.log"))
        if needle in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"no {needle!r} in the log:\n{text[-3000:]}")


async def test_a_service_started_before_its_broker_waits_for_it(
    probe_settings: Settings, plan: TopicPlan, tmp_path: Path,
) -> None:
    broker_port = int(probe_settings.kafka_bootstrap.rsplit(":", 1)[1])
    late_port, http_port = free_port(), free_port()
    env = ares_env(probe_settings, PARTITIONS, ARES_HTTP_PORT=str(http_port),
                   ARES_KAFKA_BOOTSTRAP=f"127.0.0.1:{late_port}", ARES_STARTUP_TIMEOUT_S="120")
    proxies = BuiltinProxies()
    with service("runtime-manager", env, tmp_path) as proc:
        await asyncio.to_thread(_log_with, tmp_path, WAITING)
        # Alive but not ready while it waits: no CrashLoopBackOff, out of rotation.
        assert _get(http_port, "/healthz")[0] == 200
        assert _get(http_port, "/readyz")[0] == 503
        await proxies.create("kafka", late_port, broker_port)  # the broker "comes up"
        try:
            trace = await asyncio.to_thread(_readiness_trace, http_port)
        finally:
            await proxies.close()
        assert trace[-1] == 200
        assert proc.poll() is None


def test_a_service_gives_up_after_the_startup_timeout(probe_settings: Settings,
                                                       plan: TopicPlan) -> None:
    env = ares_env(probe_settings, PARTITIONS, ARES_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
                   ARES_STARTUP_TIMEOUT_S="2", ARES_REQUEST_TIMEOUT_S="2")
    bootstrap = env["ARES_KAFKA_BOOTSTRAP"]
    done = ares("run", "compactor", env=env, timeout=60)
    assert done.returncode == 4, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: starting the compactor: the Kafka broker at {bootstrap} "
                           "did not answer: no connection"), done.stderr
    assert "waited 2s, ARES_STARTUP_TIMEOUT_S" in last
    assert "Traceback" not in done.stderr
    # Said once while waiting, not once per attempt.
    assert done.stderr.count(WAITING) == 1, done.stderr


def test_a_signal_while_waiting_for_the_broker_stops_the_service(
    probe_settings: Settings, plan: TopicPlan, tmp_path: Path,
) -> None:
    env = ares_env(probe_settings, PARTITIONS, ARES_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
                   ARES_STARTUP_TIMEOUT_S="120")
    with service("health-checker", env, tmp_path) as proc:
        _log_with(tmp_path, WAITING)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


# -- side by side on one machine ------------------------------------------------------------


def test_the_four_services_run_side_by_side_on_their_default_ports(
        probe_settings: Settings, plan: TopicPlan, postgres_dsn: str, tmp_path: Path) -> None:
    env = ares_env(probe_settings, PARTITIONS, ARES_POSTGRES_DSN=postgres_dsn)
    env.pop("ARES_HTTP_PORT")  # each service's own default (ares.probes.DEFAULT_PORTS)
    with contextlib.ExitStack() as stack:
        procs = {name: stack.enter_context(service(name, env, tmp_path / name))
                 for name in DEFAULT_PORTS}
        for name, port in DEFAULT_PORTS.items():
            _readiness_trace(port)
            assert _get(port, "/healthz")[0] == 200, name
        assert [name for name, proc in procs.items() if proc.poll() is not None] == []


def test_a_taken_port_is_exit_2_naming_it(probe_settings: Settings, plan: TopicPlan,
                                          tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = ares_env(probe_settings, PARTITIONS, ARES_HTTP_PORT=str(port))
        done = ares("run", "health-checker", env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot listen on 0.0.0.0:{port} "), last
    assert "ARES_HTTP_PORT" in last
