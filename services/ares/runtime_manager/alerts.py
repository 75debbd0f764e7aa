"""Alerts on ``ares.alerts``: integrity failures, quarantines, in-doubt tool calls."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ares.events.model import utc_now
from ares.events.wire.codec import encode
from ares.events.wire.schemas import ALERT


def alert_record(kind: str, stream_id: str, message: str, *, severity: str = "warning",
                 source: str = "runtime-manager",
                 details: Mapping[str, object] | None = None) -> bytes:
    return encode(ALERT, {
        "id": str(uuid.uuid4()), "stream_id": stream_id, "kind": kind, "severity": severity,
        "message": message, "source": source, "timestamp": utc_now(),
        "details": {k: str(v) for k, v in (details or {}).items()},
    })
