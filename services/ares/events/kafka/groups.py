"""Consumer groups as the admin API describes them, read through one retrying call.

The runtime managers' group tells who is alive (its members) and whether partitions are
moving (its state). Describing it needs the group coordinator, which a broker formatted a
moment ago does not have yet: ``describe_group`` waits that out (``kafka_retry``) instead
of failing the first seconds of a new environment.

``remove_member`` takes a member out of a group at once (KIP-345: LeaveGroup v3 sent on its
behalf, by ``group.instance.id`` for a static member), so that the group rebalances now
instead of after the member's session timeout. aiokafka's admin client has no
``remove_members_from_consumer_group`` and its protocol classes stop at LeaveGroup v1 (one
member id, no instance id), so v3 is defined here from the protocol's message
specification, as ``transactions`` does for the requests aiokafka lacks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownMemberIdError, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from ares.config import Settings
from ares.errors import UnavailableError
from ares.events.kafka.internals import admin_send
from ares.events.kafka.retry import retry

log = logging.getLogger(__name__)
POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class GroupMember:
    client_id: str
    assigned: bool  # the member holds an assignment (a rebalance has finished for it)
    member_id: str = ""  # the coordinator's id of the member (for LeaveGroup)


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
            GroupMember(str(m["client_id"]), bool(m["member_assignment"]), str(m["member_id"]))
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


# -- LeaveGroup v3 (KIP-345: members by member id or group.instance.id) ---------------------


# Names follow aiokafka's own protocol classes (Request_vN).
class LeaveGroupResponse_v3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("members", Array(
            ("member_id", String("utf-8")),
            ("group_instance_id", String("utf-8")),
            ("error_code", Int16),
        )),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(
            ("member_id", String("utf-8")),
            ("group_instance_id", String("utf-8")),  # nullable
        )),
    )


LeaveGroupStruct: TypeAlias = LeaveGroupRequest_v3


class LeaveGroupMembersRequest(Request[LeaveGroupStruct]):  # type: ignore[misc]
    API_KEY = 13

    def __init__(self, group_id: str, members: list[tuple[str, str | None]]) -> None:
        self._group_id = group_id
        self._members = members

    def build(self, request_struct_class: type[LeaveGroupStruct]) -> LeaveGroupStruct:
        return request_struct_class(self._group_id, self._members)


async def _leave(admin: AIOKafkaAdminClient, group_id: str, member_id: str,
                 instance_id: str | None) -> int:
    """One LeaveGroup v3 for one member, sent to the group's coordinator: the member's
    error code (0: removed)."""
    node = await admin.find_coordinator(group_id)
    response: Any = await admin_send(
        admin, LeaveGroupMembersRequest(group_id, [(member_id, instance_id)]), node)
    if response.error_code:
        raise for_code(response.error_code)(f"removing a member from the group {group_id}")
    codes = [code for _mid, _iid, code in response.members]
    return codes[0] if codes else 0


async def remove_member(admin: AIOKafkaAdminClient, group_id: str, worker_id: str, *,
                        member_id: str | None = None) -> str:
    """Take ``worker_id`` out of ``group_id`` now; says how (``static``: by its
    ``group.instance.id``; ``dynamic``: by ``member_id``; ``absent``: the group did not
    know it). A runtime manager's instance id is its worker id, so a static member is
    removed by that id (member id left empty, as KIP-345's admin call does); a worker
    without an instance id is a dynamic member, removed by the member id the group's
    description gave (``member_id``). Raises ``KafkaError`` on a group-level failure."""
    code = await _leave(admin, group_id, "", worker_id)
    if code == 0:
        return "static"
    if code != UnknownMemberIdError.errno:
        raise for_code(code)(f"removing {worker_id} from the group {group_id}")
    if member_id:
        code = await _leave(admin, group_id, member_id, None)
        if code == 0:
            return "dynamic"
        if code != UnknownMemberIdError.errno:
            raise for_code(code)(f"removing {worker_id} from the group {group_id}")
    log.debug("group %s: no member %s to remove", group_id, worker_id)
    return "absent"

