"""What a compaction pass did, and what `ares compaction status` shows, per partition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ares.compactor.trim import StreamLimit, TrimPlan
from ares.summaries.store import TrimRecord


@dataclass(frozen=True, slots=True)
class StreamStatus:
    stream_id: str
    kind: str | None
    first_version: int | None  # first version still in the log (None: none left)
    head_version: int
    summarised_through: int
    summaries: int
    snapshot_version: int | None
    limit: StreamLimit

    @property
    def events_since_summary(self) -> int:
        return max(self.head_version - self.summarised_through, 0)

    def to_json(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id, "kind": self.kind,
                "first_version": self.first_version, "head_version": self.head_version,
                "events_since_summary": self.events_since_summary,
                "summarised_through": self.summarised_through, "summaries": self.summaries,
                "snapshot_version": self.snapshot_version, "limit": self.limit.limit,
                "hold": self.limit.hold.value, "detail": self.limit.detail}


@dataclass(slots=True)
class PartitionReport:
    partition: int
    plan: TrimPlan
    streams: list[StreamStatus] = field(default_factory=list)
    checkpoint_offset: int | None = None
    summaries: int = 0  # live summaries after the pass
    written: int = 0
    merged: int = 0  # summaries replaced by merges
    expired: int = 0
    refreshed: int = 0
    snapshots_requested: int = 0
    snapshots_failed: int = 0
    trimmed: TrimRecord | None = None  # this pass's trim
    last_trim: TrimRecord | None = None  # the latest trim on record
    runtime_group: str | None = None

    @property
    def log_start(self) -> int:
        return self.trimmed.to_offset if self.trimmed is not None else self.plan.log_start

    def to_json(self, *, with_streams: bool = True) -> dict[str, Any]:
        data = {**self.plan.to_json(), "log_start_offset": self.log_start,
                "trimmable": max(self.plan.safe_point - self.log_start, 0),
                "checkpoint_offset": self.checkpoint_offset, "summaries": self.summaries,
                "written": self.written, "merged": self.merged, "expired": self.expired,
                "refreshed": self.refreshed,
                "snapshots_requested": self.snapshots_requested,
                "snapshots_failed": self.snapshots_failed,
                "trimmed": None if self.trimmed is None else self.trimmed.to_json(),
                "last_trim": None if self.last_trim is None else self.last_trim.to_json(),
                "runtime_group": self.runtime_group}
        if with_streams:
            data["streams"] = [s.to_json() for s in self.streams]
        return data

    def lines(self, *, stream_limit: int | None = 20) -> list[str]:
        """The human form: one partition line, then its streams (most behind first)."""
        plan = self.plan
        held = f"held by {plan.held_by} ({plan.hold.value}: {plan.detail})" if plan.held_by \
            else f"{plan.hold.value}: {plan.detail}"
        out = [f"partition {self.partition}: log start {self.log_start}, trim point "
               f"{plan.safe_point}, end {plan.end_offset}; {held}"]
        if self.trimmed is not None:
            out.append(f"  trimmed {self.trimmed.from_offset} -> {self.trimmed.to_offset}")
        work = [f"{n} {label}" for n, label in ((self.written, "summaries written"),
                (self.merged, "merged"), (self.expired, "expired"),
                (self.snapshots_requested, "snapshots requested")) if n]
        if work:
            out.append("  " + ", ".join(work))
        streams = sorted(self.streams, key=lambda s: (-s.events_since_summary, s.stream_id))
        shown = streams if stream_limit is None else streams[:stream_limit]
        for s in shown:
            snap = "-" if s.snapshot_version is None else str(s.snapshot_version)
            out.append(f"  {s.stream_id}: v{s.head_version}, {s.events_since_summary} since "
                       f"summary (summarised through {s.summarised_through}, "
                       f"{s.summaries} summaries), snapshot {snap}, {s.limit.hold.value}")
        if len(shown) < len(streams):
            out.append(f"  ... {len(streams) - len(shown)} more stream(s) (--all)")
        return out
