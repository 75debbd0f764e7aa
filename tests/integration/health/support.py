"""Helpers for the health checker's integration tests: alerts on the real topic, the
checker's own record of what it did, latency summaries."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from ares.config import Settings
from ares.health_checker.alerts import decode_alert
from ares.health_checker.model import DeclareDead
from ares.health_checker.service import HealthChecker
from ares.topics import ALERTS, TopicPlan
from tests.support.kafka import drain_records

HEALTH_AGENTS = "tests.integration.health.agents:REGISTRY"
SUPPORT_AGENTS = "tests.support.agents:REGISTRY"


async def all_alerts(settings: Settings, plan: TopicPlan) -> list[dict[str, Any]]:
    records = await drain_records(settings.kafka_bootstrap, plan.name(ALERTS),
                                  partitions=plan.topic(ALERTS).partitions)
    return [decode_alert(r.value) for r in records]


async def wait_alerts(settings: Settings, plan: TopicPlan,
                      done: Callable[[list[dict[str, Any]]], bool],
                      timeout_s: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        found = await all_alerts(settings, plan)
        if done(found):
            return found
        await asyncio.sleep(0.5)
    summary = [(a["kind"], a["stream_id"]) for a in found]
    raise AssertionError(f"alerts did not get there in {timeout_s}s: {summary}")


def of(alerts: Sequence[dict[str, Any]], kind: str, stream_id: str | None = None
       ) -> list[dict[str, Any]]:
    return [a for a in alerts if a["kind"] == kind
            and (stream_id is None or a["stream_id"] == stream_id)]


def verdicts_for(checker: HealthChecker, agents: Sequence[str]) -> list[DeclareDead]:
    wanted = set(agents)
    return [a for a in checker.sent if isinstance(a, DeclareDead) and a.agent_id in wanted]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values: Sequence[float]) -> str:
    return (f"n={len(values)} min={min(values):.3f}s p50={percentile(values, 50):.3f}s "
            f"p90={percentile(values, 90):.3f}s p99={percentile(values, 99):.3f}s "
            f"max={max(values):.3f}s")


# -- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Proc:
    """An ``ares run`` process of a test, with its log and probe port."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    port: int

    def signal(self, signum: int) -> float:
        at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)
        return at

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{self.port}/metrics") as response:
            return await response.text()

    async def ready(self, timeout_s: float = 90.0) -> None:
        """Until /readyz answers 200; fails with the log when the process dies."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n"
                                         f"{self.log_text()[-4000:]}")
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(f"http://127.0.0.1:{self.port}/readyz",
                                           timeout=aiohttp.ClientTimeout(total=1)) as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.2)
        raise AssertionError(f"{self.name} not ready in {timeout_s}s:\n"
                             f"{self.log_text()[-4000:]}")


@contextlib.contextmanager
def started(name: str, env: Mapping[str, str], log_dir: Path,
            *args: str) -> Iterator[Proc]:
    """``ares run NAME ARGS`` with its own probe port; SIGKILLed at the end if still up."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ares", "run", name, *args],
                                env={**env, "ARES_HTTP_PORT": str(port)}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    handle = Proc(name, proc, log_path, port)
    try:
        yield handle
    finally:
        if proc.poll() is None:
            handle.signal(signal.SIGKILL)
            proc.wait(timeout=30)
