"""Which commands carry a deadline, and what a sender is told when no owner answered.

A command on ``ares.commands`` is kept until an owner takes it, however long no runtime
manager runs (a full restart, a deploy, a zone outage): an approval a person gave, a task a
system assigned, must not be lost because the sender stopped waiting. The commands that
change an agent's work are idempotent by their ids (a signal id, a task id, an agent id,
event ids), so a sender that waits again sends the same command again and it is applied
once. A deadline (``ares.deadline_ms`` in the command's metadata) is attached only when the
sender asks for one, or for the few commands about a moment (``NOW_ONLY``): an owner that
takes a command after its deadline answers "expired" and dead-letters it (reason
``expired``), never applies it. docs/operations.md, "Command deadlines", has the table.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from ares.commands.model import DEADLINE, Command
from ares.errors import UnavailableError

# Commands about a moment: applied late they would do what nobody asks for any more (a
# kill crashes the incarnation running then, maybe a new one; the arena crashes the worker
# it names, if it still owns the partition). By default their deadline is the sender's wait.
NOW_ONLY = frozenset({"agent.kill", "worker.crash"})
# The dead letter's reason, and the start of the reply an expired command gets (the chaos
# load recognises it: ares.chaos.load.EXPIRED).
EXPIRED_REASON = "expired"
EXPIRED_PREFIX = "expired: the sender's deadline passed"
EXPIRED_REPLY = (f"{EXPIRED_PREFIX} before an owner took the command; dead-lettered to ares.dlq "
                 f"(reason {EXPIRED_REASON}), not applied")
DURATION_HELP = "seconds or a duration: 30, 90s, 5m, 1h, 2d"


def is_expired(message: str) -> bool:
    """Whether an owner's reply message (or an error that quotes it) is the answer to an
    expired command."""
    return EXPIRED_PREFIX in message

# A positive number with an optional unit. The HTTP API documents the same pattern (its
# schema); both read it with Python's rules, as the schema's validators do.
DURATION_PATTERN = r"^(0*[1-9][0-9]*(?:\.[0-9]*)?|0*\.[0-9]*[1-9][0-9]*)(ms|s|m|h|d)?$"
_DURATION = re.compile(DURATION_PATTERN)
_UNIT_S = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_seconds(text: str) -> float:
    """``30``, ``90s``, ``5m``, ``1h``, ``2d``, ``500ms`` as seconds (> 0); ValueError with
    the reason otherwise."""
    found = _DURATION.match(text)
    seconds = float(found[1]) * _UNIT_S[found[2]] if found else math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration ({DURATION_HELP})")
    return seconds


def deadline_s_for(command_type: str, asked_s: float | None, wait_s: float) -> float | None:
    """Seconds from now after which an owner must not apply ``command_type``: what the sender
    asked for, else the wait for a ``NOW_ONLY`` command, else none (kept until taken)."""
    if asked_s is not None:
        return asked_s
    return wait_s if command_type in NOW_ONLY else None


def with_deadline(command: Command, deadline_s: float | None, now: float) -> Command:
    """``command`` with its deadline in the metadata (one already there is kept)."""
    if deadline_s is None or DEADLINE in command.metadata:
        return command
    at_ms = int((now + deadline_s) * 1000)
    return Command(type=command.type, stream_id=command.stream_id, payload=command.payload,
                   issuer=command.issuer, id=command.id, timestamp=command.timestamp,
                   reply_to=command.reply_to, metadata={**command.metadata, DEADLINE: str(at_ms)})


def deadline_of(command: Command) -> float | None:
    """The command's deadline, epoch seconds; None without one (or an unreadable one)."""
    raw = command.metadata.get(DEADLINE)
    try:
        return None if raw is None else int(raw) / 1000
    except ValueError:
        return None


def when(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Fate:
    """What becomes of a command whose sender stopped waiting for its reply."""

    deadline: float | None  # epoch seconds; None: kept until an owner takes it

    def kept(self, now: float) -> bool:
        """Whether an owner that takes it from ``now`` on still applies it."""
        return self.deadline is None or now <= self.deadline

    def words(self, now: float) -> str:
        if self.deadline is None:
            return ("the command is kept on ares.commands and will be applied when an owner "
                    "takes it")
        if self.kept(now):
            return (f"the command is kept on ares.commands until its deadline "
                    f"{when(self.deadline)}: an owner that takes it by then applies it, a "
                    f"later one refuses it and dead-letters it to ares.dlq (reason "
                    f"{EXPIRED_REASON})")
        return (f"its deadline {when(self.deadline)} has passed: an owner that takes it now "
                f"refuses it and dead-letters it to ares.dlq (reason {EXPIRED_REASON}), it "
                "is not applied")


class NotAnsweredError(UnavailableError):
    """No owner answered within the sender's wait (exit 4); ``fate`` says what becomes of
    the command, which stays on ``ares.commands``."""

    def __init__(self, command: Command, waited_s: float) -> None:
        self.command = command
        self.waited_s = waited_s
        self.fate = Fate(deadline_of(command))
        super().__init__(
            f"not answered within {waited_s:g} s: no owner took {command.type} for "
            f"{command.stream_id!r} (is a runtime manager running? `ares run runtime-manager`); "
            f"{self.fate.words(time.time())}")

    @property
    def kept(self) -> bool:
        return self.fate.kept(time.time())
