"""The hash chain: every event commits to its content and to its predecessor.

``hash = sha256(canonical encoding).hexdigest()`` where the canonical encoding is the Avro
binary body (no single-object header) of the ``ares.v1.Event`` record with

* ``hash`` = ``""`` (the field being computed; it is the schema's last field),
* ``prev_hash`` = the previous event's hash (64 zeros before version 1),
* ``metadata`` sorted by key, written as one map block (the common Avro writer behaviour),
* ``payload`` as the typed record of its event type, ``JsonPayload`` with canonical JSON
  (sorted keys, no whitespace) for every other type.

Any Avro implementation can reproduce it from the .avsc file alone (see
tests/unit/test_reference_avro.py). Hashing the Avro body rather than, say, JSON means one
encoding for the wire and the chain: sealing an event costs one Avro encode, and the wire
bytes are the canonical bytes with the hash spliced in.

An event stays verifiable after an Event schema upgrade: its hash was computed with the
schema it was written with, so verification tries the current schema and then the released
ones (``schemas/released``), remembering the last that matched (streams are homogeneous).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

from ares.errors import IntegrityError
from ares.events.model import Event, NewEvent, StreamHead, utc_now
from ares.events.wire.codec import (
    Codec,
    CodecError,
    default_codec,
    event_from_fields,
    normalize_metadata,
)
from ares.events.wire.schemas import EVENT, SchemaFile

# Avro encoding of a 64-character string: zig-zag varint length (128 = 80 01), then UTF-8.
_HASH_LENGTH_PREFIX: Final = b"\x80\x01"
_UTC: Final = UTC
_sha256: Final = hashlib.sha256


class ChainError(IntegrityError):
    """A stream's chain is broken at ``version``; ``kind`` says how.

    kinds: gap, duplicate, prev_hash_mismatch, hash_mismatch, foreign_stream, unsealable.
    """

    def __init__(self, stream_id: str, version: int, kind: str, detail: str) -> None:
        super().__init__(f"stream {stream_id!r} version {version}: {kind}: {detail}")
        self.stream_id = stream_id
        self.version = version
        self.kind = kind


def event_hash(event: Event, codec: Codec | None = None) -> str:
    """The hash ``event`` must carry (its own ``hash`` field is ignored)."""
    body = (codec or default_codec()).event_body(event)
    return hashlib.sha256(body).hexdigest()


def seal_encoded(stream_id: str, head: tuple[int, str], new: NewEvent, version: int,
                 timestamp: datetime | None = None, *,
                 codec: Codec | None = None) -> tuple[Event, bytes]:
    """The stored form of ``new`` as event ``version`` after ``head``, and its wire bytes,
    from a single Avro encode: the one way an event is sealed.

    ``head`` is the stream's head before it: a ``StreamHead``, or a plain ``(version,
    hash)`` pair (a writer sealing several events of one append makes no ``StreamHead``
    between them). The timestamp is ``timestamp``, else ``new.timestamp``, else now; it is
    kept in UTC at microsecond precision, so the sealed event equals itself decoded from
    Kafka. ``ChainError`` when ``version`` does not follow the head.
    """
    head_version, prev_hash = head
    codec = codec or default_codec()
    if version != head_version + 1:
        kind = "gap" if version > head_version + 1 else "duplicate"
        raise ChainError(stream_id, version, kind,
                         f"cannot seal version {version} after head version {head_version}")
    # Each field of ``new`` read once: a NewEvent's attributes are generic lookups here.
    event_id, event_type, module = new.id, new.type, new.module
    try:
        prepared = codec.prepare_payload(event_type, new.payload)
    except CodecError as e:
        raise CodecError(e.reason, f"stream {stream_id!r} version {version}: {e.detail}") from e
    stamp = _utc(timestamp or new.timestamp or utc_now())
    metadata = normalize_metadata(new.metadata)
    unhashed = codec.unhashed_body(id=event_id, stream_id=stream_id, type=event_type,
                                   module=module, version=version, timestamp=stamp,
                                   prepared=prepared, metadata=metadata, prev_hash=prev_hash)
    # The canonical body ends with the empty hash string (one 00 byte); the wire body ends
    # with the hash itself.
    digest = _sha256(unhashed + b"\x00").hexdigest()
    wire = codec.frame_event(unhashed + _HASH_LENGTH_PREFIX + digest.encode("ascii"))
    sealed = event_from_fields(event_id, stream_id, event_type, module, version, stamp,
                               prepared.value, metadata, prev_hash, digest)
    return sealed, wire


def verify_chain(events: Iterable[Event], start: StreamHead | None = None, *,
                 check_hashes: bool = True, codec: Codec | None = None) -> StreamHead:
    """Check that ``events`` continue the stream at ``start``; return the new head.

    ``start`` is the head before the first event (``StreamHead()`` for a stream read from
    version 1, a snapshot's version and hash otherwise). Raises ``ChainError`` (an
    ``IntegrityError``) naming the stream, the version and what is wrong.
    """
    head = start if start is not None else StreamHead()
    version, digest = head.version, head.hash  # no StreamHead per event: replays call this a lot
    hasher = _Hasher(codec or default_codec()) if check_hashes else None
    stream_id: str | None = None
    for event in events:
        if stream_id is None:
            stream_id = event.stream_id
        elif event.stream_id != stream_id:
            raise ChainError(stream_id, event.version, "foreign_stream",
                             f"event {event.id} belongs to stream {event.stream_id!r}")
        expected = version + 1
        if event.version != expected:
            kind = "duplicate" if event.version < expected else "gap"
            raise ChainError(stream_id, event.version, kind,
                             f"expected version {expected} after {version}, "
                             f"found {event.version}")
        if event.prev_hash != digest:
            raise ChainError(stream_id, event.version, "prev_hash_mismatch",
                             f"prev_hash {event.prev_hash[:16]}... does not match the hash "
                             f"{digest[:16]}... of version {version}")
        if hasher is not None:
            hasher.check(event)
        version, digest = event.version, event.hash
    return head if version == head.version else StreamHead(version, digest)


_HASHED_TAIL = 66  # the hash field of an Event body: length 64 (80 01) + 64 hex characters


class _Hasher:
    """Recomputes hashes, trying the Event schema that matched last first."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        # Needed only when the fast path fails: listing them sorts the releases, which
        # single-event verify_chain calls would otherwise pay every time.
        self._versions: list[SchemaFile] | None = None

    def check(self, event: Event) -> None:
        body = event.wire_body
        # Fast path: the body as read ends with the 64-character hash (66 bytes with its
        # length); with an empty hash instead (one 00 byte) it is what the writer hashed.
        if body is not None and len(body) > _HASHED_TAIL and hashlib.sha256(
                body[:-_HASHED_TAIL] + b"\x00").hexdigest() == event.hash:
            return
        if self._versions is None:
            self._versions = self._codec.schemas.versions_of(EVENT)
        versions = self._versions
        for i, schema in enumerate(versions):
            try:
                body = self._codec.event_body(event, schema=schema)
            except CodecError:
                continue  # e.g. a payload record this older schema does not have
            if hashlib.sha256(body).hexdigest() == event.hash:
                if i:
                    versions.insert(0, versions.pop(i))
                return
        recomputed = _try_hash(self._codec, event)
        raise ChainError(event.stream_id, event.version, "hash_mismatch",
                         f"stored hash {event.hash[:16]}... but the content hashes to "
                         f"{recomputed[:16]}... (event {event.id}, type {event.type})")


def _try_hash(codec: Codec, event: Event) -> str:
    try:
        return event_hash(event, codec)
    except CodecError as e:
        return f"<unencodable: {e.reason}>"


def _utc(ts: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken as UTC, never as local time."""
    tz = ts.tzinfo
    if tz is _UTC:  # what utc_now() and decoding give: nothing to convert
        return ts
    return ts.replace(tzinfo=_UTC) if tz is None else ts.astimezone(_UTC)


__all__ = ["ChainError", "event_hash", "seal_encoded", "verify_chain"]
