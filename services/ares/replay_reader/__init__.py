"""The replay reader: the read side of ares-mesh (see docs/replay.md).

The public surface is re-exported here; adapters and services live in their modules
(``kafka_source``, ``pg_store``, ``projector``, ``http_api``, ``service``, ``wiring``).
"""

from __future__ import annotations

from ares.events.ports import EventSource, SummaryAnchor, SummarySource
from ares.replay_reader.audit import AuditReport, Finding, KnownHead, StreamAudit, StreamReport
from ares.replay_reader.fold import FoldedState, StateFolder
from ares.replay_reader.session import (
    NoSuchStreamError,
    ReplaySession,
    ReplayStep,
    ReplaySummary,
)
from ares.replay_reader.source import MemorySource, NoSummaries, anchor_for

__all__ = [
    "AuditReport",
    "EventSource",
    "Finding",
    "FoldedState",
    "KnownHead",
    "MemorySource",
    "NoSuchStreamError",
    "NoSummaries",
    "ReplaySession",
    "ReplayStep",
    "ReplaySummary",
    "StateFolder",
    "StreamAudit",
    "StreamReport",
    "SummaryAnchor",
    "SummarySource",
    "anchor_for",
]
