"""The one place ares reaches into aiokafka's private API, and the check that it still can.

aiokafka (the version pyproject.toml pins) lacks a few things ares needs: a heartbeat while
a rebalance callback runs, the group generation, the producer id of a transactional
producer, a partition added to a transaction without a record, a request sent on an admin
client's or a consumer's own connections. Each function below is one such reach, with why
ares needs it, the public alternative if there is one, and what could go upstream
(aio-libs/aiokafka). Nothing outside this module touches an underscore attribute of an
aiokafka object (``tests/unit/test_aiokafka_internals.py`` holds the package to that).

What counts as private here: an underscore attribute or method of an aiokafka object, and
the classes those live on (``GroupCoordinator``, ``TransactionManager``), which aiokafka
neither documents nor exports. Not private, and used where needed: the names aiokafka
exports (``aiokafka.__all__``, ``aiokafka.admin.__all__``, errors, structs), including
``AIOKafkaClient`` and its methods (``send``, ``coordinator_lookup``,
``fetch_all_metadata``), and the protocol's message classes (``aiokafka.protocol.*``):
undocumented, but the wire format they spell is Kafka's versioned protocol, and aiokafka's
own admin client is built on them. A renamed one of those fails the import, loudly; a
missing *attribute* fails only when used, which is why ``check`` exists.

``check()`` runs at the start of every ``ares run`` service: it inspects the installed
aiokafka's classes (no connection) and raises ``ConfigError``, one line naming the missing
piece, the aiokafka version and the feature that needs it, instead of letting a safety
feature switch itself off or fail mid-takeover.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import aiokafka
from aiokafka import AIOKafkaClient, AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from ares.errors import ConfigError

PINNED = "0.14.0"  # pyproject.toml's aiokafka


@dataclass(frozen=True, slots=True)
class Reach:
    """One private attribute ares uses: where it lives and what depends on it."""

    module: str
    cls: str
    attribute: str
    feature: str

    @property
    def name(self) -> str:
        return f"{self.module}.{self.cls}.{self.attribute}"


REACHES: tuple[Reach, ...] = (
    Reach("aiokafka.consumer.consumer", "AIOKafkaConsumer", "_coordinator",
          "the runtime manager's heartbeat during rebalance callbacks and its expulsion check"),
    Reach("aiokafka.consumer.group_coordinator", "GroupCoordinator", "_do_heartbeat",
          "the runtime manager's heartbeat during rebalance callbacks"),
    Reach("aiokafka.consumer.group_coordinator", "GroupCoordinator", "generation",
          "the runtime manager's expulsion check (an expelled owner drops its warm state)"),
    Reach("aiokafka.consumer.consumer", "AIOKafkaConsumer", "_client",
          "partition counts of topics and the partition writer's transaction probes"),
    Reach("aiokafka.admin.client", "AIOKafkaAdminClient", "_client",
          "removing a worker from its group at once (LeaveGroup v3: lost workers, "
          "--leave-group-on-stop)"),
    Reach("aiokafka.producer.producer", "AIOKafkaProducer", "_txn_manager",
          "completing a hanging transaction at a partition takeover"),
    Reach("aiokafka.producer.transaction_manager", "TransactionManager", "producer_id",
          "completing a hanging transaction at a partition takeover"),
    Reach("aiokafka.producer.transaction_manager", "TransactionManager",
          "maybe_add_partition_to_txn",
          "completing a hanging transaction at a partition takeover"),
    Reach("aiokafka.producer.message_accumulator", "BatchBuilder", "_builder",
          "the partition writer's record batches (the compiled append path)"),
    Reach("aiokafka.producer.message_accumulator", "BatchBuilder", "_relative_offset",
          "the partition writer's record batches (the compiled append path)"),
)


# aiokafka's modules that ares imports besides its public ones (``aiokafka``,
# ``aiokafka.admin``, ``aiokafka.errors``, ``aiokafka.structs``, ``aiokafka.helpers``),
# and why each is not private by the rule above. tests/unit/test_aiokafka_internals.py
# fails on an import from any other submodule: it belongs here, or in this list.
PROTOCOL_LEVEL: dict[str, str] = {
    "aiokafka.client": "AIOKafkaClient is exported by aiokafka; CoordinationType is the "
                       "argument of its coordinator_lookup",
    "aiokafka.protocol.api": "Kafka's request/response framing, to define the requests "
                             "aiokafka lacks (transactions.py, groups.py, devenv/quorum.py)",
    "aiokafka.protocol.types": "Kafka's wire types, for the same request definitions",
    "aiokafka.protocol.admin": "the ACL requests aiokafka defines but its admin API does "
                               "not offer (security/admin.py)",
    "aiokafka.coordinator.protocol": "the consumer protocol's assignment, to decode the "
                                     "member assignments describe_consumer_groups returns",
    "aiokafka.coordinator.assignors.sticky.sticky_assignor":
        "an assignor for the consumer's documented partition_assignment_strategy",
    "aiokafka.partitioner": "murmur2, the default partitioner's documented hash",
    "aiokafka.admin.config_resource": "the argument type of the admin client's "
                                      "describe_configs and alter_configs",
    "aiokafka.producer.message_accumulator": "BatchBuilder, the type the producer's public "
                                             "create_batch returns (its privates: below)",
}


def missing(reaches: Iterable[Reach] = REACHES) -> list[Reach]:
    """The reaches the installed aiokafka cannot serve (a class or attribute is gone)."""
    return [reach for reach in reaches if not _present(reach)]


def check(reaches: Iterable[Reach] = REACHES) -> None:
    """Refuse to run on an aiokafka that lacks any attribute ares reaches for.

    Raises ``ConfigError`` (exit 2), one line: each missing attribute with the feature that
    needs it, the installed aiokafka's version and the pinned one."""
    gone = [f"{reach.name} (needed by {reach.feature})" for reach in missing(reaches)]
    if gone:
        raise ConfigError(
            f"aiokafka {aiokafka.__version__} lacks {'; '.join(gone)}: ares runs with "
            f"the aiokafka pinned in pyproject.toml ({PINNED}), see docs/development.md, "
            "\"aiokafka's internals\"")


def _present(reach: Reach) -> bool:
    try:
        cls = getattr(importlib.import_module(reach.module), reach.cls)
    except (ImportError, AttributeError):
        return False
    return hasattr(cls, reach.attribute) or reach.attribute in instance_attributes(cls)


def instance_attributes(cls: type) -> frozenset[str]:
    """Names a class or its aiokafka bases assign on ``self`` (``self.x = ...``), read from
    their source: instance attributes exist only on an instance, and aiokafka's clients
    need a running loop (and its coordinator a started consumer) to make one."""
    return frozenset().union(*(_assigned_on_self(klass) for klass in cls.__mro__
                               if klass.__module__.startswith("aiokafka")))


# A statement ``self.name = ...`` or ``self.name: T = ...`` (not ``==``, not ``+=``).
_SELF_ASSIGNMENT = re.compile(r"^\s+self\.(\w+)\s*(?::[^=\n]+)?=(?!=)", re.MULTILINE)


@cache
def _assigned_on_self(cls: type) -> frozenset[str]:
    """Scanned as text, within the class's lines (3-20 ms for every reach): parsing the
    modules (``ast``; ``inspect.getsource`` parses the whole module too) cost every service
    start 0.15 s, 1.5-1.8 s on a busy 2-core machine. What the scan misses (a tuple
    assignment) reads as missing: loud, and the unit test on the pinned aiokafka says so."""
    try:
        source = Path(inspect.getsourcefile(cls) or "").read_text(encoding="utf-8")
    except (OSError, TypeError):  # no source: only its class attributes can be checked
        return frozenset()
    return frozenset(_SELF_ASSIGNMENT.findall(_class_text(source, cls.__name__)))


def _class_text(source: str, name: str) -> str:
    """The lines of the top-level class ``name``: from its ``class`` line to the next
    line that starts at the first column (a new statement; ``)`` closes its bases)."""
    lines = source.splitlines()
    header = re.compile(rf"class {re.escape(name)}\b")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines))
                if lines[i][:1] not in ("", " ", "\t", "#", ")")), len(lines))
    return "\n".join(lines[start:end])


# --- the consumer's group membership -----------------------------------------------------

async def heartbeat(consumer: AIOKafkaConsumer) -> None:
    """Send the member's heartbeat now (``GroupCoordinator._do_heartbeat``).

    Why: aiokafka stops heartbeating from the start of a rejoin until the assignment
    callback returns, so a takeover longer than the session timeout got the owner expelled
    mid-takeover, forever (``runtime_manager/owner.py``, ``_heartbeats_kept``). The Java
    client heartbeats from a thread during callbacks (KIP-62). Public alternative: none.
    Upstream: aiokafka could keep its heartbeat task running during the callbacks, as
    KIP-62 does (an issue to file on aio-libs/aiokafka); this function would then go."""
    await consumer._coordinator._do_heartbeat()


def group_generation(consumer: AIOKafkaConsumer) -> int | None:
    """The member's group generation (``GroupCoordinator.generation``); None before the
    consumer started. Negative once the coordinator no longer knows the member (aiokafka
    resets it then).

    Why: an owner whose partitions are revoked after it was expelled must drop its warm
    state, not hold it (another owner may have written meanwhile). Public alternative:
    none (the rebalance listener is told what is revoked, not why). Upstream: a public
    read-only ``generation`` (the Java consumer has ``groupMetadata().generationId()``)."""
    coordinator = consumer._coordinator
    return None if coordinator is None else int(coordinator.generation)


# --- the clients' own connections -------------------------------------------------------

def consumer_client(consumer: AIOKafkaConsumer) -> AIOKafkaClient:
    """The consumer's ``AIOKafkaClient`` (``AIOKafkaConsumer._client``).

    Why: two things the consumer API lacks, sent on connections it already holds: fresh
    partition counts of any topic (``partitions_for_topic`` answers from a cache that may
    not know a topic created a moment ago) and the transaction probes of
    ``transactions.py`` (DescribeTransactions, DescribeProducers). Public alternative: an
    ``AIOKafkaClient`` or admin client of one's own, a second set of connections per
    reader. Upstream: a public ``client`` property, or a ``partitions_for_topic`` that
    refreshes metadata for an unknown topic as the producer's ``partitions_for`` does."""
    client: AIOKafkaClient = consumer._client
    return client


async def admin_send(admin: AIOKafkaAdminClient, request: Any,
                     node_id: int | None = None) -> Any:
    """Send ``request`` on the admin client's connections to ``node_id`` (default: any
    broker) and return the response (``AIOKafkaAdminClient._client``).

    Why: LeaveGroup v3 by instance id (``groups.py``), which the admin API lacks, sent to
    the coordinator the admin client found. Public alternative: an ``AIOKafkaClient`` of
    one's own (``devenv/quorum.py`` sends DescribeQuorum so: a status command, where a
    second connection costs nothing); the health checker and every stopping runtime
    manager already hold an admin client. Upstream: ``remove_members_from_consumer_group``
    (the Java admin client has it), or a public ``send_request`` (aiokafka has a private
    ``_send_request``)."""
    client: AIOKafkaClient = admin._client
    node = client.get_random_node() if node_id is None else node_id
    return await client.send(node, request)


# --- the transactional producer ---------------------------------------------------------

def producer_id(producer: AIOKafkaProducer) -> int:
    """The producer id of a transactional producer (``TransactionManager.producer_id``).

    Why: a partition takeover that finds a hanging transaction must know whether it is its
    own producer's (``store.py``, ``_hanging_decision``). Public alternative: none.
    Upstream: a read-only ``producer_id``/``producer_epoch`` on the producer."""
    return int(producer._txn_manager.producer_id)


def add_partition_to_transaction(producer: AIOKafkaProducer, tp: TopicPartition) -> None:
    """Add ``tp`` to the open transaction without writing a record to it
    (``TransactionManager.maybe_add_partition_to_txn``).

    Why: the commit or abort marker of such a transaction completes the producer's
    hanging transaction on ``tp`` and writes nothing else (``store.py``,
    ``_complete_hanging``). Public alternative: none (``send`` would write a record).
    Upstream: an ``add_partitions_to_transaction`` on the producer."""
    producer._txn_manager.maybe_add_partition_to_txn(tp)


# --- record batches ---------------------------------------------------------------------

def record_builder(batch: Any) -> Any:
    """The C record builder of an aiokafka ``BatchBuilder`` (``BatchBuilder._builder``).

    Why: ``BatchBuilder.append`` is interpreted code around it, paid per record; the
    partition writer appends to the builder directly (``Transaction._add``; figures in
    docs/development.md). Public alternative: ``BatchBuilder.append``, slower. Upstream:
    unlikely (a performance shortcut, not a missing feature)."""
    return batch._builder


def set_record_count(batch: Any, count: int) -> None:
    """Tell a batch filled through ``record_builder`` how many records it holds
    (``BatchBuilder._relative_offset``: aiokafka numbers the batch's sequence by it).
    Public alternative and upstream: as ``record_builder``."""
    batch._relative_offset = count


__all__ = ["PINNED", "PROTOCOL_LEVEL", "REACHES", "Reach", "add_partition_to_transaction",
           "admin_send", "check", "consumer_client", "group_generation", "heartbeat",
           "instance_attributes", "missing", "producer_id", "record_builder",
           "set_record_count"]
