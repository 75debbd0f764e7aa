"""Logging for the services: one JSON object per line, with the emitting module on each."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

# Things a person waiting on a command should hear once ("waiting for the Kafka broker
# ..."): services log them as any other record; the CLI prints them as plain lines.
NOTICES = "ares.notices"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "module": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "info", json_lines: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    notices = logging.getLogger(NOTICES)
    notices.handlers[:], notices.propagate = [], True
    # aiokafka narrates every reconnect at INFO/ERROR; keep its warnings only.
    logging.getLogger("aiokafka").setLevel(max(root.level, logging.WARNING))


def show_notices() -> None:
    """For the CLI on a terminal: notices on stderr as plain lines ("▸ waiting for ..."),
    and nothing else of the logs. Off a terminal they stay silent, so that a script sees
    one line, the error, when the wait ends badly. ``configure`` (the services) takes them
    back into the JSON log."""
    notices = logging.getLogger(NOTICES)
    notices.propagate = False
    if not sys.stderr.isatty():
        notices.handlers[:] = [logging.NullHandler()]  # not even logging's last resort
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("▸ %(message)s"))
    notices.handlers[:] = [handler]
    notices.setLevel(logging.INFO)


class _RecentErrors(logging.Handler):
    """aiokafka's last errors, even when they are not shown: its "Unable to bootstrap" hides
    why (a refused login, say), which only its log said."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: collections.deque[tuple[float, str]] = collections.deque(maxlen=20)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.created, record.getMessage()))


_RECENT = _RecentErrors()
logging.getLogger("aiokafka").addHandler(_RECENT)


def recent_kafka_errors(within_s: float = 60.0) -> list[str]:
    """aiokafka's errors of the last ``within_s`` seconds, oldest first."""
    since = time.time() - within_s
    return [message for created, message in _RECENT.messages if created >= since]


@contextlib.contextmanager
def quiet_aiokafka() -> Iterator[None]:
    """aiokafka logs every refused connection at ERROR: where our own error says it once
    (a readiness poll, an unreachable broker), its retries are only noise. They are still
    recorded (``recent_kafka_errors``), only not shown."""
    logger = logging.getLogger("aiokafka")
    previous = logger.propagate, logger.level
    logger.propagate = False
    logger.setLevel(min(previous[1] or logging.ERROR, logging.ERROR))
    try:
        yield
    finally:
        logger.propagate, _ = previous
        logger.setLevel(previous[1])
