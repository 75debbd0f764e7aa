"""The arena's ``worker.crash`` command, for its senders: how it is addressed (keyed onto a
partition the worker owns) and where a worker's partitions are read from (the runtime
group's description). The runtime manager's side: ``ares.runtime_manager.arena``.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError

from ares.commands.model import Command
from ares.config import Settings
from ares.events.kafka.errors import translate
from ares.events.kafka.groups import runtime_group
from ares.events.kafka.routing import partition_for
from ares.topics import COMMANDS, TopicPlan

CRASH = "worker.crash"
STREAM_PREFIX = "worker:"
# How many suffixes crash_stream tries: with p partitions owned of n, one in n/p hits.
_MAX_SUFFIX = 100_000


def crash_stream(worker_id: str, partitions: Iterable[int], partition_count: int) -> str:
    """A stream id of one of ``partitions`` (those ``worker_id`` owns), for its crash."""
    owned = {p for p in partitions if 0 <= p < partition_count}
    if not owned:
        raise ValueError(f"worker {worker_id!r} owns no partition: nothing to address a "
                         "crash to (is it running, and past its first rebalance?)")
    for n in range(_MAX_SUFFIX):
        stream = f"{STREAM_PREFIX}{worker_id}" + (f"#{n}" if n else "")
        if partition_for(stream, partition_count) in owned:
            return stream
    raise ValueError(f"no stream of worker {worker_id!r}'s partitions found")  # unreachable


async def owned_partitions(settings: Settings, plan: TopicPlan, worker_id: str) -> set[int]:
    """The partitions of ``ares.commands`` that the runtime group assigns ``worker_id`` now
    (empty: no such member, or it holds no assignment yet), from the group's description:
    what a sender addresses a crash by (``crash_stream``)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap,
                                **settings.kafka_options())
    group = runtime_group(settings)
    try:
        await admin.start()
        [response] = await admin.describe_consumer_groups([group])
    except KafkaError as exc:
        raise translate(exc, f"describing the runtime group {group}") from exc
    finally:
        await admin.close()
    topic = plan.name(COMMANDS)
    owned: set[int] = set()
    for described in response.to_object()["groups"]:
        for member in described["members"]:
            raw = member["member_assignment"]
            if str(member["client_id"]) != worker_id or not raw:
                continue
            assignment = ConsumerProtocolMemberAssignment.decode(raw)
            owned.update(p for name, partitions in assignment.assignment if name == topic
                         for p in partitions)
    return owned


def crash_command(worker_id: str, partitions: Iterable[int], partition_count: int, *,
                  issuer: str, reason: str = "") -> Command:
    """The ``worker.crash`` for ``worker_id``, keyed onto one of its ``partitions``."""
    return Command(type=CRASH, stream_id=crash_stream(worker_id, partitions, partition_count),
                   payload={"worker_id": worker_id, "reason": reason}, issuer=issuer)
