"""What the partition owner does with one record of ``ares.commands``, inside its transaction.

Admission first (``admission.Gate``: size, key, partition, issuer, reply partition,
deadline), then the command: ``events.append`` straight onto the log, every other type to
the ``PartitionHost``. Whatever is wrong with the input becomes a dead letter, with its
reason and the original bytes, and a reply when the sender asked for one; nothing a record
holds stops the owner.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from ares import metrics
from ares.commands.deadlines import EXPIRED_REASON, EXPIRED_REPLY, deadline_of, when
from ares.commands.model import (
    Command,
    InvalidCommandError,
    Reply,
    ReplyStatus,
    with_command_metadata,
)
from ares.errors import AresError, ConflictError, SchemaError
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.partition_writer import TransactionScope
from ares.runtime_manager import crash_points
from ares.runtime_manager.admission import Expired, Forward, Gate, Refused
from ares.runtime_manager.arena import Arena
from ares.runtime_manager.partition_host import PartitionHost
from ares.runtime_manager.schedules import ScheduleKeeper

log = logging.getLogger(__name__)
FORWARDED_FROM = "ares.forwarded.from"


@dataclass(frozen=True, slots=True)
class Topics:
    """Where a command's outcomes go: forwarded commands, replies, dead letters."""

    commands: str
    replies: str
    dlq: str


class CommandHandler:
    """Admits, executes and answers the commands of the owner's partitions."""

    def __init__(self, gate: Gate, host: PartitionHost, topics: Topics,
                 schedules: ScheduleKeeper | None = None, arena: Arena | None = None) -> None:
        self._gate = gate
        self._host = host
        self._schedules = schedules
        self._arena = arena
        self._topics = topics
        self.dead_letters = 0

    async def handle(self, tx: TransactionScope, tp: TopicPartition,
                             record: ConsumerRecord) -> None:
        """Never raises: whatever goes wrong with one record is dead-lettered."""
        try:
            await self._admit(tx, tp, record)
        except SchemaError as exc:
            await self._dead_letter(tx, tp, record, _reason(exc, "invalid_command"),
                                    _detail(exc))
        except RecursionError:  # JSON nested deeper than Python parses: bad input, no bug
            await self._dead_letter(tx, tp, record, "invalid_payload",
                                    "JSON nested too deeply to parse")
        except Exception as exc:  # a bug must not lose the command or stop the owner
            log.exception("command at %s/%d@%d failed", tp.topic, tp.partition, record.offset)
            await self._dead_letter(tx, tp, record, "handler_error",
                                    f"{type(exc).__name__}: {exc}")

    async def _admit(self, tx: TransactionScope, tp: TopicPartition,
                              record: ConsumerRecord) -> None:
        value = self._gate.admit_raw(record.value)
        if isinstance(value, Refused):
            await self._dead_letter(tx, tp, record, value.reason, value.detail)
            return
        command = Command.decode(value)
        verdict = self._gate.admit(command, record.key, tp.partition, int(time.time() * 1000))
        if isinstance(verdict, Refused):
            await self._dead_letter(tx, tp, record, verdict.reason, verdict.detail)
            if verdict.reply is not None:
                await self._reply(tx, command, verdict.reply)
            return
        if isinstance(verdict, Forward):
            await tx.send(self._topics.commands, value, key=record.key, partition=verdict.partition,
                          headers=[*record.headers, (FORWARDED_FROM, str(tp.partition).encode())])
            return
        if isinstance(verdict, Expired):
            # Refused whole, like any input the owner will not apply: answered and kept in
            # the DLQ (the sender may still want it: re-send it from there), never only logged.
            await self._dead_letter(tx, tp, record, EXPIRED_REASON, _late(command))
            reply = Reply(command.id, ReplyStatus.REJECTED, command.stream_id,
                          message=EXPIRED_REPLY)
        else:
            reply = await self._dispatch(tx, tp, record, command)
            crash_points.reached("handled")
        metrics.COMMANDS.labels(command.type, str(reply.status)).inc()
        if command.reply_to is not None:
            await self._reply(tx, command, reply)

    async def _dispatch(self, tx: TransactionScope, tp: TopicPartition, record: ConsumerRecord,
                        command: Command) -> Reply:
        if command.type == "events.append":
            expected = int(command.payload["expected_version"])
            try:
                version = await tx.append(command.stream_id,
                                          with_command_metadata(command.events(), command),
                                          expected)
            except ConflictError as exc:
                return Reply(command.id, ReplyStatus.CONFLICT, command.stream_id,
                             exc.actual, exc.expected, exc.actual, str(exc))
            except (AresError, ValueError) as exc:  # invalid events: the input is kept
                await self._dead_letter(tx, tp, record, _reason(exc, "invalid_command"),
                                        _detail(exc))
                return Reply(command.id, ReplyStatus.REJECTED, command.stream_id,
                             message=str(exc))
            return Reply(command.id, ReplyStatus.OK, command.stream_id, version)
        try:
            if self._schedules is not None and self._schedules.handles(command.type):
                return await self._schedules.handle(tx, command)
            if self._arena is not None and self._arena.handles(command.type):
                return self._arena.handle(command, tp.partition)
            return await self._host.handle(tx, command)
        except InvalidCommandError as exc:
            await self._dead_letter(tx, tp, record, exc.reason, exc.detail)
            return Reply(command.id, ReplyStatus.REJECTED, command.stream_id,
                         message=str(exc))

    async def _reply(self, tx: TransactionScope, command: Command, reply: Reply) -> None:
        partition = int(command.reply_to or "0")
        await tx.send(self._topics.replies, reply.encode(), key=command.id.encode(),
                      partition=partition)
        crash_points.reached("after_reply")  # produced into the open transaction

    async def _dead_letter(self, tx: TransactionScope, tp: TopicPartition, record: ConsumerRecord,
                           reason: str, detail: str) -> None:
        self.dead_letters += 1
        metrics.DEAD_LETTERS.labels(reason).inc()
        log.warning("dead letter from %s/%d@%d: %s: %s", tp.topic, tp.partition,
                    record.offset, reason, detail)
        letter = DeadLetter(reason, detail, tp.topic, tp.partition, record.offset,
                            record.key, record.value)
        await tx.send(self._topics.dlq, record.value or b"", key=record.key,
                      headers=letter.headers())


def _late(command: Command) -> str:
    deadline = deadline_of(command)
    at = "" if deadline is None else f" ({when(deadline)})"
    by = "" if deadline is None else f" {max(time.time() - deadline, 0.0):.1f} s"
    return (f"{command.type} for {command.stream_id!r}: the sender's deadline{at} passed{by} "
            "before an owner took it")


def _reason(exc: BaseException, default: str) -> str:
    return str(getattr(exc, "reason", None) or default)


def _detail(exc: BaseException) -> str:
    return str(getattr(exc, "detail", None) or exc)
