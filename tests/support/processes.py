"""Real service processes for integration tests (started as a user would: `ares run ...`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ares.config import Settings


def ares_env(settings: Settings, partitions: int, **extra: str) -> dict[str, str]:
    """The environment of an ares process bound to ``settings``' broker and topics."""
    env = dict(os.environ)
    env.update({
        "ARES_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "ARES_TOPIC_PREFIX": settings.topic_prefix,
        "ARES_TOPIC_PARTITIONS": str(partitions),
        "ARES_MAX_RECORD_BYTES": str(settings.max_record_bytes),
        "PYTHONUNBUFFERED": "1",
        # Several services run side by side in tests: no fixed probe port (0 = off).
        "ARES_HTTP_PORT": "0",
    })
    env.update(extra)
    return env


def ares(*args: str, env: Mapping[str, str],
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real CLI to completion."""
    return subprocess.run([sys.executable, "-m", "ares", *args], env=dict(env), text=True,
                          capture_output=True, timeout=timeout, check=False)


@contextmanager
def service(name: str, env: Mapping[str, str], log_dir: Path,
            *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """`ares run NAME` in the background; SIGKILLed at the end if still running."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ares", "run", name, *args],
                                env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
