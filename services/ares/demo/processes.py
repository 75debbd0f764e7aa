"""The demo's services as real processes (`ares run ...`), each with its own log file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ares.service import spawn


@dataclass(slots=True)
class ServiceProcess:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None)

    def start(self) -> None:
        self.proc = spawn(self.args, self.env, self.log)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no goodbye, no final snapshot, no leave-group. The real thing."""
        if self.proc is not None and self.alive:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM and wait for the graceful shutdown; SIGKILL if it does not come."""
        if self.proc is None or not self.alive:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
