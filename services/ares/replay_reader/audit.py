"""The integrity audit of streams: pure logic over events in log order, no I/O.

``StreamAudit`` checks one stream as a scan meets its records: contiguous versions,
duplicates, ``prev_hash`` links and content hashes — through
``ares.events.chain.verify_chain``, the same check the writer's recovery runs — and keeps
going after a failure (re-anchored on the event that failed), so one report names every
problem of the stream, each with its version, what is wrong and the record's offset.

``finish`` then compares where the log ends with what the rest of the system knows of the
stream (``KnownHead``: its latest snapshot, the owner's partition checkpoint, the projected
stream index): a log that ends before a version they know is truncated; a known hash that
differs from the log's event at that version is a mismatch.

Finding kinds: ``gap`` (a version missing: a dropped event), ``duplicate``,
``prev_hash_mismatch``, ``hash_mismatch`` (a modified or forged event), ``foreign_stream``,
``signature`` (unsigned where the keyring requires a signature, an unknown key, a signature
that does not verify: a well-chained forgery), ``undecodable`` (a record of the stream that
no schema reads), ``misrouted`` (an event
under another stream's key), ``missing_history`` (the log begins after version 1 and no
anchored summary accounts for the rest), ``truncated``, ``head_mismatch``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ares.events.chain import ChainError, verify_chain
from ares.events.model import Event, StreamHead
from ares.events.ports import SummaryAnchor
from ares.events.signing import SIGNATURE
from ares.events.wire.codec import Codec
from ares.replay_reader.source import anchor_for

GAP = "gap"
DUPLICATE = "duplicate"
UNDECODABLE = "undecodable"
MISROUTED = "misrouted"
MISSING_HISTORY = "missing_history"
TRUNCATED = "truncated"
HEAD_MISMATCH = "head_mismatch"
DEFAULT_MAX_FINDINGS = 50


@dataclass(frozen=True, slots=True)
class Finding:
    stream_id: str
    version: int
    kind: str
    detail: str
    offset: int | None = None  # where in the stream's partition, when a record shows it

    def to_json(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id, "version": self.version, "kind": self.kind,
                "detail": self.detail, "offset": self.offset}

    def line(self) -> str:
        where = "" if self.offset is None else f" (offset {self.offset})"
        return f"stream {self.stream_id!r} version {self.version}: {self.kind}: " \
               f"{self.detail}{where}"


@dataclass(frozen=True, slots=True)
class KnownHead:
    """A version of the stream some other part of the system knows (and its hash)."""

    version: int
    hash: str | None
    source: str  # snapshot | checkpoint | index


@dataclass(slots=True)
class StreamReport:
    stream_id: str
    events: int = 0
    first_version: int | None = None
    head_version: int = 0
    expected: KnownHead | None = None
    findings: list[Finding] = field(default_factory=list)
    more_findings: int = 0  # beyond the cap
    summarised: SummaryAnchor | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        expected = self.expected
        return {
            "stream_id": self.stream_id, "ok": self.ok, "events": self.events,
            "first_version": self.first_version, "head_version": self.head_version,
            "expected_version": None if expected is None else expected.version,
            "expected_from": None if expected is None else expected.source,
            "findings": [f.to_json() for f in self.findings],
            "more_findings": self.more_findings,
            "summarised": None if self.summarised is None else self.summarised.to_json(),
        }


class StreamAudit:
    """Feed a stream's events in log order (``feed``/``feed_many``), then ``finish``."""

    def __init__(self, stream_id: str, *, watch: Iterable[int] = (),
                 max_findings: int = DEFAULT_MAX_FINDINGS, codec: Codec | None = None) -> None:
        self.report = StreamReport(stream_id)
        self.head = StreamHead()
        self.first: Event | None = None
        self._watch = set(watch)
        self._hashes: dict[int, str] = {}  # version -> hash, for the watched versions
        self._max = max_findings
        self._codec = codec
        self._signed = False  # an event of the stream was signed: none after it may be unsigned

    @property
    def stream_id(self) -> str:
        return self.report.stream_id

    def add(self, version: int, kind: str, detail: str, offset: int | None = None) -> None:
        if len(self.report.findings) >= self._max:
            self.report.more_findings += 1
            return
        self.report.findings.append(Finding(self.stream_id, version, kind, detail, offset))

    def undecodable(self, offset: int, reason: str) -> None:
        self.add(self.head.version + 1, UNDECODABLE, f"a record of the stream does not "
                 f"decode: {reason}", offset)

    def feed_many(self, events: Sequence[tuple[int, Event]]) -> None:
        """Consecutive (offset, event) of the stream: one ``verify_chain`` call for the run
        when it is intact (the common case), event by event to locate a failure."""
        if not events:
            return
        if self.first is not None and all(e.stream_id == self.stream_id for _, e in events):
            try:
                head = verify_chain([e for _, e in events], self.head, codec=self._codec,
                                    after_signed=self._signed)
            except ChainError:
                pass
            else:
                for _, event in events:
                    self._accept(event)
                self.head = head
                return
        for offset, event in events:
            self.feed(offset, event)

    def feed(self, offset: int, event: Event) -> None:
        if event.stream_id != self.stream_id:
            self.add(event.version, MISROUTED, f"event {event.id} of stream "
                     f"{event.stream_id!r} under this stream's key", offset)
            return
        if self.first is None:
            self.first = event
            self.report.first_version = event.version
            if event.version > 1:  # trimmed, or missing: ``finish`` asks the summaries
                self.head = StreamHead(event.version - 1, event.prev_hash)
        self._check(offset, event)

    def _check(self, offset: int, event: Event, *, relinked: bool = False) -> None:
        try:
            self.head = verify_chain([event], self.head, codec=self._codec,
                                     after_signed=self._signed)
        except ChainError as exc:
            if exc.kind == DUPLICATE:
                known = self._hashes.get(event.version)
                copy = known == event.hash or (event.version == self.head.version
                                               and event.hash == self.head.hash)
                same = " (an exact copy)" if copy else ""
                self.add(event.version, DUPLICATE, f"version {event.version} appears again"
                         f"{same}, after version {self.head.version}", offset)
                return  # the chain goes on from the head
            if exc.kind == GAP:
                first_missing, last_missing = self.head.version + 1, event.version - 1
                missing = (f"version {first_missing}" if first_missing == last_missing
                           else f"versions {first_missing}..{last_missing}")
                self.add(first_missing, GAP, f"{missing} missing: version {self.head.version}"
                         f" is followed by version {event.version}", offset)
            else:
                self.add(event.version, exc.kind, _detail(exc), offset)
            if exc.kind in ("hash_mismatch", SIGNATURE):
                self.head = StreamHead(event.version, event.hash)  # the next links to it
                self._accept(event)
                return
            if relinked:
                return
            # Re-anchor on the event that failed and check its own content hash.
            self.head = StreamHead(event.version - 1, event.prev_hash)
            self._check(offset, event, relinked=True)
            return
        self._accept(event)

    def _accept(self, event: Event) -> None:
        self._signed = self._signed or event.signature is not None
        self.report.events += 1
        self.report.head_version = max(self.report.head_version, event.version)
        if event.version in self._watch:
            self._hashes[event.version] = event.hash

    def finish(self, known: Sequence[KnownHead] = (),
               summaries: Sequence[SummaryAnchor] = ()) -> StreamReport:
        """The verdict, given what other parts of the system know of the stream."""
        report = self.report
        if self.first is not None and self.first.version > 1:
            anchor = anchor_for(summaries, self.first)
            if anchor is None:
                report.findings.insert(0, Finding(
                    self.stream_id, 1, MISSING_HISTORY,
                    f"the log begins at version {self.first.version} and no summary anchored "
                    f"to its prev_hash accounts for versions 1..{self.first.version - 1}"))
            report.summarised = anchor
        if known:
            top = max(known, key=lambda k: k.version)
            report.expected = top
            if report.head_version < top.version:
                ends = ("holds no event of the stream" if report.events == 0
                        else f"ends at version {report.head_version}")
                self.add(report.head_version + 1, TRUNCATED,
                         f"the log {ends}, but the {top.source} knows version {top.version}")
            for head in known:
                logged = self._hashes.get(head.version)
                if head.hash and logged is not None and logged != head.hash:
                    self.add(head.version, HEAD_MISMATCH,
                             f"the {head.source} has hash {head.hash[:16]}... at version "
                             f"{head.version}, the log's event has {logged[:16]}...")
        return report


def _detail(exc: ChainError) -> str:
    prefix = f"stream {exc.stream_id!r} version {exc.version}: {exc.kind}: "
    text = str(exc)
    return text[len(prefix):] if text.startswith(prefix) else text


@dataclass(slots=True)
class AuditReport:
    topic: str
    streams: list[StreamReport] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # named, but no trace anywhere
    records_scanned: int = 0
    max_replay: int = 0

    @property
    def failed(self) -> list[StreamReport]:
        return [s for s in self.streams if not s.ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def events(self) -> int:
        return sum(s.events for s in self.streams)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "ok": self.ok, "streams_checked": len(self.streams),
                "streams_failed": len(self.failed), "events_verified": self.events,
                "records_scanned": self.records_scanned, "max_replay": self.max_replay,
                "unknown_streams": self.unknown,
                "streams": [s.to_json() for s in self.streams]}

    def lines(self) -> list[str]:
        out: list[str] = []
        for stream in self.failed:
            out.extend(f"FAIL {f.line()}" for f in stream.findings)
            if stream.more_findings:
                out.append(f"FAIL stream {stream.stream_id!r}: {stream.more_findings} more "
                           "finding(s) not shown (--json has the first ones)")
        for stream_id in self.unknown:
            out.append(f"unknown stream {stream_id!r}: no event, snapshot or index entry")
        verdict = "intact" if self.ok else f"{len(self.failed)} FAILED"
        out.append(f"{len(self.streams)} stream(s), {self.events} event(s) verified in "
                   f"{self.topic}: {verdict}")
        return out
