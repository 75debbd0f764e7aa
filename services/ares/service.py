"""One lifecycle for every long-running process: start, ready, drain, stop.

Signals are handled here and nowhere else: the first SIGTERM/SIGINT asks the service to
stop gracefully, a second one forces the exit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ares.probes import ProbeServer
from ares.tasks import cancel_and_wait

log = logging.getLogger(__name__)
FORCED_EXIT_CODE = 130
# The services that run beside the runtime managers (`ares run <name>`); the demo and chaos
# start each of them.
SUPPORTING_SERVICES = ("health-checker", "compactor", "replay-reader")


class Service(Protocol):
    name: str

    @property
    def ready(self) -> bool:
        """True while the service does its work (the runtime manager: every assigned
        partition recovered); /readyz answers 200 only then."""
        ...

    async def start(self) -> None:
        """Connect and take work; return once running (``ready`` may come later)."""
        ...

    async def wait_stopped(self) -> None:
        """Return when the service ended on its own (a fatal error) or was stopped."""
        ...

    async def stop(self) -> None:
        """Graceful, idempotent: finish in-flight work, release resources."""
        ...


async def serve(service: Service, http_port: int | None = None,
                wait_for: Callable[[], Coroutine[Any, Any, None]] | None = None) -> int:
    """Run ``service`` until it ends or a signal stops it; the process exit code.

    With ``http_port``, /healthz /readyz /metrics are served from before the start (liveness
    answers during a long recovery) until after the stop. ``wait_for`` runs before the
    start (waiting for the broker); a signal meanwhile ends the process with 0.
    """
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen == 1:
            log.info("%s: %s received, stopping gracefully (again to force)", service.name,
                     signal.Signals(signum).name)
            stop_requested.set()
        else:
            log.warning("%s: second signal, forcing exit", service.name)
            os._exit(FORCED_EXIT_CODE)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    probes = None if http_port is None else ProbeServer(http_port, ready=lambda: service.ready)
    requested: asyncio.Task[bool] | None = None
    try:
        if probes is not None:
            await probes.start()
        requested = asyncio.create_task(stop_requested.wait())
        if wait_for is not None:
            waiting = asyncio.create_task(wait_for())
            await asyncio.wait({waiting, requested}, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                await cancel_and_wait(waiting)
                return 0
            waiting.result()  # gave up: the error says on what
        await service.start()
        stopped = asyncio.create_task(service.wait_stopped())
        done, _ = await asyncio.wait({stopped, requested}, return_when=asyncio.FIRST_COMPLETED)
        requested.cancel()
        if probes is not None:
            probes.set_draining()  # out of rotation before the stop begins
        await service.stop()
        if stopped in done and stopped.exception() is not None:
            raise stopped.exception()  # type: ignore[misc]
        stopped.cancel()
        return 0
    finally:
        if requested is not None:
            requested.cancel()
        if probes is not None:
            await probes.stop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
