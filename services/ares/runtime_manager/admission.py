"""Admission of a record from ``ares.commands``: a chain of checks, pure, run before anything
of the command runs.

A command is either applied and answered, or refused whole: ``admit`` returns ``Refused``
(dead-lettered with its reason, and answered when its ``reply_to`` can be trusted),
``Forward`` (it arrived on another partition than its stream's: a producer with another
partitioner, never dropped), ``Expired`` (past the deadline its sender asked for: answered
"expired" and dead-lettered, never applied) or ``Admitted``. The checks run in order; the
first that objects decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ares.commands.model import Command, Reply, ReplyStatus
from ares.commands.policy import SETTING as ISSUERS_SETTING
from ares.commands.policy import IssuerPolicy
from ares.events.kafka.routing import partition_for


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str  # the dead letter's reason (docs/operations.md lists them)
    detail: str
    reply: Reply | None = None  # also answered: the sender learns why


@dataclass(frozen=True, slots=True)
class Forward:
    command: Command
    partition: int  # the stream's own partition


@dataclass(frozen=True, slots=True)
class Expired:
    command: Command


@dataclass(frozen=True, slots=True)
class Admitted:
    command: Command


Verdict = Refused | Forward | Expired | Admitted
Check = Callable[["Gate", Command, bytes | None, int, int], Verdict | None]


@dataclass(frozen=True, slots=True)
class Gate:
    """What admission needs to know of its environment."""

    max_record_bytes: int
    partitions: int  # of ares.commands (and every co-partitioned topic)
    reply_partitions: int
    replies_topic: str
    issuers: IssuerPolicy | None = None

    def admit_raw(self, value: bytes | None) -> Refused | bytes:
        """The record's value, or why it is refused before decoding."""
        if value is None:
            return Refused("empty", "the record has no value")
        if len(value) > self.max_record_bytes:
            return Refused("oversized", f"{len(value)} bytes, over the {self.max_record_bytes}"
                                        "-byte limit (ARES_MAX_RECORD_BYTES)")
        return value

    def admit(self, command: Command, key: bytes | None, partition: int,
              now_ms: int) -> Verdict:
        """The verdict on a decoded command that arrived on ``partition`` with ``key``."""
        for check in CHECKS:
            verdict = check(self, command, key, partition, now_ms)
            if verdict is not None:
                return verdict
        return Admitted(command)

    def valid_reply_to(self, reply_to: str) -> bool:
        return reply_to.isdigit() and int(reply_to) < self.reply_partitions


def _keyed_by_its_stream(gate: Gate, command: Command, key: bytes | None, partition: int,
                         now_ms: int) -> Verdict | None:
    if key == command.stream_id.encode():
        return None
    return Refused("key_mismatch", f"record key {key!r} is not the command's stream id "
                                   f"{command.stream_id!r}")


def _on_its_partition(gate: Gate, command: Command, key: bytes | None, partition: int,
                      now_ms: int) -> Verdict | None:
    home = partition_for(command.stream_id, gate.partitions)
    return None if home == partition else Forward(command, home)


def _from_an_allowed_issuer(gate: Gate, command: Command, key: bytes | None, partition: int,
                            now_ms: int) -> Verdict | None:
    if gate.issuers is None or gate.issuers.allows(command.issuer, command.stream_id,
                                                   command.type):
        return None
    answer = None
    if command.reply_to is not None and gate.valid_reply_to(command.reply_to):
        answer = Reply(command.id, ReplyStatus.REJECTED, command.stream_id,
                       message=f"issuer {command.issuer!r} may not send {command.type} to "
                               f"{command.stream_id!r}")
    return Refused("unauthorised_issuer",
                   f"issuer {command.issuer!r} may not send {command.type} to "
                   f"{command.stream_id!r} ({ISSUERS_SETTING})", answer)


def _with_a_reply_to_that_exists(gate: Gate, command: Command, key: bytes | None,
                                 partition: int, now_ms: int) -> Verdict | None:
    # Checked before anything runs: never applied with its answer lost.
    if command.reply_to is None or gate.valid_reply_to(command.reply_to):
        return None
    return Refused("invalid_reply_to", f"reply_to {command.reply_to!r} is not a partition of "
                                       f"{gate.replies_topic}")


def _not_expired(gate: Gate, command: Command, key: bytes | None, partition: int,
                 now_ms: int) -> Verdict | None:
    # Only a command whose sender asked for a deadline has one (--deadline, or a kill's
    # wait: ares.commands.deadlines); past it, applying it would surprise them.
    return Expired(command) if command.expired(now_ms) else None


CHECKS: tuple[Check, ...] = (_keyed_by_its_stream, _on_its_partition, _from_an_allowed_issuer,
                             _with_a_reply_to_that_exists, _not_expired)
