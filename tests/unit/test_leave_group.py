"""LeaveGroup v3 as ``groups.remove_member`` sends it: the KIP-345 member identities (a
static member by ``group.instance.id`` with an empty member id, a dynamic one by member id
with a null instance id), byte for byte as the protocol's message specification lays them
out, and the broker's answer read back."""

from __future__ import annotations

import struct

from ares.events.kafka.groups import LeaveGroupMembersRequest, LeaveGroupResponse_v3


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_a_static_member_is_named_by_its_instance_id() -> None:
    request = LeaveGroupMembersRequest("g.ares-runtime", [("", "w-1")]).prepare({13: (0, 5)})
    assert request.API_VERSION == 3
    assert request.encode() == (_string("g.ares-runtime") + struct.pack(">i", 1)
                                + _string("") + _string("w-1"))


def test_a_dynamic_member_is_named_by_its_member_id() -> None:
    request = LeaveGroupMembersRequest("g", [("m-42", None)]).prepare({13: (3, 3)})
    assert request.encode() == _string("g") + struct.pack(">i", 1) + _string("m-42") + \
        _string(None)


def test_the_answer_carries_each_members_error() -> None:
    raw = (struct.pack(">ih", 0, 0) + struct.pack(">i", 1) + _string("") + _string("w-1")
           + struct.pack(">h", 25))
    response = LeaveGroupResponse_v3.decode(raw)
    assert response.error_code == 0
    assert list(response.members) == [("", "w-1", 25)]  # 25: UNKNOWN_MEMBER_ID
