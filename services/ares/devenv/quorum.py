"""What ``ares dev status`` tells of a running cluster: the KRaft quorum and replication.

The controller quorum comes from ``DescribeQuorum`` (KIP-595/KIP-836, API key 55): a broker
forwards it to the active controller, so any node answers it. aiokafka does not implement
it, so the request is defined here from the Kafka protocol's message specification (v0 and
v1, flexible versions from v0), with aiokafka's own protocol types, as
``ares.events.kafka.transactions`` does for its requests. Under-replicated partitions come
from an ordinary metadata answer: a partition whose in-sync replicas are fewer than its
replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from ares.logs import quiet_aiokafka
from ares.tasks import wait_for

METADATA_TOPIC = "__cluster_metadata"  # the KRaft metadata log: one partition, 0


def _replica_state(version: int) -> CompactArray:
    fields: list[tuple[str, Any]] = [("replica_id", Int32), ("log_end_offset", Int64)]
    if version >= 1:
        fields += [("last_fetch_timestamp", Int64), ("last_caught_up_timestamp", Int64)]
    return CompactArray(*fields, ("tags", TaggedFields))


def _response_schema(version: int) -> Schema:
    return Schema(
        ("error_code", Int16),
        ("topics", CompactArray(
            ("topic_name", CompactString("utf-8")),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("error_code", Int16),
                ("leader_id", Int32),
                ("leader_epoch", Int32),
                ("high_watermark", Int64),
                ("current_voters", _replica_state(version)),
                ("observers", _replica_state(version)),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


_REQUEST_SCHEMA = Schema(
    ("topics", CompactArray(
        ("topic_name", CompactString("utf-8")),
        ("partitions", CompactArray(
            ("partition_index", Int32),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )),
    ("tags", TaggedFields),
)


# Names follow aiokafka's own protocol classes (Request_vN).
class DescribeQuorumResponse_v0(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 55
    API_VERSION = 0
    SCHEMA = _response_schema(0)


class DescribeQuorumResponse_v1(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 55
    API_VERSION = 1
    SCHEMA = _response_schema(1)


class DescribeQuorumRequest_v0(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 55
    API_VERSION = 0
    RESPONSE_TYPE = DescribeQuorumResponse_v0
    SCHEMA = _REQUEST_SCHEMA


class DescribeQuorumRequest_v1(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 55
    API_VERSION = 1
    RESPONSE_TYPE = DescribeQuorumResponse_v1
    SCHEMA = _REQUEST_SCHEMA


DescribeQuorumStruct: TypeAlias = DescribeQuorumRequest_v0 | DescribeQuorumRequest_v1


class DescribeQuorumRequest(Request[DescribeQuorumStruct]):  # type: ignore[misc]
    API_KEY = 55

    def build(self, request_struct_class: type[DescribeQuorumStruct]) -> DescribeQuorumStruct:
        return request_struct_class([(METADATA_TOPIC, [(0, {})], {})], {})


@dataclass(frozen=True, slots=True)
class Quorum:
    """The KRaft controller quorum as its leader describes it."""

    leader: int  # node id of the active controller; -1 while there is none
    leader_epoch: int
    high_watermark: int
    voters: tuple[int, ...]
    observers: tuple[int, ...]  # brokers that only follow the metadata log


@dataclass(frozen=True, slots=True)
class UnderReplicated:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """What a running cluster says of itself; ``error`` when it could not be asked."""

    brokers: tuple[int, ...] = ()
    controller: int | None = None
    quorum: Quorum | None = None
    under_replicated: tuple[UnderReplicated, ...] = ()
    error: str | None = None


def parse_quorum(response: Any) -> Quorum:
    """The quorum from a DescribeQuorum response; a Kafka error raises its exception."""
    if response.error_code:
        raise for_code(response.error_code)(f"DescribeQuorum: error {response.error_code}")
    for topic in response.topics:
        if topic[0] != METADATA_TOPIC:
            continue
        for partition in topic[1]:
            _, error, leader, epoch, high_watermark, voters, observers = partition[:7]
            if error:
                raise for_code(error)(f"DescribeQuorum {METADATA_TOPIC}-0: error {error}")
            return Quorum(leader=leader, leader_epoch=epoch, high_watermark=high_watermark,
                          voters=tuple(sorted(v[0] for v in voters)),
                          observers=tuple(sorted(o[0] for o in observers)))
    raise ValueError(f"DescribeQuorum answered without {METADATA_TOPIC}")


def under_replicated(topics: list[dict[str, Any]]) -> tuple[UnderReplicated, ...]:
    """Partitions of a metadata answer (``describe_topics``) with fewer in-sync replicas
    than replicas, internal topics included."""
    found = []
    for topic in topics:
        for partition in topic.get("partitions", ()):
            replicas = tuple(partition["replicas"])
            isr = tuple(partition["isr"])
            if set(isr) != set(replicas):
                found.append(UnderReplicated(topic["topic"], partition["partition"],
                                             replicas, isr))
    return tuple(sorted(found, key=lambda u: (u.topic, u.partition)))


async def describe(bootstrap: str, timeout_s: float = 5.0) -> ClusterHealth:
    """Brokers, controller quorum and under-replicated partitions, or the error that
    kept the cluster from answering (never raises: ``ares dev status`` prints it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap,
                                request_timeout_ms=int(timeout_s * 1000))
    # The admin API has no DescribeQuorum: it goes through a client of its own (aiokafka's
    # exported AIOKafkaClient), not through the admin client's private one.
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        with quiet_aiokafka():
            await wait_for(admin.start(), timeout_s)
            cluster = await wait_for(admin.describe_cluster(), timeout_s)
            topics = await wait_for(admin.describe_topics(), timeout_s)
            await wait_for(client.bootstrap(), timeout_s)
            response = await wait_for(
                client.send(client.get_random_node(), DescribeQuorumRequest()), timeout_s)
        return ClusterHealth(
            brokers=tuple(sorted(b["node_id"] for b in cluster["brokers"])),
            controller=cluster.get("controller_id"),
            quorum=parse_quorum(response),
            under_replicated=under_replicated(topics))
    except Exception as exc:  # status reports it, whatever it is
        return ClusterHealth(error=f"{type(exc).__name__}: {exc}".rstrip(": "))
    finally:
        with quiet_aiokafka():
            await client.close()
            await admin.close()
