"""What the broker knows of transactions, and how a takeover completes a hanging one.

A *hanging* transaction: records of a transaction that its coordinator finished (it decided
commit or abort) but whose marker never reached the partition. Kafka 4.4 leaves one behind
when a single-node broker restarts while a transaction is in PREPARE_COMMIT: the reloaded
coordinator cannot find the partition's leader yet, drops the partition from the
transaction ("likely deleted already") and completes it without its marker (reliability
finding 1). The records then hold the partition's last stable offset below its end, for
ever: no read_committed reader passes them, and a later marker of the same producer would
decide them, whatever the coordinator decided.

The coordinator's decision is readable until the next ``init_transactions`` of the same
``transactional_id``: ``DescribeTransactions`` answers ``CompleteCommit`` or
``CompleteAbort`` with the producer id and epoch. A takeover reads it *before* it fences,
and completes the hanging records with that same decision only when the partition's own
view (``DescribeProducers``) shows exactly that producer and epoch holding it open. Any
other case (a foreign producer, an epoch it cannot vouch for, a coordinator that had not
decided) stays an operator's call.

aiokafka implements neither request, so both are defined here from the Kafka protocol's
message specifications (DescribeTransactions v0, key 65; DescribeProducers v0, key 61; both
flexible versions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaError, for_code
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

log = logging.getLogger(__name__)


# -- the two requests ------------------------------------------------------------------------


# Names follow aiokafka's own protocol classes (Request_vN).
class DescribeTransactionsResponse_v0(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("transaction_states", CompactArray(
            ("error_code", Int16),
            ("transactional_id", CompactString("utf-8")),
            ("transaction_state", CompactString("utf-8")),
            ("transaction_timeout_ms", Int32),
            ("transaction_start_time_ms", Int64),
            ("producer_id", Int64),
            ("producer_epoch", Int16),
            ("topics", CompactArray(
                ("topic", CompactString("utf-8")),
                ("partitions", CompactArray(Int32)),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


DescribeTransactionsStruct: TypeAlias = DescribeTransactionsRequest_v0


class DescribeTransactionsRequest(Request[DescribeTransactionsStruct]):  # type: ignore[misc]
    API_KEY = 65

    def __init__(self, transactional_ids: list[str]) -> None:
        self._ids = transactional_ids

    def build(self, request_struct_class: type[DescribeTransactionsStruct]
              ) -> DescribeTransactionsStruct:
        return request_struct_class(self._ids, {})


class DescribeProducersResponse_v0(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 61
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("active_producers", CompactArray(
                    ("producer_id", Int64),
                    ("producer_epoch", Int32),
                    ("last_sequence", Int32),
                    ("last_timestamp", Int64),
                    ("coordinator_epoch", Int32),
                    ("current_txn_start_offset", Int64),
                    ("tags", TaggedFields),
                )),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class DescribeProducersRequest_v0(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 61
    API_VERSION = 0
    RESPONSE_TYPE = DescribeProducersResponse_v0
    SCHEMA = Schema(
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partition_indexes", CompactArray(Int32)),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


DescribeProducersStruct: TypeAlias = DescribeProducersRequest_v0


class DescribeProducersRequest(Request[DescribeProducersStruct]):  # type: ignore[misc]
    API_KEY = 61

    def __init__(self, tp: TopicPartition) -> None:
        self._tp = tp

    def build(self, request_struct_class: type[DescribeProducersStruct]
              ) -> DescribeProducersStruct:
        return request_struct_class([(self._tp.topic, [self._tp.partition], {})], {})


# -- what they answer -----------------------------------------------------------------------


class TransactionState(StrEnum):
    """The coordinator's states, as DescribeTransactions names them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class CoordinatorView:
    """A transactional id's last transaction, as its coordinator describes it."""

    transactional_id: str
    state: TransactionState
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer whose transaction holds records of a partition undecided."""

    producer_id: int
    producer_epoch: int
    first_offset: int


class Decision(StrEnum):
    COMMIT = "commit"
    ABORT = "abort"


async def describe_transaction(client: AIOKafkaClient,
                               transactional_id: str) -> CoordinatorView | None:
    """The coordinator's view of ``transactional_id``; None if it cannot be had (an old
    broker, no DESCRIBE permission, an unknown id: the caller then knows nothing)."""
    try:
        node = await client.coordinator_lookup(CoordinationType.TRANSACTION, transactional_id)
        response: Any = await client.send(node, DescribeTransactionsRequest([transactional_id]))
    except (KafkaError, OSError, TimeoutError) as exc:
        log.debug("DescribeTransactions %s failed: %r", transactional_id, exc)
        return None
    for error_code, tid, state, _timeout, _start, pid, epoch, _topics, _tags in (
            response.transaction_states):
        if tid == transactional_id and error_code == 0:
            try:
                known = TransactionState(state)
            except ValueError:
                known = TransactionState.UNKNOWN
            return CoordinatorView(tid, known, pid, epoch)
    return None


async def open_transactions(client: AIOKafkaClient, tp: TopicPartition) -> list[OpenTransaction]:
    """Producers holding undecided records of ``tp``, as its leader sees them.

    Raises ``KafkaError`` when the leader cannot answer (the caller must not guess)."""
    leader = client.cluster.leader_for_partition(tp)
    if leader is None or leader < 0:
        await client.force_metadata_update()
        leader = client.cluster.leader_for_partition(tp)
    if leader is None or leader < 0:
        raise KafkaError(f"no leader known for {tp.topic}/{tp.partition}")
    response: Any = await client.send(leader, DescribeProducersRequest(tp))
    found: list[OpenTransaction] = []
    for _name, partitions, _tags in response.topics:
        for index, error_code, message, producers, _ptags in partitions:
            if index != tp.partition:
                continue
            if error_code:
                raise for_code(error_code)(message or f"DescribeProducers {tp}")
            found += [OpenTransaction(pid, epoch, start)
                      for pid, epoch, _seq, _ts, _ce, start, _t in producers if start >= 0]
    return found


def hanging_decision(before: CoordinatorView | None, holders: list[OpenTransaction],
                     our_producer_id: int) -> tuple[Decision | None, str]:
    """How to complete a partition's hanging transaction, or why not to touch it.

    ``before``: the coordinator's view read before this takeover fenced the id;
    ``holders``: the producers holding the partition's records undecided, read after it;
    ``our_producer_id``: the producer id the takeover writes markers with.
    A marker of ours decides the records of *our producer id* only, so the one case we
    complete is the coordinator's finished transaction of that very producer and epoch.
    """
    if before is None:
        return None, "the coordinator's decision was not readable before the takeover"
    if before.state not in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
        return None, (f"the coordinator had not finished a transaction of this writer "
                      f"(state {before.state})")
    if len(holders) != 1:
        return None, f"{len(holders)} producers hold the partition undecided"
    holder = holders[0]
    if holder.producer_id != before.producer_id:
        return None, (f"the undecided records belong to producer {holder.producer_id}, not to "
                      f"this writer's producer {before.producer_id}")
    if holder.producer_id != our_producer_id:
        return None, (f"this writer now writes as producer {our_producer_id}: its markers "
                      f"cannot decide the records of producer {holder.producer_id}")
    if holder.producer_epoch != before.producer_epoch:
        return None, (f"the undecided records are of epoch {holder.producer_epoch}, the "
                      f"coordinator decided epoch {before.producer_epoch}")
    decision = (Decision.COMMIT if before.state is TransactionState.COMPLETE_COMMIT
                else Decision.ABORT)
    return decision, f"the coordinator decided {decision} for producer {holder.producer_id} " \
                     f"epoch {holder.producer_epoch}"


__all__ = ["CoordinatorView", "Decision", "OpenTransaction", "TransactionState",
           "describe_transaction", "hanging_decision", "open_transactions"]
