"""Where a partition of ``ares.events`` may be trimmed, and what holds it back (pure).

Kafka deletes records per partition (DeleteRecords: everything before an offset), not per
stream, so the trim point of partition p is the minimum over every stream of p of the
offset up to which the stream needs nothing more from the log:

* the stream's events up to ``covered = min(summarised through, snapshot version)`` are
  both summarised and snapshotted; it needs its first event after ``covered``;
* a snapshot whose agent has open tasks needs its journal from ``journal_from`` on (the
  host replays from there, ``replay.replay_start``);
* without a partition checkpoint the owner rebuilds stream heads from the log alone, so
  every stream keeps its head event; with one, nothing at or after the checkpoint's
  ``events_offset`` may go (the owner scans from there and trusts the heads it holds);
* a stream without a snapshot, without a summary, or whose log is broken holds the
  partition at its first offset; so does a snapshot that contradicts the log.

Streams of stopped agents count like any other. The last stable offset bounds everything:
an open transaction's records are never trimmed.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from ares.compactor.index import StreamIndex
from ares.summaries.record import Summary


class Hold(StrEnum):
    NO_SNAPSHOT = "no_snapshot"
    NO_SUMMARY = "no_summary"
    SNAPSHOT = "snapshot"  # the snapshot is older than the summaries
    SUMMARY = "summary"  # summarised up to here (threshold / keep_recent)
    JOURNAL = "journal"  # an open task's journal
    HEAD = "head"  # the stream's head event (no partition checkpoint)
    BROKEN = "broken"  # gap or duplicate in the stream's log
    SNAPSHOT_MISMATCH = "snapshot_mismatch"
    CHECKPOINT = "checkpoint"  # the partition checkpoint's offset
    END = "end"  # the last stable offset: nothing older is held
    REBALANCE = "rebalance"  # the runtime group is not settled: owners may be recovering


class SnapshotLike(Protocol):
    @property
    def version(self) -> int: ...
    @property
    def events_offset(self) -> int: ...
    @property
    def state(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class StreamLimit:
    """How far the partition may be trimmed as far as one stream is concerned."""

    stream_id: str
    limit: int | None  # records before this offset may go; None: the stream holds nothing
    hold: Hold
    detail: str


@dataclass(frozen=True, slots=True)
class TrimPlan:
    partition: int
    log_start: int
    end_offset: int  # last stable offset when planned
    safe_point: int  # delete the records before this offset (>= log_start)
    held_by: str | None  # the stream that holds the trim point; None: checkpoint or end
    hold: Hold
    detail: str
    limits: tuple[StreamLimit, ...] = ()

    @property
    def trimmable(self) -> int:
        """Records the plan would delete."""
        return self.safe_point - self.log_start

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "log_start_offset": self.log_start,
                "end_offset": self.end_offset, "trim_point": self.safe_point,
                "held_by": self.held_by, "hold": self.hold.value, "detail": self.detail}


def summarised_through(summaries: Iterable[Summary], first_version: int | None) -> int:
    """The last version of the summary chain that reaches back to the log.

    ``first_version``: the stream's first version still in the log (None: none left, then
    the chain may start anywhere). Summaries must follow each other without a gap (and
    chain-wise: each ``prev_hash`` the previous anchor); the chain must begin at or before
    ``first_version``. 0 when no summary covers the start of what is in the log.
    """
    ordered = sorted(summaries, key=lambda s: (s.from_version, s.to_version))
    if not ordered:
        return 0
    first = ordered[0]
    if first_version is not None and first.from_version > max(first_version, 1):
        return 0
    through, anchor = first.to_version, first.anchor_hash
    for summary in ordered[1:]:
        if summary.to_version <= through:
            continue  # contained in what is already covered
        if summary.from_version != through + 1 or summary.prev_hash != anchor:
            break
        through, anchor = summary.to_version, summary.anchor_hash
    return through


def stream_limit(stream_id: str, stream: StreamIndex | None, snapshot: SnapshotLike | None,
                 through: int, *, checkpoint_heads: Container[str] | None) -> StreamLimit:
    """The offset before which the partition may be trimmed for ``stream_id``'s sake.

    ``checkpoint_heads``: the streams whose heads the partition checkpoint holds (None: no
    checkpoint); any other stream keeps its head event in the log."""
    journal = _journal_from(snapshot)
    if stream is None:  # nothing of it left in the log
        if journal is not None:
            return StreamLimit(stream_id, journal, Hold.JOURNAL,
                               f"open task journal from offset {journal}")
        return StreamLimit(stream_id, None, Hold.END, "no event left in the log")
    first = stream.first_offset
    if stream.broken is not None:
        return StreamLimit(stream_id, first, Hold.BROKEN, stream.broken)
    if snapshot is None:
        return StreamLimit(stream_id, first, Hold.NO_SNAPSHOT,
                           f"no snapshot (stream at version {stream.head_version})")
    problem = snapshot_problem(stream, snapshot)
    if problem is not None:
        return StreamLimit(stream_id, first, Hold.SNAPSHOT_MISMATCH, problem)
    if through < stream.first_version - 1 or through == 0:
        return StreamLimit(stream_id, first, Hold.NO_SUMMARY,
                           f"no summary (stream at version {stream.head_version})")
    covered = min(through, snapshot.version)
    if snapshot.version < through:
        hold, detail = Hold.SNAPSHOT, (f"snapshot at version {snapshot.version}, summarised "
                                       f"through {through}")
    else:
        hold, detail = Hold.SUMMARY, (f"summarised through version {through} of "
                                      f"{stream.head_version}")
    candidates: list[tuple[int, Hold, str]] = []
    needed = stream.first_offset_after(covered)
    if needed is not None:
        candidates.append((needed, hold, detail))
    if journal is not None:
        candidates.append((journal, Hold.JOURNAL, f"open task journal from offset {journal}"))
    if checkpoint_heads is None or stream_id not in checkpoint_heads:
        candidates.append((stream.head_offset, Hold.HEAD,
                           f"head event (version {stream.head_version}); no partition "
                           "checkpoint holds its head"))
    if not candidates:
        return StreamLimit(stream_id, None, Hold.END, f"covered through its head ({detail})")
    limit, hold, detail = min(candidates, key=lambda c: c[0])
    return StreamLimit(stream_id, limit, hold, detail)


def snapshot_problem(stream: StreamIndex, snapshot: SnapshotLike) -> str | None:
    """What the log alone disproves of a snapshot (recovery would discard it and replay the
    stream in full, which needs the whole log)."""
    if snapshot.version > stream.head_version:
        return (f"snapshot at version {snapshot.version} is ahead of the log (version "
                f"{stream.head_version})")
    at = stream.offset_of(snapshot.version)
    # Either convention of events_offset: the anchor's own offset, or the one after it.
    if at is not None and snapshot.events_offset not in (at, at + 1):
        return (f"snapshot at version {snapshot.version} says offset "
                f"{snapshot.events_offset}, the log has that version at {at}")
    return None


def plan_trim(partition: int, log_start: int, end_offset: int,
              limits: Sequence[StreamLimit], checkpoint_offset: int | None, *,
              rebalancing: bool = False, group_state: str | None = None) -> TrimPlan:
    """The partition's safe trim point: never past any stream's limit, the checkpoint or
    the last stable offset; the log start while the runtime group rebalances (or its state
    is unknown: ``group_state`` names it)."""
    held_by: str | None = None
    point, hold, detail = end_offset, Hold.END, f"last stable offset {end_offset}"
    if checkpoint_offset is not None and checkpoint_offset < point:
        point, hold = checkpoint_offset, Hold.CHECKPOINT
        detail = f"partition checkpoint at offset {checkpoint_offset}"
    for limit in sorted((x for x in limits if x.limit is not None),
                        key=lambda x: (x.limit, x.stream_id)):
        assert limit.limit is not None
        if limit.limit < point:
            point, hold, detail, held_by = limit.limit, limit.hold, limit.detail, limit.stream_id
        break
    if rebalancing:
        point, hold, held_by = log_start, Hold.REBALANCE, None
        detail = (f"the runtime group is {group_state or 'rebalancing'}: owners may be "
                  "recovering partitions")
    return TrimPlan(partition, log_start, end_offset, max(point, log_start), held_by, hold,
                    detail, tuple(limits))


def _journal_from(snapshot: SnapshotLike | None) -> int | None:
    if snapshot is None or not hasattr(snapshot.state, "get"):
        return None
    value = snapshot.state.get("journal_from")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = ["Hold", "StreamLimit", "TrimPlan", "plan_trim", "snapshot_problem",
           "stream_limit", "summarised_through"]
