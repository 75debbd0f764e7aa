"""What one writer knows of its streams, and the pure logic of an append.

Both adapters use it: the memory store for all streams, the Kafka store per partition. It
assigns versions and hashes (and signs with the writer's key, if it has one), checks
expected versions, and recognises re-appended event ids
within a bounded window (like Kafka's idempotent producer, retries come soon after the
original: a window of recent ids per writer bounds memory for fleets of long streams).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple, TypeVar

from ares.errors import AresError, ConflictError
from ares.events.chain import seal_encoded
from ares.events.model import ANY_VERSION, GENESIS_HASH, Event, NewEvent, StreamHead, utc_now
from ares.events.signing import Signer, configured_signer
from ares.events.wire.codec import Codec, default_codec

DEFAULT_ID_WINDOW = 200_000


class DuplicateEventError(AresError):
    """A batch repeats an event id, or mixes already-appended events with new ones."""


class AppendPlan(NamedTuple):
    """The sealed events of one append and the version the stream reaches with them (a
    named tuple: one per append, cheaper to make than a frozen dataclass)."""

    stream_id: str
    events: tuple[Event, ...]
    version: int
    # The events' wire bytes, from the same Avro encode that computed their hashes.
    encoded: tuple[bytes, ...] = ()

    @property
    def is_noop(self) -> bool:
        """True for a retry whose events are already in the stream."""
        return not self.events


_tuple_new: Final[Any] = tuple.__new__
# The classes as C statics of this compiled module (a global is a dict lookup per use).
_STREAM_HEAD: Final = StreamHead
_APPEND_PLAN: Final = AppendPlan

_Tuple = TypeVar("_Tuple", bound=tuple[Any, ...])


def named_tuple_of(cls: type[_Tuple], values: tuple[Any, ...]) -> _Tuple:
    """``cls(*values)`` for a named tuple made on every append (``AppendPlan``,
    ``StreamHead``); the only place that builds one this way.

    Why: the ``__new__`` that ``NamedTuple`` generates is an interpreted function, even when
    called from this compiled module; ``tuple.__new__(cls, values)`` builds the same object
    directly, at about half the cost (docs/development.md, "The compiled append path: why
    each trick").

    Relies on: ``cls`` being a plain named tuple (no ``__new__`` or validation of its own:
    nothing is skipped) and ``values`` holding every field, in order. Field defaults are
    *not* applied: a missing value makes a shorter tuple, not the default.
    """
    made: _Tuple = _tuple_new(cls, values)
    return made


class StreamState:
    """A stream's head (its version and hash), and where its first event is in the log.

    A plain class, not a dataclass: a transaction copies one per stream it appends to (to
    undo an abort), and a dataclass's ``__init__`` stays interpreted in a compiled module.
    The head is kept as two fields, not a ``StreamHead``: every append moves it, and a
    named tuple made per append costs more than two attribute stores.
    """

    __slots__ = ("first_offset", "hash", "version")

    def __init__(self, version: int, hash: str, first_offset: int | None = None) -> None:
        self.version = version
        self.hash = hash
        # Log position of the stream's first event (a Kafka offset), so reads can seek to it.
        self.first_offset = first_offset

    @property
    def head(self) -> StreamHead:
        return named_tuple_of(_STREAM_HEAD, (self.version, self.hash))


class StreamTable:
    """Heads of the streams one writer owns plus a window of recently appended event ids."""

    def __init__(self, id_window: int = DEFAULT_ID_WINDOW, signer: Signer | None = None, *,
                 sign: bool = True) -> None:
        self._streams: dict[str, StreamState] = {}
        self._recent_ids: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._id_window = id_window
        self._codec: Codec | None = None  # default_codec(), looked up once rather than per event
        # Signs every sealed event: ``signer``, else the process's (ARES_SIGNING_KEY_FILE,
        # checked against ARES_KEYRING_FILE: a misconfigured writer fails here, at start);
        # ``sign=False``: unsigned whatever is configured.
        self.signer: Signer | None = None
        if sign:
            self.signer = signer if signer is not None else configured_signer()

    def __len__(self) -> int:
        return len(self._streams)

    def head(self, stream_id: str) -> StreamHead:
        state = self._streams.get(stream_id)
        return state.head if state is not None else StreamHead()

    def state(self, stream_id: str) -> StreamState | None:
        return self._streams.get(stream_id)

    def stream_ids(self) -> list[str]:
        return list(self._streams)

    def plan(
        self,
        stream_id: str,
        events: Sequence[NewEvent],
        expected_version: int = ANY_VERSION,
        now: datetime | None = None,
    ) -> AppendPlan:
        """Check and seal an append without changing the table (``apply`` does that)."""
        if not events:
            raise ValueError("append needs at least one event")
        if expected_version < ANY_VERSION:
            raise ValueError(f"expected_version must be >= -1 (got {expected_version})")
        state = self._streams.get(stream_id)
        if state is not None:
            version, digest = state.version, state.hash
        else:
            version, digest = 0, GENESIS_HASH
        if (retry := self._retry_version(stream_id, events)) is not None:
            return AppendPlan(stream_id, (), retry)
        # Two comparisons, not `not in (...)`: compiled, that would build a tuple per call.
        if expected_version != ANY_VERSION and expected_version != version:  # noqa: PLR1714
            raise ConflictError(stream_id, expected_version, version)
        stamp = now or utc_now()
        sealed: list[Event] = []
        encoded: list[bytes] = []
        codec = self._codec
        if codec is None:
            codec = self._codec = default_codec()
        signer = self.signer
        for new in events:  # no StreamHead per sealed event: the head is (version, digest)
            event, wire = seal_encoded(stream_id, (version, digest), new, version + 1,
                                       new.timestamp or stamp, codec=codec, signer=signer)
            version, digest = event.version, event.hash
            sealed.append(event)
            encoded.append(wire)
        return named_tuple_of(_APPEND_PLAN, (stream_id, tuple(sealed), version, tuple(encoded)))

    def _retry_version(self, stream_id: str, events: Sequence[NewEvent]) -> int | None:
        if len(events) == 1:  # the common append: one lookup
            known_one = self._recent_ids.get(events[0].id)
            if known_one is None:
                return None
            if known_one[0] != stream_id:
                raise DuplicateEventError(
                    f"stream {stream_id!r}: event {events[0].id} was already appended to "
                    f"stream {known_one[0]!r}"
                )
            return known_one[1]
        ids = [e.id for e in events]
        if len(set(ids)) != len(ids):
            raise DuplicateEventError(f"stream {stream_id!r}: one append repeats an event id")
        known = [self._recent_ids.get(i) for i in ids]
        if all(k is None for k in known):
            return None
        if any(k is None or k[0] != stream_id for k in known):
            raise DuplicateEventError(
                f"stream {stream_id!r}: the append mixes events already appended (to this or "
                "another stream) with new ones; retry the original batch unchanged"
            )
        return max(k[1] for k in known if k is not None)

    def apply(self, plan: AppendPlan, first_offset: int | None = None) -> None:
        if plan.is_noop:
            return
        last = plan.events[-1]
        state = self._streams.get(plan.stream_id)
        if state is None:
            self._streams[plan.stream_id] = StreamState(last.version, last.hash, first_offset)
        else:
            state.version, state.hash = last.version, last.hash
        for event in plan.events:
            self._remember(event)

    def observe(self, event: Event, offset: int | None = None) -> None:
        """Take an event read back from the log (recovery). A head only moves forward, one
        version at a time: a replayed or forged older version (integrity is the replay's
        verifier's business) must not make the next append reuse a version."""
        state = self._streams.get(event.stream_id)
        if state is None:  # its first event here (its earlier ones may have been trimmed)
            self._streams[event.stream_id] = StreamState(
                event.version, event.hash, offset if event.version == 1 else None)
        elif event.version == state.version + 1:
            state.version, state.hash = event.version, event.hash
            if state.first_offset is None and event.version == 1:
                state.first_offset = offset
        else:
            return
        self._remember(event)

    def seed(self, stream_id: str, head: StreamHead, first_offset: int | None = None) -> None:
        """A head known from a checkpoint, for a stream the recovery scan may not meet."""
        self._streams[stream_id] = StreamState(head.version, head.hash, first_offset)

    def set_first_offset(self, stream_id: str, offset: int) -> None:
        state = self._streams.get(stream_id)
        if state is not None and state.first_offset is None:
            state.first_offset = offset

    def save(self, stream_id: str) -> StreamState | None:
        """What ``restore`` needs to undo appends to this stream (an aborted transaction):
        a copy of its state, None for a stream the table does not know yet."""
        state = self._streams.get(stream_id)
        return (StreamState(state.version, state.hash, state.first_offset)
                if state is not None else None)

    def restore(self, saved: dict[str, StreamState | None]) -> None:
        for stream_id, state in saved.items():
            if state is None:
                self._streams.pop(stream_id, None)
            else:
                self._streams[stream_id] = state
        # Ids of the undone events may stay in the window: a retry of them then finds them
        # "known" — so forget every id whose recorded version is past the restored head.
        for event_id, (stream_id, version) in list(self._recent_ids.items()):
            if stream_id in saved and version > self.head(stream_id).version:
                del self._recent_ids[event_id]

    def _remember(self, event: Event) -> None:
        self._recent_ids[event.id] = (event.stream_id, event.version)
        if len(self._recent_ids) > self._id_window:
            self._recent_ids.popitem(last=False)
