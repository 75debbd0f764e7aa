"""toxiproxy, built from the Go module proxy once per machine and cached.

No release binary can be downloaded here, but toxiproxy is a Go module: ``go install
github.com/Shopify/toxiproxy/v2/cmd/server@<version>`` builds it (a few minutes cold on two
cores) into ``<ARES_CACHE_DIR>/bin/toxiproxy-<version>/toxiproxy-server``, like
scripts/helm.sh does for helm. Without Go, or when the build fails, the caller falls back to
the in-process proxy and the report says why.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ares.devenv.paths import cache_dir
from ares.devenv.process import pid_alive, tail
from ares.errors import InfrastructureError

TOXIPROXY_VERSION = os.environ.get("ARES_TOXIPROXY_VERSION", "v2.5.0")
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
GO_FALLBACK = Path("/usr/local/go/bin/go")  # the official install location


def binary_path(version: str = TOXIPROXY_VERSION) -> Path:
    return cache_dir() / "bin" / f"toxiproxy-{version}" / "toxiproxy-server"


def ensure_binary(version: str = TOXIPROXY_VERSION, timeout_s: float = 900.0) -> Path:
    """The cached toxiproxy-server, built first if missing; ``InfrastructureError`` else."""
    target = binary_path(version)
    if target.is_file():
        return target
    go = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.is_file() else None)
    if go is None:
        raise InfrastructureError("no `go` on PATH to build toxiproxy (install Go >= 1.19)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per machine; who waited finds it built
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory(dir=target.parent) as build_dir:
            env = {**os.environ, "GOBIN": build_dir,
                   "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -buildvcs=false".strip()}
            try:
                result = subprocess.run([go, "install", f"{MODULE}@{version}"], env=env,
                                        capture_output=True, text=True, timeout=timeout_s,
                                        check=False)
            except subprocess.TimeoutExpired:
                raise InfrastructureError(
                    f"building toxiproxy {version} took over {timeout_s:.0f}s") from None
            if result.returncode != 0:
                raise InfrastructureError(f"building toxiproxy {version} failed:\n"
                                          f"{(result.stdout + result.stderr)[-2000:]}")
            # Same filesystem: the binary appears whole or not at all.
            os.replace(Path(build_dir) / "server", target)
    return target


_handed_out: set[int] = set()


def free_port() -> int:
    """A port free now and never handed out before by this process.

    The kernel may give the same ephemeral port to two binds in a row once the first
    socket is closed: a chaos run once got its broker's listener and a proxy's on one port
    (the broker refused to start). Nothing binds the ports until the services start, so
    distinctness is kept here.
    """
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class ToxiproxyServer:
    """A toxiproxy-server process on 127.0.0.1, its log in ``log_path``."""

    def __init__(self, binary: Path, log_path: Path) -> None:
        self.binary = binary
        self.log_path = log_path
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 15.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.binary), "-host", "127.0.0.1", "-port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # Its default debug level logs every connection: megabytes a minute here.
                env={**os.environ, "LOG_LEVEL": "warn"}, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not pid_alive(self.proc.pid):
                raise InfrastructureError(f"toxiproxy-server exited:\n{tail(self.log_path)}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.1)
        raise InfrastructureError(f"toxiproxy-server did not listen within {timeout_s:.0f}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
