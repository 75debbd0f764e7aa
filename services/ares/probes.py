"""The HTTP side of every service: ``/healthz``, ``/readyz`` and ``/metrics``.

One small aiohttp server per process, on ``ARES_HTTP_PORT``, by default each service's own
port (``DEFAULT_PORTS``) so that all of them run side by side on one machine; the Helm
chart and docker-compose.yml use the same numbers. Kubernetes' probes and Prometheus talk
to it:

- ``/healthz`` (liveness): 200 while the event loop runs and ``alive()`` holds. Answering at
  all proves the loop is not blocked; a failing liveness probe restarts the container, so
  it must not depend on Kafka (a broker outage would restart the whole fleet for nothing).
- ``/readyz`` (readiness): 200 when ``ready()`` holds (the runtime manager: every assigned
  partition recovered), else 503; 503 from ``draining()`` on, whatever ``ready()`` says, so
  that a stopping process is taken out of rotation before it stops answering.
- ``/metrics``: the Prometheus exposition of ``registry`` (text format, or OpenMetrics when
  the scraper asks for it).

The server starts before the service (so that liveness answers during a long recovery) and
stops after it.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable

from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ares.errors import ConfigError

log = logging.getLogger(__name__)

# Each service's default probe/metrics port (the replay reader's also serves its API).
DEFAULT_PORTS = {
    "replay-reader": 8080,
    "runtime-manager": 8081,
    "health-checker": 8082,
    "compactor": 8083,
}


class ProbeServer:
    """Serves the probes and the metrics of one process until ``stop()``."""

    def __init__(self, port: int, ready: Callable[[], bool],
                 registry: CollectorRegistry = REGISTRY, *, host: str = "0.0.0.0",
                 alive: Callable[[], bool] | None = None) -> None:
        self._requested_port = port
        self._host = host
        self._ready = ready
        self._alive = alive
        self._registry = registry
        self._draining = False
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when started with port 0)."""
        if self._port is None:
            raise RuntimeError("the probe server is not started")
        return self._port

    async def start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        # No access log: the kubelet probes every few seconds and would drown the real logs.
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._port = await serve_app(runner, self._host, self._requested_port)
        self._runner = runner
        log.info("serving /healthz /readyz /metrics on %s:%d", self._host, self._port)

    def set_draining(self) -> None:
        """Report not ready from now on: the first phase of a graceful shutdown."""
        self._draining = True

    async def stop(self) -> None:
        """Idempotent: close the listening socket and the open connections."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self._port = None

    # -- handlers -------------------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        ok = _holds(self._alive) if self._alive is not None else True
        return _status(ok, "alive" if ok else "dead")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self._draining:
            return _status(False, "draining")
        ok = _holds(self._ready)
        return _status(ok, "ready" if ok else "not ready")

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body: bytes = encoder(self._registry)
        # The content type carries its own charset parameter: set the header as it is.
        return web.Response(body=body, headers={"Content-Type": content_type})


def _holds(check: Callable[[], bool]) -> bool:
    """A check that raises says no (and is logged): a probe never answers 500."""
    try:
        return bool(check())
    except Exception:
        log.exception("probe check %r failed", check)
        return False


def _status(ok: bool, status: str) -> web.Response:
    return web.Response(status=200 if ok else 503, text=json.dumps({"status": status}),
                        content_type="application/json")


def tls_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """A server TLS context for a PEM certificate (chain) and its key; ``None`` without
    them. An unreadable or mismatched pair is ``ConfigError`` naming the files."""
    if not cert_file or not key_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ARES_HTTP_TLS_CERT_FILE / ARES_HTTP_TLS_KEY_FILE ({cert_file}, "
                          f"{key_file}) cannot be loaded: {exc}") from None
    return context


async def serve_app(runner: web.AppRunner, host: str, port: int, *,
                    ssl_context: ssl.SSLContext | None = None) -> int:
    """Set up ``runner`` and listen on ``host:port`` (HTTPS with ``ssl_context``); the bound
    port (the real one for 0).

    A port that is taken is a setting to change, not a crash: ``ConfigError`` (exit 2)
    naming the port and ``ARES_HTTP_PORT``."""
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): another process has "
            "the port; set ARES_HTTP_PORT to a free port (0: any free port), or start "
            "this service with --http-port") from None
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return port
