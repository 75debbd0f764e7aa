"""Logging for the services: one JSON object per line, with the emitting module on each."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime


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
    # aiokafka narrates every reconnect at INFO/ERROR; keep its warnings only.
    logging.getLogger("aiokafka").setLevel(max(root.level, logging.WARNING))


@contextlib.contextmanager
def quiet_aiokafka() -> Iterator[None]:
    """aiokafka logs every refused connection at ERROR: where our own error says it once
    (a readiness poll, an unreachable broker), its retries are only noise."""
    logger = logging.getLogger("aiokafka")
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)
