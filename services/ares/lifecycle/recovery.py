"""Recovery of a partition: where to seek, what to trust, what to verify, what to record.

Recovery is a partition scan (DESIGN.md, principle 5): load the partition's snapshots, seek
``ares.events``/p to the smallest offset any live stream still needs, replay to the high
watermark, and route each event to its stream. This module is the pure half of it:

* ``plan_recovery`` turns the snapshots found and the streams known into a ``RecoveryPlan``
  (seek offset, per-stream start head and version);
* ``validate_snapshot`` checks a snapshot against the log: never trust a snapshot over the
  log — one whose version or hash does not match the chain is discarded
  (``RecoveryPlan.discard``) and that stream is replayed in full;
* ``StreamVerifier`` checks each stream incrementally from its start head (version
  continuity, hash chain and, with a keyring configured, each event's signature, through
  ``ares.events.chain.verify_chain``) and reports the first failure (stream, version,
  what): a missing or wrong signature is a broken chain (quarantine, integrity alert);
* ``RecoveryRecord`` is the recovery record of one agent, written with
  ``agent.resurrected``; ``state_hash`` is the SHA-256 of the canonical JSON of a state.

Offsets: a snapshot's ``events_offset`` is where its stream's replay may begin. Whether it
is the offset of the event at the snapshot's version (ares.v1.Snapshot.avsc) or the one
right after it (``ares.events.kafka.snapshots``) does not matter here: the verifier accepts
either the anchor event (the one at the snapshot's version: its hash must be the
snapshot's) or the first event after it (its ``prev_hash`` must be the snapshot's hash),
and skips the events the snapshot covers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from ares.events.model import Event, StreamHead
from ares.events.wire.canonical import canonical_json
from ares.events.wire.codec import Codec

if TYPE_CHECKING:
    from ares.lifecycle.verification import StreamVerifier

# The snapshot key and kind of a partition checkpoint (the heads of every stream of the
# partition at an offset): a snapshot that is no agent's, kept in ares.snapshots.
CHECKPOINT_KEY = "__partition__"
CHECKPOINT_KIND = "ares.partition"

# -- plans -------------------------------------------------------------------------------


class SnapshotRef(Protocol):
    """What recovery needs of a snapshot (``ares.events.kafka.snapshots.Snapshot`` has it)."""

    @property
    def stream_id(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def hash(self) -> str: ...
    @property
    def events_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    stream_id: str
    version: int  # last stream version the snapshot covers
    hash: str  # hash of the event at ``version``
    events_offset: int  # where in ares.events/p the stream's replay may begin

    @classmethod
    def of(cls, snapshot: SnapshotRef) -> SnapshotInfo:
        return cls(snapshot.stream_id, snapshot.version, snapshot.hash, snapshot.events_offset)

    @property
    def head(self) -> StreamHead:
        return StreamHead(self.version, self.hash)


@dataclass(frozen=True, slots=True)
class KnownStream:
    """A stream of the partition, as the owner's stream table or the stream index knows it.

    ``first_offset``: offset of its first event (None: unknown, replay from the log start);
    ``head``: its current head (enables checks of snapshots and truncation);
    ``live``: False for a stream stopped or quarantined, which needs no replay now (the
    flag comes from a projection: recover such a stream on its own when it is resumed).
    """

    stream_id: str
    first_offset: int | None = None
    head: StreamHead | None = None
    live: bool = True


@dataclass(frozen=True, slots=True)
class StreamPlan:
    stream_id: str
    snapshot: SnapshotInfo | None  # None: replay from version 1
    from_offset: int  # the stream's replay needs nothing before this offset
    first_offset: int | None = None
    expected: StreamHead | None = None  # the head the replay must reach, if known
    live: bool = True

    @property
    def start(self) -> StreamHead:
        """The head before the first event to apply."""
        return self.snapshot.head if self.snapshot is not None else StreamHead()

    @property
    def start_version(self) -> int:
        """The first version to apply."""
        return self.start.version + 1


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    streams: Mapping[str, StreamPlan]
    seek_offset: int | None  # None: no live stream, nothing to replay
    log_start: int = 0
    discarded: Mapping[str, str] = field(default_factory=dict)  # stream -> why

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", MappingProxyType(dict(self.streams)))
        object.__setattr__(self, "discarded", MappingProxyType(dict(self.discarded)))

    def stream(self, stream_id: str) -> StreamPlan | None:
        return self.streams.get(stream_id)

    def verifier(self, stream_id: str, *, check_hashes: bool = True,
                 codec: Codec | None = None) -> StreamVerifier | None:
        """A verifier for a live planned stream; None for the others, whose events the
        scan does not route (a stream unknown to the plan may have begun before
        ``seek_offset``: plan it, and rescan, rather than guess)."""
        from ares.lifecycle.verification import StreamVerifier  # it reads this module's plans

        plan = self.streams.get(stream_id)
        if plan is None or not plan.live:
            return None
        return StreamVerifier(stream_id, plan.snapshot, check_hashes=check_hashes, codec=codec)

    def discard(self, stream_id: str, reason: str) -> RecoveryPlan:
        """This plan with ``stream_id``'s snapshot dropped: that stream is replayed from
        version 1. When ``seek_offset`` moves down, the caller rescans the stream from its
        ``from_offset`` (its state so far is thrown away with the snapshot)."""
        plan = self.streams[stream_id]
        fallback = replace(plan, snapshot=None,
                           from_offset=_start_offset(plan.first_offset, self.log_start))
        streams = {**self.streams, stream_id: fallback}
        return RecoveryPlan(streams, _seek(streams.values()), self.log_start,
                            {**self.discarded, stream_id: reason})


def plan_recovery(snapshots: Iterable[SnapshotRef] | Mapping[str, SnapshotRef],
                  streams: Iterable[KnownStream | str] = (), *,
                  log_start: int = 0) -> RecoveryPlan:
    """The plan for one partition.

    ``snapshots``: the latest snapshot per stream (a mapping by stream id, or an iterable in
    log order: the last one of a stream wins). ``streams``: the streams known to exist; a
    stream with a snapshot is known even if not listed. ``log_start``: the partition's first
    offset (its low watermark). The seek offset is the smallest offset a live stream needs:
    its snapshot's offset, else its first event's offset, else the log start. Snapshots that
    contradict a known head are discarded here, before any read.
    """
    known: dict[str, KnownStream] = {}
    for s in streams:
        known_stream = KnownStream(s) if isinstance(s, str) else s
        known[known_stream.stream_id] = known_stream
    latest: dict[str, SnapshotInfo] = {}
    discarded: dict[str, str] = {}
    items = snapshots.items() if isinstance(snapshots, Mapping) else (
        (s.stream_id, s) for s in snapshots)
    for key, snapshot in items:
        info = SnapshotInfo.of(snapshot)
        if info.stream_id != key:
            discarded[key] = f"{FOREIGN_STREAM}: filed under {key!r}, covers {info.stream_id!r}"
            continue
        latest[key] = info
        known.setdefault(key, KnownStream(key))
    plans: dict[str, StreamPlan] = {}
    for stream_id, stream in known.items():
        snapshot = latest.get(stream_id)
        if snapshot is not None:
            problem = _malformed(snapshot) or _contradicts(snapshot, stream.head)
            if problem is not None:
                discarded[stream_id] = problem
                snapshot = None
        offset = (max(snapshot.events_offset, log_start) if snapshot is not None
                  else _start_offset(stream.first_offset, log_start))
        plans[stream_id] = StreamPlan(stream_id, snapshot, offset, stream.first_offset,
                                      stream.head, stream.live)
    return RecoveryPlan(plans, _seek(plans.values()), log_start, discarded)


def _start_offset(first_offset: int | None, log_start: int) -> int:
    return log_start if first_offset is None else max(first_offset, log_start)


def _seek(plans: Iterable[StreamPlan]) -> int | None:
    return min((p.from_offset for p in plans if p.live), default=None)


def _contradicts(snapshot: SnapshotInfo, head: StreamHead | None) -> str | None:
    """What a known head alone disproves: a snapshot past the head, or at the head with
    another hash. A head past the snapshot proves nothing yet: the scan checks the event
    after the snapshot."""
    if head is None or head.version > snapshot.version:
        return None
    check = validate_snapshot(snapshot, None, head)
    return None if check.ok else check.describe()


def _malformed(snapshot: SnapshotInfo) -> str | None:
    if snapshot.version < 1:
        return f"{VERSION_MISMATCH}: a snapshot covers version >= 1, not {snapshot.version}"
    if snapshot.events_offset < 0:
        return f"{INVALID_OFFSET}: negative events_offset {snapshot.events_offset}"
    return None


# -- snapshot validation -----------------------------------------------------------------

FOREIGN_STREAM = "foreign_stream"
VERSION_MISMATCH = "version_mismatch"
HASH_MISMATCH = "hash_mismatch"
AHEAD_OF_LOG = "ahead_of_log"
INVALID_OFFSET = "invalid_offset"
UNVERIFIED = "unverified"


@dataclass(frozen=True, slots=True)
class SnapshotCheck:
    reason: str | None = None  # None: the snapshot matches the log
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None

    def describe(self) -> str:
        return f"{self.reason}: {self.detail}" if self.reason else "ok"


def validate_snapshot(snapshot: SnapshotRef, first_event_after: Event | None,
                      head: StreamHead | None = None) -> SnapshotCheck:
    """Does the log agree with ``snapshot``?

    ``first_event_after``: the first event of the stream met at or after the snapshot's
    offset — the anchor (version == snapshot version: same hash) or its successor
    (version + 1: ``prev_hash`` == snapshot hash). Without one, ``head`` (the stream's head
    as the writer knows it) decides; without either the snapshot is ``unverified``, which a
    caller must treat as a discard: never trust a snapshot over the log.
    """
    version, digest = snapshot.version, snapshot.hash
    event = first_event_after
    if event is not None:
        if event.stream_id != snapshot.stream_id:
            return SnapshotCheck(FOREIGN_STREAM, f"event {event.id} is of stream "
                                 f"{event.stream_id!r}, the snapshot of "
                                 f"{snapshot.stream_id!r}")
        if event.version == version:
            if event.hash != digest:
                return SnapshotCheck(HASH_MISMATCH, f"snapshot hash {digest[:16]}... but the "
                                     f"event at version {version} has {event.hash[:16]}...")
            return SnapshotCheck()
        if event.version == version + 1:
            if event.prev_hash != digest:
                return SnapshotCheck(HASH_MISMATCH, f"snapshot hash {digest[:16]}... but "
                                     f"version {event.version} follows "
                                     f"{event.prev_hash[:16]}...")
            return SnapshotCheck()
        return SnapshotCheck(VERSION_MISMATCH, f"snapshot at version {version}, but the "
                             f"first event after its offset is version {event.version}")
    if head is None:
        return SnapshotCheck(UNVERIFIED, f"no event at or after version {version} was found "
                             "and the stream's head is unknown")
    if head.version < version:
        return SnapshotCheck(AHEAD_OF_LOG, f"snapshot at version {version}, but the stream "
                             f"ends at version {head.version}")
    if head.version > version:
        return SnapshotCheck(VERSION_MISMATCH, f"snapshot at version {version}: the stream "
                             f"goes on to {head.version} but no later event followed the "
                             "snapshot's offset")
    if head.hash != digest:
        return SnapshotCheck(HASH_MISMATCH, f"snapshot hash {digest[:16]}... but the stream "
                             f"head at version {version} has {head.hash[:16]}...")
    return SnapshotCheck()


# -- the recovery record -----------------------------------------------------------------


def state_hash(state: Any) -> str:
    """SHA-256 hex of the canonical JSON of ``state`` (an agent's ``snapshot()`` or
    ``AgentLifecycle.to_json()``); ``ValueError`` for what JSON cannot hold exactly."""
    return hashlib.sha256(canonical_json(state).encode()).hexdigest()


_META = "ares.recovery."


@dataclass(frozen=True, slots=True)
class RecoveryRecord:
    """How one agent was recovered. Fields read back from an event that lacks them (an
    older writer) are None: unknown, which is not the same as false or zero."""

    stream_id: str
    snapshot_version: int | None  # None: full replay
    snapshot_offset: int | None
    events_replayed: int
    load_s: float | None
    replay_s: float | None
    resume_s: float | None
    verified: bool | None
    resulting_version: int | None
    state_hash: str | None
    snapshot_discarded: str | None = None  # why a snapshot found was not used
    reported_s: float | None = None  # the total an event reported, when phases are missing
    # The checks the recovery ran (ares.lifecycle.verification: chain, versions,
    # snapshot_anchor, head, signature); None: an older writer did not say. ``verified`` is
    # derived from them by ``checked``, never asserted by a caller.
    checks: tuple[str, ...] | None = None

    @staticmethod
    def checked(checks: tuple[str, ...], failed: bool) -> bool:
        """Verified: no check failed and the hash chain was among those that ran (a
        recovery that checked nothing of the log has verified nothing)."""
        return not failed and "chain" in checks

    def resumed(self, resume_s: float) -> RecoveryRecord:
        """The record with its resume phase, measured by the caller where the agent resumes
        (just before ``agent.resurrected`` is appended)."""
        return replace(self, resume_s=max(resume_s, 0.0))

    @property
    def recovery_s(self) -> float | None:
        if self.load_s is None or self.replay_s is None or self.resume_s is None:
            return self.reported_s
        return self.load_s + self.replay_s + self.resume_s

    def to_payload(self, *, incarnation: int, parent_incarnation: int,
                   worker: str | None = None) -> dict[str, Any]:
        """The ``agent.resurrected`` payload (every field of AgentResurrected)."""
        total = self.recovery_s
        return {"incarnation": incarnation, "parent_incarnation": parent_incarnation,
                "worker": worker, "snapshot_version": self.snapshot_version,
                "replayed_events": self.events_replayed,
                "recovery_ms": 0 if total is None else round(total * 1000)}

    def to_metadata(self) -> dict[str, str]:
        """What AgentResurrected has no field for, as event metadata (until it has)."""
        values: dict[str, Any] = {
            "snapshot_offset": self.snapshot_offset, "load_ms": _ms(self.load_s),
            "replay_ms": _ms(self.replay_s), "resume_ms": _ms(self.resume_s),
            "verified": None if self.verified is None else str(self.verified).lower(),
            "version": self.resulting_version, "state_hash": self.state_hash,
            "snapshot_discarded": self.snapshot_discarded,
            "checks": None if self.checks is None else ",".join(self.checks),
        }
        return {_META + k: str(v) for k, v in values.items() if v is not None}

    @classmethod
    def from_event(cls, event: Event) -> RecoveryRecord:
        """Read back from an ``agent.resurrected`` event (payload and metadata)."""
        p, m = event.payload, event.metadata
        total = p.get("recovery_ms")
        return cls(
            stream_id=event.stream_id,
            snapshot_version=_as_int(p.get("snapshot_version")),
            snapshot_offset=_as_int(m.get(_META + "snapshot_offset")),
            events_replayed=_as_int(p.get("replayed_events")) or 0,
            load_s=_seconds(m.get(_META + "load_ms")),
            replay_s=_seconds(m.get(_META + "replay_ms")),
            resume_s=_seconds(m.get(_META + "resume_ms")),
            verified={"true": True, "false": False}.get(m.get(_META + "verified", "")),
            resulting_version=_as_int(m.get(_META + "version")),
            state_hash=m.get(_META + "state_hash"),
            snapshot_discarded=m.get(_META + "snapshot_discarded"),
            reported_s=_seconds(total),
            checks=None if (checks := m.get(_META + "checks")) is None
            else tuple(c for c in checks.split(",") if c),
        )

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_version": self.snapshot_version,
                "snapshot_offset": self.snapshot_offset,
                "snapshot_discarded": self.snapshot_discarded,
                "events_replayed": self.events_replayed, "load_ms": _ms(self.load_s),
                "replay_ms": _ms(self.replay_s), "resume_ms": _ms(self.resume_s),
                "recovery_ms": _ms(self.recovery_s), "verified": self.verified,
                "checks": None if self.checks is None else list(self.checks),
                "resulting_version": self.resulting_version, "state_hash": self.state_hash}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _seconds(ms: Any) -> float | None:
    try:
        return None if ms is None or isinstance(ms, bool) else float(ms) / 1000
    except (TypeError, ValueError):
        return None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(value) if isinstance(value, str) else None
    except ValueError:
        return None


__all__ = [
    "AHEAD_OF_LOG", "FOREIGN_STREAM", "HASH_MISMATCH", "INVALID_OFFSET", "UNVERIFIED",
    "VERSION_MISMATCH", "KnownStream", "RecoveryPlan", "RecoveryRecord", "SnapshotCheck",
    "SnapshotInfo", "SnapshotRef", "StreamPlan", "plan_recovery", "state_hash",
    "validate_snapshot",
]
