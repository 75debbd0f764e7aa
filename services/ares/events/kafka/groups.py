"""Consumer groups as the admin API describes them, read through one retrying call.

The runtime managers' group tells who is alive (its members) and whether partitions are
moving (its state). Describing it needs the group coordinator, which a broker formatted a
moment ago does not have yet: ``describe_group`` waits that out (``kafka_retry``) instead
of failing the first seconds of a new environment.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code

from ares.config import Settings
from ares.errors import UnavailableError
from ares.events.kafka.retry import retry

POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class GroupMember:
    client_id: str
    assigned: bool  # the member holds an assignment (a rebalance has finished for it)


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str  # Stable, Empty, Dead, PreparingRebalance, CompletingRebalance, ...
    members: tuple[GroupMember, ...]

    @property
    def client_ids(self) -> frozenset[str]:
        return frozenset(m.client_id for m in self.members)

    def settled_with(self, count: int, *, exactly: bool = False) -> bool:
        """Stable with at least (``exactly``) ``count`` members, every one assigned."""
        size = len(self.members)
        return (self.state == "Stable" and (size == count if exactly else size >= count)
                and all(m.assigned for m in self.members))


def runtime_group(settings: Settings) -> str:
    """The consumer group of the runtime managers of ``settings``' environment."""
    return f"{settings.topic_prefix}ares-runtime"


async def describe_group(admin: AIOKafkaAdminClient, group_id: str, *, settings: Settings,
                         timeout_s: float | None = None) -> GroupView:
    """The group now; retriable failures are retried for ``timeout_s`` (default
    ``ARES_RETRY_TIMEOUT_S``), then ``UnavailableError``."""

    async def describe() -> GroupView:
        [response] = await admin.describe_consumer_groups([group_id])
        groups = response.to_object()["groups"]
        described = next((g for g in groups if g["group"] == group_id), None)
        if described is None:
            return GroupView(group_id, "Dead", ())
        if described["error_code"]:
            raise for_code(described["error_code"])(f"describing the group {group_id}")
        return GroupView(group_id, str(described["state"]), tuple(
            GroupMember(str(m["client_id"]), bool(m["member_assignment"]))
            for m in described["members"]))

    return await retry(describe, what=f"describing the consumer group {group_id}",
                       bootstrap=settings.kafka_bootstrap,
                       timeout_s=settings.retry_timeout_s if timeout_s is None else timeout_s)


async def until_group_settled(admin: AIOKafkaAdminClient, group_id: str, members: int, *,
                              settings: Settings, timeout_s: float, exactly: bool = False,
                              check: Callable[[], None] | None = None) -> GroupView:
    """Poll until the group is stable with (``exactly``) ``members`` assigned members, as
    ``GroupView.settled_with`` says; ``check`` runs
    between polls (to fail early, say when a member's process exited). After
    ``timeout_s``: ``UnavailableError`` naming the group and its last state."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(deadline - time.monotonic(), 0.0)
        view = await describe_group(admin, group_id, settings=settings, timeout_s=left)
        if view.settled_with(members, exactly=exactly):
            return view
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise UnavailableError(
                f"the consumer group {group_id} did not settle on {members} member(s) within "
                f"{timeout_s:.0f}s (last seen: {view.state}, {len(view.members)} member(s))")
        await asyncio.sleep(POLL_S)
