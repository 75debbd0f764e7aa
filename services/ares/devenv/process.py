"""Small process helpers shared by the broker and the database launchers."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import deque
from pathlib import Path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (e.g. the postgres user)
        return True
    # A zombie child still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    return True


def read_pid(path: Path, expect: str | None = None) -> int | None:
    """The pid in the first line of ``path`` if that process is alive, else None.

    With ``expect``, the process's command line must also contain it: after a reboot a pid
    file outlives its process and the number may now belong to an unrelated one, which
    must be neither reported as running nor signalled.
    """
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if not pid_alive(pid):
        return None
    if expect is not None:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:  # no /proc (or hidden): trust the pid file
            return pid
        if expect not in cmdline.replace("\0", " "):
            return None
    return pid


def terminate(pid: int, grace_s: float) -> None:
    """SIGTERM the process group, wait up to ``grace_s``, then SIGKILL what is left."""
    terminate_all([pid], grace_s)


def terminate_all(pids: list[int], grace_s: float) -> None:
    """``terminate`` for several process groups at once: all get SIGTERM together, then
    SIGKILL whatever is left after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 10.0)
        while time.monotonic() < deadline:
            if not any(pid_alive(pid) for pid in pids):
                return
            time.sleep(0.1)


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, for error messages."""
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return f"(no log at {path})"
