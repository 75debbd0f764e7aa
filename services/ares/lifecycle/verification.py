"""Verification of a stream while it is replayed: the hash chain, versions, the snapshot it
starts from and the head the log claims. ``StreamVerifier`` says of each event whether to
fold it (``Feed.APPLY``), skip it (covered by the snapshot) or stop (the stream failed:
``VerificationFailure`` says where and why); recovery quarantines such an agent instead of
running it on a history it cannot trust.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ares.events.chain import ChainError, verify_chain
from ares.events.model import Event, StreamHead
from ares.events.signing import SignaturePolicy, default_policy
from ares.events.wire.codec import Codec
from ares.lifecycle.recovery import FOREIGN_STREAM, SnapshotInfo, SnapshotRef, validate_snapshot

# The checks a verifier can run (``StreamVerifier.checks`` names those that did run):
CHAIN = "chain"  # content hashes and prev_hash links of the replayed events
VERSIONS = "versions"  # versions contiguous from the start head
SNAPSHOT_ANCHOR = "snapshot_anchor"  # the snapshot's version and hash against the log
HEAD = "head"  # the replay reached the head the writer knows (not truncated)
SIGNATURES = "signature"  # each replayed event signed by a key of the keyring (if configured)
SNAPSHOT_MISMATCH = "snapshot_mismatch"
TRUNCATED = "truncated"
HEAD_MISMATCH = "head_mismatch"


class Feed(StrEnum):
    APPLY = "apply"  # verified: fold it into the agent's state
    SKIP = "skip"  # covered by the snapshot
    FAILED = "failed"  # the stream failed verification (now or earlier): stop applying


@dataclass(frozen=True, slots=True)
class VerificationFailure:
    """The first failure of a stream. ``kind``: a ``ChainError`` kind (gap, duplicate,
    prev_hash_mismatch, hash_mismatch, foreign_stream, unsealable, signature), ``truncated`` or
    ``head_mismatch`` (the replay did not reach the expected head), or
    ``snapshot_mismatch`` (the log contradicts the snapshot: discard it and replay the
    stream in full; every other kind quarantines the agent with an integrity alert)."""

    stream_id: str
    version: int
    kind: str
    detail: str

    @property
    def discard_snapshot(self) -> bool:
        return self.kind == SNAPSHOT_MISMATCH


class StreamVerifier:
    """Checks one stream's events as a scan meets them, from genesis or a snapshot.

    ``feed`` each event of the stream in log order; ``finish`` at the high watermark. Events
    the snapshot covers are skipped (the one at its version anchors it); then each event
    must continue the chain: next version, ``prev_hash`` of the head, content hash, and,
    with a keyring configured (``signatures``, default the process's), a signature by one
    of its keys: a signature failure is a broken chain like any other (quarantine).
    """

    def __init__(self, stream_id: str, snapshot: SnapshotRef | None = None, *,
                 check_hashes: bool = True, codec: Codec | None = None,
                 signatures: SignaturePolicy | None = None) -> None:
        self.stream_id = stream_id
        self.snapshot = None if snapshot is None else SnapshotInfo.of(snapshot)
        self.head = StreamHead() if self.snapshot is None else self.snapshot.head
        self.applied = 0
        self.failure: VerificationFailure | None = None
        self._anchored = self.snapshot is None
        self._check_hashes = check_hashes
        self._codec = codec
        self._chain_ran = False  # verify_chain was called on at least one event
        self._signatures = signatures if signatures is not None else default_policy()
        # An event of the stream was signed: no later one may be unsigned (no downgrade).
        # Events the snapshot covers are not replayed, so a snapshot's tail starts afresh.
        self._signed = False
        self._anchor_checked = False
        self._head_checked = False

    @property
    def checks(self) -> tuple[str, ...]:
        """The checks that actually ran (passed or not): a recovery record lists them and
        is ``verified`` only if they all passed and the chain was among them."""
        ran: list[str] = []
        if self._chain_ran:
            ran.extend((CHAIN, VERSIONS) if self._check_hashes else (VERSIONS,))
            if self._signatures.active:
                ran.append(SIGNATURES)
        if self._anchor_checked:
            ran.append(SNAPSHOT_ANCHOR)
        if self._head_checked:
            ran.append(HEAD)
        return tuple(ran)

    @property
    def verified(self) -> bool:
        """No failure so far (final only after ``finish``)."""
        return self.failure is None

    def feed(self, event: Event) -> Feed:
        if self.failure is not None:
            return Feed.FAILED
        if event.stream_id != self.stream_id:
            return self._fail(event.version, FOREIGN_STREAM, f"event {event.id} belongs to "
                              f"stream {event.stream_id!r}")
        if not self._anchored:
            assert self.snapshot is not None
            if event.version < self.snapshot.version:
                return Feed.SKIP
            check = validate_snapshot(self.snapshot, event)
            self._anchor_checked = True
            if not check.ok:
                return self._fail(event.version, SNAPSHOT_MISMATCH, check.describe())
            self._anchored = True
            if event.version == self.snapshot.version:
                return Feed.SKIP
        self._chain_ran = True
        try:
            self.head = verify_chain([event], self.head, check_hashes=self._check_hashes,
                                     codec=self._codec, signatures=self._signatures,
                                     after_signed=self._signed)
        except ChainError as exc:
            return self._fail(exc.version, exc.kind, str(exc))
        self._signed = self._signed or event.signature is not None
        self.applied += 1
        return Feed.APPLY

    def feed_many(self, events: Sequence[Event]) -> list[Feed]:
        """``feed`` for consecutive events of the stream (a fetched batch grouped by
        stream): the same verdicts, with one ``verify_chain`` call for the run after the
        snapshot instead of one per event (about half the cost per event)."""
        results: list[Feed] = []
        i = 0
        while i < len(events) and (not self._anchored or self.failure is not None):
            results.append(self.feed(events[i]))
            i += 1
        rest = events[i:]
        if not rest:
            return results
        if rest[0].stream_id == self.stream_id:
            self._chain_ran = True
            try:
                head = verify_chain(rest, self.head, check_hashes=self._check_hashes,
                                    codec=self._codec, signatures=self._signatures,
                                    after_signed=self._signed)
            except ChainError:
                pass  # find the failing event one by one (rare): same verdicts as feed
            else:
                self.head = head
                self._signed = self._signed or any(e.signature is not None for e in rest)
                self.applied += len(rest)
                return [*results, *([Feed.APPLY] * len(rest))]
        return [*results, *(self.feed(event) for event in rest)]

    def finish(self, expected: StreamHead | None = None) -> VerificationFailure | None:
        """The stream's verdict at the end of the replay; ``expected`` is its head as the
        writer knows it (truncation: the replay stopped short of it)."""
        if self.failure is not None:
            return self.failure
        if not self._anchored:
            assert self.snapshot is not None
            check = validate_snapshot(self.snapshot, None, expected)
            self._anchor_checked = True
            if not check.ok:
                self._fail(self.snapshot.version, SNAPSHOT_MISMATCH, check.describe())
                return self.failure
            self._anchored = True
        self._head_checked = self._head_checked or expected is not None
        if expected is not None and self.head != expected:
            if self.head.version < expected.version:
                self._fail(self.head.version + 1, TRUNCATED,
                           f"replay ended at version {self.head.version}, the stream is at "
                           f"{expected.version}")
            else:
                self._fail(self.head.version, HEAD_MISMATCH,
                           f"replay ended at version {self.head.version} "
                           f"({self.head.hash[:16]}...), the writer's head is version "
                           f"{expected.version} ({expected.hash[:16]}...)")
        return self.failure

    def _fail(self, version: int, kind: str, detail: str) -> Feed:
        self.failure = VerificationFailure(self.stream_id, version, kind, detail)
        return Feed.FAILED


__all__ = [
    "CHAIN",
    "HEAD",
    "HEAD_MISMATCH",
    "SIGNATURES",
    "SNAPSHOT_ANCHOR",
    "SNAPSHOT_MISMATCH",
    "TRUNCATED",
    "VERSIONS",
    "Feed",
    "StreamVerifier",
    "VerificationFailure",
]
