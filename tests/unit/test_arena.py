"""The arena's ``worker.crash``: addressing, the verdict inside the owner's transaction, the
exit only after the commit, and refusal (a dead letter) when the arena is off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from ares.arena import CRASH, crash_command, crash_stream
from ares.commands.model import Command, Reply, ReplyStatus, decode_reply
from ares.config import Settings
from ares.errors import ConfigError
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.events.model import NewEvent
from ares.runtime_manager.admission import Gate
from ares.runtime_manager.arena import CRASH_EXIT_CODE, Arena
from ares.runtime_manager.command_handler import CommandHandler, Topics

PARTITIONS = 12


class FakeTx:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]] = []

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int:
        raise AssertionError("worker.crash appends nothing")

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: list[tuple[str, bytes]] | None = None) -> None:
        self.sent.append((topic, value, key, list(headers or [])))

    async def commit_offsets(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        pass


class NoHost:
    async def handle(self, tx: Any, command: Command) -> Reply:
        raise AssertionError(f"{command.type} must not reach the agent host")


class Exits:
    def __init__(self) -> None:
        self.codes: list[int] = []

    def __call__(self, code: int) -> None:
        self.codes.append(code)


def handler(arena: Arena) -> CommandHandler:
    gate = Gate(1_048_576, PARTITIONS, 4, "ares.replies")
    return CommandHandler(gate, NoHost(), Topics("ares.commands", "ares.replies", "ares.dlq"),  # type: ignore[arg-type]
                          arena=arena)


def record(command: Command, partition: int) -> ConsumerRecord:
    value = command.encode()
    key = command.stream_id.encode()
    return ConsumerRecord("ares.commands", partition, 7, 0, 0, key, value, None, len(key),
                          len(value), [])


def crash_for(worker: str, partitions: Sequence[int]) -> Command:
    command = crash_command(worker, partitions, PARTITIONS, issuer="test", reason="arena")
    return Command(type=command.type, stream_id=command.stream_id, payload=command.payload,
                   issuer=command.issuer, id=command.id, reply_to="1")


async def deliver(arena: Arena, command: Command) -> tuple[FakeTx, int]:
    tx = FakeTx()
    partition = partition_for(command.stream_id, PARTITIONS)
    await handler(arena).handle(tx, TopicPartition("ares.commands", partition),  # type: ignore[arg-type]
                                record(command, partition))
    return tx, partition


@pytest.mark.parametrize("owned", [[0], [5, 9], list(range(PARTITIONS))])
def test_the_crash_stream_lands_on_a_partition_the_worker_owns(owned: list[int]) -> None:
    stream = crash_stream("worker-1", owned, PARTITIONS)
    assert stream.startswith("worker:worker-1")
    assert partition_for(stream, PARTITIONS) in owned
    assert crash_stream("worker-1", owned, PARTITIONS) == stream  # deterministic


def test_a_worker_without_partitions_cannot_be_addressed() -> None:
    with pytest.raises(ValueError, match="owns no partition"):
        crash_stream("worker-1", [], PARTITIONS)


async def test_an_arena_worker_exits_only_after_the_commit() -> None:
    exits = Exits()
    arena = Arena("worker-1", enabled=True, exit=exits)
    command = crash_for("worker-1", [3])
    tx, partition = await deliver(arena, command)
    assert exits.codes == []  # inside the transaction: nothing yet
    [(topic, value, _, _)] = tx.sent
    assert topic == "ares.replies"
    reply = decode_reply(value)
    assert reply.status is ReplyStatus.OK
    assert "exits" in reply.message
    arena.committed(partition + 1)  # another partition's transaction: not this one
    assert exits.codes == []
    arena.committed(partition)
    assert exits.codes == [CRASH_EXIT_CODE]
    arena.committed(partition)  # once
    assert exits.codes == [CRASH_EXIT_CODE]


async def test_a_transaction_that_fails_forgets_the_crash() -> None:
    exits = Exits()
    arena = Arena("worker-1", enabled=True, exit=exits)
    _, partition = await deliver(arena, crash_for("worker-1", [3]))
    arena.forget(partition)  # aborted: the batch is redone, and the crash with it
    arena.committed(partition)
    assert exits.codes == []


async def test_without_the_arena_the_crash_is_dead_lettered_and_refused() -> None:
    exits = Exits()
    arena = Arena("worker-1", enabled=False, exit=exits)
    command = crash_for("worker-1", [3])
    tx, partition = await deliver(arena, command)
    arena.committed(partition)
    assert exits.codes == []
    by_topic = {topic: (value, headers) for topic, value, _, headers in tx.sent}
    value, headers = by_topic["ares.dlq"]
    assert value == command.encode()  # the original bytes
    letter = DeadLetter.from_record(command.stream_id.encode(), value, headers)
    assert letter.reason == "arena_disabled"
    assert "--arena" in letter.detail
    reply = decode_reply(by_topic["ares.replies"][0])
    assert reply.status is ReplyStatus.REJECTED
    assert "arena is off" in reply.message


async def test_a_crash_for_another_worker_crashes_nothing() -> None:
    # After a rebalance the partition's new owner reads it: it is not the worker named.
    exits = Exits()
    arena = Arena("worker-2", enabled=True, exit=exits)
    tx, partition = await deliver(arena, crash_for("worker-1", [3]))
    arena.committed(partition)
    assert exits.codes == []
    [(topic, value, _, _)] = tx.sent
    assert topic == "ares.replies"
    reply = decode_reply(value)
    assert reply.status is ReplyStatus.REJECTED
    assert "nothing crashed" in reply.message


def test_the_crash_round_trips_the_wire() -> None:
    command = crash_command("worker-1", [2], PARTITIONS, issuer="api", reason="arena")
    decoded = Command.decode(command.encode())
    assert decoded.type == CRASH
    assert dict(decoded.payload) == {"worker_id": "worker-1", "reason": "arena"}


@pytest.mark.parametrize(("raw", "on"), [("", False), ("0", False), ("1", True),
                                         ("true", True), ("off", False)])
def test_ares_arena_is_off_unless_set(raw: str, on: bool) -> None:
    env = {"ARES_ARENA": raw} if raw else {}
    assert Settings.from_env(env).arena is on
    assert Settings.from_env(env, arena=True).arena is True  # --arena


def test_a_bad_ares_arena_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="ARES_ARENA"):
        Settings.from_env({"ARES_ARENA": "maybe"})
