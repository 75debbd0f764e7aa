"""One lifecycle for every long-running process: start, ready, drain, stop.

``Service`` is the base of the four services (their tasks, their stop); ``serve`` runs one
as the process: signals, probes, the exit code.

Signals are handled here and nowhere else: the first SIGTERM/SIGINT asks the service to
stop gracefully, a second one forces the exit.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ares.probes import ProbeServer
from ares.tasks import cancel_and_wait

log = logging.getLogger(__name__)
FORCED_EXIT_CODE = 130
# The services that run beside the runtime managers (`ares run <name>`); the demo and chaos
# start each of them.
SUPPORTING_SERVICES = ("health-checker", "compactor", "replay-reader")


class Service(abc.ABC):
    """The base of the four services: declared background tasks, one stop for all.

    A subclass says what it connects (``on_start``), what runs until it is stopped
    (``background``), how it drains while that still runs (``on_stop``) and what it releases
    once it has ended (``on_shutdown``); the base owns the tasks, so none is left running
    or unawaited, and cancelling happens here and nowhere else (in the spirit of
    ``mode.Service``).
    """

    name: ClassVar[str]

    def __init__(self) -> None:
        self.started = False
        self.error: BaseException | None = None  # the first crashed task's
        self._background: list[asyncio.Task[None]] = []
        self._ended = asyncio.Event()
        self._stopping: asyncio.Future[None] | None = None

    @property
    def ready(self) -> bool:
        """True while the service does its work; /readyz answers 200 only then."""
        return self.running

    @property
    def running(self) -> bool:
        """Started, not stopped, and no background task has ended."""
        return self.started and not self._ended.is_set()

    @property
    def ended(self) -> bool:
        """A background task ended (crashed) or the service was stopped."""
        return self._ended.is_set()

    @abc.abstractmethod
    async def on_start(self) -> None:
        """Connect (aiokafka clients bind to the running loop: here, not in ``__init__``).
        A failure propagates out of ``start``; no background task has been launched."""

    def background(self) -> dict[str, Coroutine[Any, Any, None]]:
        """The loops that run from the start to the stop, by task name. Called once, after
        ``on_start``; any of them ending on its own ends the service."""
        return {}

    async def on_stop(self) -> None:  # noqa: B027 (a hook: overriding it is optional)
        """Drain, while the background tasks still run (they are cancelled next)."""

    async def on_shutdown(self) -> None:  # noqa: B027
        """Release what ``on_start`` opened; every background task has ended."""

    async def start(self) -> None:
        """Connect and take work; return once running (``ready`` may come later)."""
        await self.on_start()
        if self._stopping is not None:  # stopped meanwhile: nothing left to launch
            return
        for task_name, coro in self.background().items():
            task = asyncio.create_task(coro, name=task_name)
            task.add_done_callback(self._task_ended)
            self._background.append(task)
        self.started = True

    async def wait_stopped(self) -> None:
        """Return when the service was stopped or a background task ended; raise that
        task's error if it crashed (so the process's exit code says something went wrong)."""
        await self._ended.wait()
        if self.error is not None:
            raise self.error

    async def stop(self) -> None:
        """Graceful and idempotent: every caller, concurrent or later, waits for the one
        stop. It is shielded: a caller cancelled meanwhile does not leave a half-stopped
        service (clients open, tasks running) behind."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        try:
            await self.on_stop()
        finally:  # a failed drain still leaves no task behind and no client open
            tasks, self._background = self._background, []
            # A crashed task's error is in ``self.error`` and the log already.
            await cancel_and_wait(*tasks, ignore_errors=True)
            try:
                await self.on_shutdown()
            finally:
                self._ended.set()

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s failed: %r; stopping", task.get_name(), exc)
            if self.error is None:
                self.error = exc
        if self._stopping is None:  # ended on its own, so has the service; else stop() says
            self._ended.set()


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


def spawn(args: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``ares run <args>`` as a process of its own, the way an operator starts one.

    The demo and the chaos runner SIGKILL what this starts, so it must be the real service
    process, not a task in theirs. It leads a session of its own (a kill of its process
    group takes its children too) and appends its output to ``log_path``.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "ares", "run", *args], env=dict(env),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
