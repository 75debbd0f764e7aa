"""The hash chain: every event commits to its content and to its predecessor; a signature
says who wrote it.

``hash = sha256(canonical encoding).hexdigest()`` where the canonical encoding is the Avro
binary body (no single-object header) of the ``ares.v1.Event`` record with

* ``hash`` = ``""`` (the field being computed),
* ``signature`` = ``key_id`` = null (the two fields after ``hash``, the only ones the hash
  does not cover: they sign it),
* ``prev_hash`` = the previous event's hash (64 zeros before version 1),
* ``metadata`` sorted by key, written as one map block (the common Avro writer behaviour),
* ``payload`` as the typed record of its event type, ``JsonPayload`` with canonical JSON
  (sorted keys, no whitespace) for every other type.

Any Avro implementation can reproduce it from the .avsc file alone (see
tests/unit/test_reference_avro.py). Hashing the Avro body rather than, say, JSON means one
encoding for the wire and the chain: sealing an event costs one Avro encode, and the wire
bytes are the canonical bytes with the hash (and the signature) spliced in.

**Signatures** (``ares.events.signing``): a writer with a signing key signs the 32 bytes
of the hash (``bytes.fromhex(hash)``) with Ed25519 and writes the signature and its key's id
in the last two fields. The hash commits to every canonical byte of the event (its stream,
version, content and predecessor), so the signature over it covers exactly what the hash
covers: one signing per event, over 32 bytes, with no second encoding. ``verify_chain``
checks signatures against the process's keyring policy (``signing.default_policy``: none
without ``ARES_KEYRING_FILE``); a missing, unknown-key or wrong signature is a
``ChainError`` of kind ``signature``, like any broken link.

An event stays verifiable after an Event schema upgrade: its hash was computed with the
schema it was written with, so verification tries the current schema and then the released
ones (``schemas/released``), remembering the last that matched (streams are homogeneous).
Events written before the signature fields existed (release v1) hash their v1 body: the
same bytes as today's canonical encoding without its two trailing nulls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

from ares.errors import IntegrityError
from ares.events.model import Event, NewEvent, StreamHead, utc_now
from ares.events.signing import SIGNATURE, SignaturePolicy, Signer, default_policy
from ares.events.wire.codec import (
    CANONICAL_END,
    Codec,
    CodecError,
    default_codec,
    event_from_fields,
    normalize_metadata,
)
from ares.events.wire.envelope import long_bytes, string_bytes
from ares.events.wire.schemas import EVENT, SchemaFile

# Avro encoding of a 64-character string: zig-zag varint length (128 = 80 01), then UTF-8.
_HASH_LENGTH_PREFIX: Final = b"\x80\x01"
# The signature fields of an unsigned event: both null (union branch 0).
_UNSIGNED: Final = b"\x00\x00"
# A signature's start: union branch 1 (bytes), then its length, 64 (80 01).
_SIGNATURE_PREFIX: Final = b"\x02\x80\x01"
_CANONICAL_END: Final = CANONICAL_END
_UTC: Final = UTC
_sha256: Final = hashlib.sha256


class ChainError(IntegrityError):
    """A stream's chain is broken at ``version``; ``kind`` says how.

    kinds: gap, duplicate, prev_hash_mismatch, hash_mismatch, foreign_stream, unsealable,
    signature (unsigned where the keyring requires a signature, unknown key, or a signature
    that does not verify).
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
                 codec: Codec | None = None,
                 signer: Signer | None = None) -> tuple[Event, bytes]:
    """The stored form of ``new`` as event ``version`` after ``head``, and its wire bytes,
    from a single Avro encode: the one way an event is sealed.

    ``head`` is the stream's head before it: a ``StreamHead``, or a plain ``(version,
    hash)`` pair (a writer sealing several events of one append makes no ``StreamHead``
    between them). The timestamp is ``timestamp``, else ``new.timestamp``, else now; it is
    kept in UTC at microsecond precision, so the sealed event equals itself decoded from
    Kafka. ``signer``: sign the hash (``signature`` and ``key_id`` set), else unsigned.
    ``ChainError`` when ``version`` does not follow the head.
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
    # The canonical body ends with the empty hash string and two nulls (00 00 00); the
    # wire body ends with the hash itself, then the signature and its key id (or two nulls).
    hashed = _sha256(unhashed + _CANONICAL_END)
    digest = hashed.hexdigest()
    if signer is None:
        wire = codec.frame_event(unhashed + _HASH_LENGTH_PREFIX + digest.encode("ascii")
                                 + _UNSIGNED)
        sealed = event_from_fields(event_id, stream_id, event_type, module, version, stamp,
                                   prepared.value, metadata, prev_hash, digest)
        return sealed, wire
    signature: bytes = signer.sign(hashed.digest())
    wire = codec.frame_event(unhashed + _HASH_LENGTH_PREFIX + digest.encode("ascii")
                             + _SIGNATURE_PREFIX + signature + signer.tail)
    sealed = event_from_fields(event_id, stream_id, event_type, module, version, stamp,
                               prepared.value, metadata, prev_hash, digest, signature,
                               signer.key_id)
    return sealed, wire


def verify_chain(events: Iterable[Event], start: StreamHead | None = None, *,
                 check_hashes: bool = True, codec: Codec | None = None,
                 signatures: SignaturePolicy | None = None,
                 after_signed: bool = False) -> StreamHead:
    """Check that ``events`` continue the stream at ``start``; return the new head.

    ``start`` is the head before the first event (``StreamHead()`` for a stream read from
    version 1, a snapshot's version and hash otherwise). ``signatures``: the policy to
    check signatures with (default: the process's, ``signing.default_policy``;
    ``signing.UNCHECKED`` for none); ``after_signed``: an event of the stream before
    ``start`` was signed. Raises ``ChainError`` (an ``IntegrityError``) naming the stream,
    the version and what is wrong.
    """
    head = start if start is not None else StreamHead()
    version, digest = head.version, head.hash  # no StreamHead per event: replays call this a lot
    hasher = _Hasher(codec or default_codec()) if check_hashes else None
    chosen = signatures if signatures is not None else default_policy()
    policy: SignaturePolicy | None = chosen if chosen.active else None
    signed = after_signed
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
        if policy is not None:
            problem = policy.check(event, signed)
            if problem is not None:
                raise ChainError(stream_id, event.version, SIGNATURE, problem)
            signed = signed or event.signature is not None
        version, digest = event.version, event.hash
    return head if version == head.version else StreamHead(version, digest)


_HASHED_TAIL = 66  # the hash field of an Event body: length 64 (80 01) + 64 hex characters
_V1_END: Final = b"\x00"  # how a release-v1 canonical body ends: the empty hash, nothing after


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
        # length) and the signature fields; with an empty hash and null signature fields
        # instead it is what the writer hashed. A body of release v1 ends with the hash.
        if body is not None:
            if event.signature is None and body[-1:] != b"\x00":
                # Release v1 (no signature fields: the hash's last character ends the body;
                # an unsigned body of today ends with two nulls).
                if len(body) > _HASHED_TAIL and _sha256(
                        body[:-_HASHED_TAIL] + _V1_END).hexdigest() == event.hash:
                    return
            else:
                end = len(body) - _HASHED_TAIL - _signature_tail(event)
                if end > 0 and _sha256(body[:end] + _CANONICAL_END).hexdigest() == event.hash:
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


def _signature_tail(event: Event) -> int:
    """How many bytes the signature fields of ``event`` take at the end of its body."""
    signature, key_id = event.signature, event.key_id
    size = 2  # two union branches
    if signature is not None:
        size += len(long_bytes(len(signature))) + len(signature)
    if key_id is not None:
        size += len(string_bytes(key_id))
    return size


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
