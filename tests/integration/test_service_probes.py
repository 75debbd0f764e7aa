"""Every service serves /healthz, /readyz and /metrics; the runtime manager is not ready
until it has recovered its partitions."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ares.config import Settings
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares_env, service

PARTITIONS = 2


@pytest.fixture(scope="module")
def probe_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap,
                    topic_prefix=f"probe-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def plan(probe_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(probe_settings, partitions=PARTITIONS) as plan:
        yield plan


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    port = _free_port()
    env = ares_env(probe_settings, PARTITIONS, ARES_HTTP_PORT=str(port),
                   ARES_POSTGRES_DSN=postgres_dsn)
    with service(name, env, tmp_path) as proc:
        trace = _readiness_trace(port)
        assert proc.poll() is None, f"{name} exited"
        assert _get(port, "/healthz")[0] == 200
        status, text = _get(port, "/metrics")
        assert status == 200
        assert "process_cpu_seconds_total" in text or "python_info" in text
        if name == "runtime-manager":
            # Not ready while it joined the group and recovered its partitions.
            assert trace[0] == 503, trace
            assert "ares_owned_partitions 2.0" in text
