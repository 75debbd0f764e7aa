"""Event values: what callers append (``NewEvent``) and what the log holds (``Event``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Final, NamedTuple

# The hash-chain head of an empty stream.
GENESIS_HASH = "0" * 64

# expected_version sentinels of EventStore.append.
NO_STREAM: Final = 0  # the stream must be empty
ANY_VERSION: Final = -1  # no check


def new_event_id() -> str:
    return str(uuid.uuid4())


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event as a caller proposes it; the stream's writer assigns version and hashes."""

    type: str
    module: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, str] = field(default_factory=dict)
    id: str = field(default_factory=new_event_id)
    timestamp: datetime | None = None

    def __post_init__(self) -> None:
        if not self.type:
            raise ValueError("an event needs a type (e.g. 'task.assigned')")
        if not self.module:
            raise ValueError(
                f"event {self.type!r} needs a module: say which service or subsystem emits it"
            )


@dataclass(frozen=True, slots=True)
class Event:
    """An event as stored: contiguous 1-based ``version``, a SHA-256 hash chain and, from a
    writer with a signing key, an Ed25519 signature of its hash.

    Sealing and decoding build it with ``codec.event_from_fields``, which relies on its
    slots and on it validating nothing: a field added here is a parameter added there.
    """

    id: str
    stream_id: str
    type: str
    module: str
    version: int
    timestamp: datetime
    payload: Mapping[str, Any]
    metadata: Mapping[str, str]
    prev_hash: str
    hash: str
    # The writer's Ed25519 signature of the 32 bytes of ``hash`` and its key's id
    # (ares.events.signing); None for an unsigned event.
    signature: bytes | None = None
    key_id: str | None = None
    # The Avro body this event was decoded from (set by the codec, never by ``replace``:
    # a changed event must be re-encoded to be checked). Lets a hash check skip the
    # re-encoding: the writer hashed exactly these bytes, with an empty hash field.
    wire_body: bytes | None = field(default=None, init=False, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of `ares events read --json` (one object per line)."""
        return {
            "id": self.id,
            "stream_id": self.stream_id,
            "type": self.type,
            "module": self.module,
            "version": self.version,
            "timestamp": self.timestamp.isoformat(),
            "payload": dict(self.payload),
            "metadata": dict(self.metadata),
            "prev_hash": self.prev_hash,
            "hash": self.hash,
            "signature": None if self.signature is None else self.signature.hex(),
            "key_id": self.key_id,
        }


class StreamHead(NamedTuple):
    """What a writer must know of a stream to append to it.

    A named tuple, not a frozen dataclass: every append makes one, and a frozen dataclass's
    ``__init__`` sets its fields through ``object.__setattr__``, one generic call each.
    """

    version: int = 0
    hash: str = GENESIS_HASH


class Direction(Enum):
    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which live events a subscription yields; ``None`` fields match everything."""

    stream_id: str | None = None
    type_prefix: str | None = None
    module: str | None = None

    def matches(self, event: Event) -> bool:
        return (
            (self.stream_id is None or event.stream_id == self.stream_id)
            and (self.type_prefix is None or event.type.startswith(self.type_prefix))
            and (self.module is None or event.module == self.module)
        )
