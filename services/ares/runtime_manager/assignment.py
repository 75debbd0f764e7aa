"""The runtime group's assignment as the owner sees it: the one seam of rebalancing.

aiokafka 0.14 speaks only the classic consumer group protocol (JoinGroup / SyncGroup /
Heartbeat, API keys 11, 14 and 12; no ``ConsumerGroupHeartbeat``, key 68, and no
``group.protocol=consumer``), and only its eager form: before every rejoin a member is told
that ALL its partitions are revoked, and learns what it keeps when the SyncGroup answer
comes. So a member that keeps every partition through a rebalance (a survivor of a scale-in)
is still told to give them all up first.

``RebalanceListener`` turns aiokafka's two callbacks into ``Reaction.on_revoked`` (any
subset of the member's partitions; eagerly, all of them) and ``Reaction.on_assigned`` (the
member's whole new assignment); ``PartitionOwner`` implements them. ``CommitHold`` is what
lets the owner wait for the assignment instead of stopping its agents on a revocation: a
barrier in a partition writer's queue, inside its next transaction, so nothing of the
partition commits while the assignment is unknown, and the agents keep running meanwhile:

* the partition is kept: the barrier is lifted and the appends queued behind it commit;
  the agents lose nothing but the commits' wait (the rebalance);
* the partition moves: its agents are stopped, the barrier fails its transaction as the
  fence it is about to meet (nothing staged in it commits), then the writer is stopped.

Nothing of a revoked partition commits after the revocation, so no tool intent (and no
side effect behind one) starts while another member may be taking the partition over: what
the new owner reads after its fence is all there was. A tool already running when the
revocation came finishes or is cancelled when the assignment says the partition moved
(before the hold, it was cancelled at once); either way its outcome never commits here, so
the new owner finds it in doubt, as after any hand-over.

**KIP-848** (the ``consumer`` protocol: the broker computes the assignment and tells each
member, incrementally, only what it loses and what it gains): a listener for a client that
speaks it passes ``on_revoked`` the partitions it is told to give up, and after each
increment ``on_assigned`` the member's whole assignment (the consumer's ``assignment()``).
``Reaction`` stays as it is: the owner holds only what is revoked, lifts what it keeps,
releases a held partition missing from the assignment and takes over the partitions it
neither holds nor owns. Nothing outside this module and the listener's registration in
``PartitionOwner._open_clients`` names the protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import ProducerFenced

from ares.events.kafka.partition_writer import PartitionWriter, TransactionScope


class Reaction(Protocol):
    """What a member does when the group's assignment changes (``PartitionOwner``)."""

    async def on_revoked(self, partitions: set[int]) -> None: ...

    async def on_assigned(self, partitions: set[int]) -> None: ...


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance callbacks, as partition numbers of the one subscribed topic."""

    def __init__(self, reaction: Reaction) -> None:
        self._reaction = reaction

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._reaction.on_revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._reaction.on_assigned({tp.partition for tp in assigned})


class CommitHold:
    """Barriers in partition writers' queues: while one is held, nothing of its partition
    commits (its agents may still run; their appends wait)."""

    def __init__(self) -> None:
        self._barriers: dict[int, _Barrier] = {}

    async def hold(self, partition: int, writer: PartitionWriter) -> None:
        """Put a barrier in ``writer``'s queue and wait until it runs: the transaction it
        runs in commits nothing (neither what was staged before it nor what queues behind
        it) until ``lift``. A writer that can no longer write needs no hold."""
        reached = asyncio.Event()
        held = _Barrier(asyncio.Event())

        async def barrier(_tx: TransactionScope) -> None:
            reached.set()
            await held.gate.wait()
            if held.moved:
                # The writer treats it as the fence it is about to be: the transaction and
                # everything queued behind it fail, nothing of them commits.
                raise ProducerFenced("the partition moved to another member in a rebalance")

        held.done = asyncio.ensure_future(writer.submit(barrier))
        held.done.add_done_callback(_quiet)
        waiting = asyncio.ensure_future(reached.wait())
        # A writer that is fenced or breaks before the barrier runs fails it at once.
        await asyncio.wait((held.done, waiting), return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not held.done.done():
            self._barriers[partition] = held

    def lift(self, partition: int) -> None:
        """The partition stays: its held transaction goes on and commits."""
        if (held := self._barriers.pop(partition, None)) is not None:
            held.gate.set()

    async def drop(self, partition: int) -> None:
        """The partition moved (or cannot be trusted): its held transaction fails as
        fenced, so nothing of it commits; returns once the writer has failed it (stop the
        writer after: cancelled mid-transaction, it would leave the appends in it
        unanswered)."""
        if (held := self._barriers.pop(partition, None)) is not None:
            held.moved = True
            held.gate.set()
            if held.done is not None:
                await asyncio.wait((held.done,))

    def lift_all(self) -> None:
        for partition in list(self._barriers):
            self.lift(partition)

    @property
    def held(self) -> frozenset[int]:
        return frozenset(self._barriers)


@dataclass(slots=True)
class _Barrier:
    gate: asyncio.Event
    moved: bool = False
    done: asyncio.Future[Any] | None = None  # the barrier's submission: settled at commit


def _quiet(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: a dropped barrier fails, and that is its purpose
