"""What the partition owner delegates (``PartitionHost``): recovering partitions and the
commands that are not plain appends. ``AgentHost`` hosts agents; ``StreamsOnly`` none (the
event store's write side alone)."""

from __future__ import annotations

from typing import Protocol

from ares.commands.model import Command, Reply, ReplyStatus
from ares.config import Settings
from ares.events.kafka.partition_writer import PartitionWriter, TransactionScope
from ares.events.kafka.reader import PartitionScanner
from ares.events.kafka.store import open_writer
from ares.topics import EVENTS, TopicPlan


class PartitionHost(Protocol):
    """What the owner delegates: recovering partitions and the commands that are not plain
    appends (agent lifecycle, tasks...). ``StreamsOnly`` hosts no agents."""

    async def open_partition(self, partition: int, scanner: PartitionScanner,
                             live_workers: frozenset[str]) -> PartitionWriter: ...

    async def suspend_partition(self, partition: int) -> None: ...

    async def resume_partition(self, partition: int) -> None: ...

    async def release_partition(self, partition: int) -> None: ...

    async def handle(self, tx: TransactionScope, command: Command) -> Reply: ...

    async def stop_agents(self) -> None: ...

    async def hand_off(self) -> None: ...

    async def close(self) -> None: ...


class StreamsOnly:
    """A runtime manager without agents: the event store's write side alone."""

    def __init__(self, settings: Settings, plan: TopicPlan) -> None:
        self._settings = settings
        self._topic = plan.name(EVENTS)

    async def open_partition(self, partition: int, scanner: PartitionScanner,
                             live_workers: frozenset[str]) -> PartitionWriter:
        return await open_writer(self._settings, self._topic, partition, scanner)

    async def suspend_partition(self, partition: int) -> None:
        return None

    async def resume_partition(self, partition: int) -> None:
        return None

    async def release_partition(self, partition: int) -> None:
        return None

    async def handle(self, tx: TransactionScope, command: Command) -> Reply:
        return Reply(command.id, ReplyStatus.REJECTED, command.stream_id,
                     message=f"command {command.type!r} needs an agent host; this runtime "
                             "manager runs without one (--agents)")

    async def stop_agents(self) -> None:
        return None

    async def hand_off(self) -> None:
        return None

    async def close(self) -> None:
        return None
