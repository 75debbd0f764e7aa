"""The probable cause of a death loop, from the deaths themselves.

Each ``agent.dead`` says how the incarnation ended (cause, exception type, message,
traceback digest); the checker adds the last *work* event of the stream before the death
(type and version; lifecycle events such as ``agent.resurrected`` are not work, so an agent
that crashes on re-running the same step shows the same event every time). A loop's
fingerprint is the signature most of its deaths share, hashed, plus whether they all died
right after the same event ("dies at the same event every time") and with the same error.

Messages are normalised before hashing (numbers, hex ids and quoted values vary between
otherwise identical failures) so that "timeout after 30.2s" and "timeout after 31.9s" have
one digest.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

_VARIABLE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # uuids
    r"|0x[0-9a-f]+|\b[0-9a-f]{12,}\b"  # addresses, long hex ids
    r"|'[^']*'|\"[^\"]*\""  # quoted values
    r"|\d+(?:\.\d+)?",  # numbers
    re.IGNORECASE,
)


def message_digest(message: str | None) -> str | None:
    """A short digest of ``message`` with its variable parts blanked; None for None."""
    if message is None:
        return None
    normalised = _VARIABLE.sub("#", message.strip())
    return hashlib.sha256(normalised.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class DeathFacts:
    """What one ``agent.dead`` (plus the stream before it) says about a death."""

    event_id: str
    at: float  # epoch seconds of the agent.dead event
    cause: str
    incarnation: int = 0
    error_type: str | None = None
    error_message: str | None = None
    traceback_digest: str | None = None
    last_event_type: str | None = None  # the last work event before the death
    last_version: int | None = None
    progress: str | None = None  # the heartbeat's progress note, when one was seen

    @property
    def signature(self) -> tuple[str | None, ...]:
        return (self.cause, self.error_type, message_digest(self.error_message),
                self.traceback_digest, self.last_event_type,
                None if self.last_version is None else str(self.last_version))

    @property
    def event_label(self) -> str:
        if self.last_event_type is None:
            return "no work event"
        return f"{self.last_event_type} v{self.last_version}"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    digest: str  # 16 hex digits: the dominant signature, hashed
    deaths: int
    sharing: int  # deaths with the dominant signature
    cause: str
    error_type: str | None
    error_message: str | None
    message_digest: str | None
    traceback_digest: str | None
    last_event_type: str | None
    last_version: int | None
    same_event: bool  # every death came right after the same work event
    same_error: bool  # every death has the same error signature
    events: tuple[str, ...]  # "type vN" of each death, oldest first
    progress: str | None

    def statement(self) -> str:
        """One sentence for the alert message."""
        error = self.error_type or self.cause
        if self.error_message:
            error = f"{error}: {_shorten(self.error_message, 120)}"
        where = (f"dies at the same event every time: {self.events[-1]}" if self.same_event
                 else f"dies at different events ({', '.join(dict.fromkeys(self.events))})")
        return f"{where}; {error}"

    def details(self) -> dict[str, str]:
        """The alert's ``details`` entries (strings, as the Alert schema wants)."""
        return {
            "fingerprint": self.digest, "deaths": str(self.deaths),
            "sharing": str(self.sharing), "cause": self.cause,
            "error_type": self.error_type or "",
            "error_message": _shorten(self.error_message or "", 500),
            "message_digest": self.message_digest or "",
            "traceback_digest": self.traceback_digest or "",
            "last_event_type": self.last_event_type or "",
            "last_version": "" if self.last_version is None else str(self.last_version),
            "same_event": "true" if self.same_event else "false",
            "same_error": "true" if self.same_error else "false",
            "events": ",".join(self.events), "progress": self.progress or "",
        }


def fingerprint(deaths: Sequence[DeathFacts]) -> Fingerprint:
    """The fingerprint of a loop's deaths (oldest first, at least one)."""
    if not deaths:
        raise ValueError("a fingerprint needs at least one death")
    signatures = Counter(d.signature for d in deaths)
    dominant, sharing = signatures.most_common(1)[0]
    model = next(d for d in reversed(deaths) if d.signature == dominant)
    events = tuple(d.event_label for d in deaths)
    error_signatures = {d.signature[:4] for d in deaths}
    digest = hashlib.sha256("|".join(s or "" for s in dominant).encode()).hexdigest()[:16]
    return Fingerprint(
        digest=digest, deaths=len(deaths), sharing=sharing, cause=model.cause,
        error_type=model.error_type, error_message=model.error_message,
        message_digest=message_digest(model.error_message),
        traceback_digest=model.traceback_digest, last_event_type=model.last_event_type,
        last_version=model.last_version, same_event=len(set(events)) == 1,
        same_error=len(error_signatures) == 1, events=events, progress=model.progress)


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
