"""What both Python examples share: the mesh's address, Kafka, the single-object framing and
the hash-chain rule. No Avro library here: each example brings its own (fastavro_client.py,
avro_client.py) as a ``Codec``, which encodes and decodes Avro bodies by schema fingerprint.

Kafka is confluent-kafka (librdkafka). Nothing of ares is imported: the mesh is reached
only through Kafka and the .avsc files, as any other program would reach it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

# Avro single-object encoding: 2 magic bytes, the schema's 8-byte CRC-64-AVRO fingerprint
# (little-endian), then the Avro binary body.
MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8
GENESIS_HASH = "0" * 64  # the prev_hash of version 1

Record = dict[str, Any]  # a decoded Avro record, as both Python libraries return it


class Codec(Protocol):
    """An Avro library, with every schema of the mesh known by its fingerprint."""

    def decode(self, fingerprint: bytes, body: bytes) -> Record:
        """The record of ``body``, written with the schema of ``fingerprint``."""
        ...

    def encode(self, fingerprint: bytes, record: Record) -> bytes:
        """The Avro binary body of ``record`` with the schema of ``fingerprint``."""
        ...


@dataclass(frozen=True)
class Stored:
    """A record read from Kafka, with the fingerprint of the schema it was written with."""

    fingerprint: bytes
    record: Record


class Failure(Exception):
    """A step failed; the message names it (printed on stderr, exit 1)."""


@dataclass(frozen=True)
class MeshEnv:
    """Where the mesh is: the documented ARES_* variables."""

    bootstrap: str
    commands_topic: str
    replies_topic: str
    events_topic: str
    replies_partitions: int
    schemas_dir: Path  # the repo's schemas/: the .avsc files, released/v*/ the older ones
    schema_docs_dir: Path  # `ares schemas export --format avsc`: each with its fingerprint
    agent_id: str

    @classmethod
    def from_environ(cls) -> MeshEnv:
        def var(name: str) -> str:
            value = os.environ.get(name)
            if not value:
                raise Failure(f"environment: {name} is not set")
            return value

        return cls(var("ARES_KAFKA_BOOTSTRAP"), var("ARES_COMMANDS_TOPIC"),
                   var("ARES_REPLIES_TOPIC"), var("ARES_EVENTS_TOPIC"),
                   int(var("ARES_REPLIES_PARTITIONS")), Path(var("ARES_SCHEMAS_DIR")),
                   Path(var("ARES_SCHEMA_DOCS_DIR")), var("ARES_AGENT_ID"))

    def avsc_files(self) -> Iterator[Path]:
        """The current schemas, then every released version (records of older writers)."""
        yield from sorted(self.schemas_dir.glob("*.avsc"))
        yield from sorted(self.schemas_dir.glob("released/v*/*.avsc"))


def schema_docs(docs_dir: Path) -> dict[tuple[str, str], Record]:
    """The exported schema documents by (full name, version): version is "current" for the
    schemas/ files and "v1", "v2", ... for released/v1/, ...; each document's "x-ares"
    holds the spec fingerprint ("fingerprint": hex of the 8 header bytes, wire order)."""
    docs = {}
    for path in sorted(docs_dir.glob("*.avsc")):
        doc = json.loads(path.read_text())
        docs[doc["x-ares"]["name"], doc["x-ares"]["version"]] = doc
    if not docs:
        raise Failure(f"schemas: no exported .avsc documents in {docs_dir}")
    return docs


def version_of(avsc: Path) -> str:
    """The export's version name of a file of schemas/: "current", or "v1" for released/v1/."""
    return avsc.parent.name if avsc.parent.parent.name == "released" else "current"


# -- single-object encoding ------------------------------------------------------------------


def frame(fingerprint: bytes, body: bytes) -> bytes:
    return MAGIC + fingerprint + body


def read(codec: Codec, value: bytes | None) -> Stored:
    """Decode a single-object encoded record: check the magic, find the writer's schema by
    the fingerprint, decode the body with it."""
    if value is None or len(value) < HEADER_SIZE or value[:2] != MAGIC:
        raise Failure(f"decode: not an Avro single-object record: {(value or b'')[:10].hex()}")
    fingerprint = value[2:HEADER_SIZE]
    return Stored(fingerprint, codec.decode(fingerprint, value[HEADER_SIZE:]))


# -- Kafka -----------------------------------------------------------------------------------


def consumer(env: MeshEnv) -> Consumer:
    # assign() + seek, no subscribe(): this consumer never joins a group nor commits.
    # (confluent-kafka insists on a group.id all the same.)
    return Consumer({"bootstrap.servers": env.bootstrap, "group.id": "python-client-example",
                     "enable.auto.commit": False, "isolation.level": "read_committed"})


def reply_consumer(env: MeshEnv, partition: int) -> Consumer:
    """A consumer of (replies topic, ``partition``) pinned at its current end, so that every
    reply produced after this call is seen."""
    replies = consumer(env)
    _, end = replies.get_watermark_offsets(TopicPartition(env.replies_topic, partition),
                                           timeout=10)
    replies.assign([TopicPartition(env.replies_topic, partition, end)])
    return replies


class CommandSender:
    """An idempotent producer of ares.commands with librdkafka's DEFAULT partitioner
    (consistent_random: CRC32 of the key). ares places streams by murmur2 (the Java
    client's default), so a command often lands on another owner's partition: that owner
    forwards it to the stream's own partition, and the reply comes all the same."""

    def __init__(self, env: MeshEnv) -> None:
        self._env = env
        self._producer = Producer({"bootstrap.servers": env.bootstrap,
                                   "enable.idempotence": True})

    def send(self, key: str, value: bytes) -> int:
        """Produce and wait for the delivery report; the partition the record went to."""
        delivered: list[Message] = []
        failed: list[KafkaError] = []

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is None:
                delivered.append(message)
            else:
                failed.append(error)

        self._producer.produce(self._env.commands_topic, value=value, key=key.encode(),
                               on_delivery=on_delivery)
        self._producer.flush(30)
        if not delivered:
            raise Failure(f"produce to {self._env.commands_topic}: {failed or 'no delivery'}")
        partition = delivered[0].partition()
        assert partition is not None
        return partition


def wait_for_reply(replies: Consumer, codec: Codec,
                   correlation_id: str, timeout_s: float = 60.0) -> Record:
    """The Reply whose correlation_id is ``correlation_id`` (other replies are skipped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = replies.poll(1.0)
        if message is None:
            continue
        if message.error():
            raise Failure(f"replies: {message.error()}")
        reply = read(codec, message.value()).record
        if reply["correlation_id"] == correlation_id:
            return reply
    raise Failure(f"reply: none for command {correlation_id} within {timeout_s:.0f} s")


def read_events(env: MeshEnv, codec: Codec, until_type: str,
                timeout_s: float = 90.0) -> list[Stored]:
    """The agent's events, in order, read from the beginning of every partition of the
    events topic (read_committed: only events of committed transactions), until one of
    type ``until_type`` has been read."""
    events_consumer = consumer(env)
    try:
        metadata = events_consumer.list_topics(env.events_topic, timeout=10)
        partitions = sorted(metadata.topics[env.events_topic].partitions)
        events_consumer.assign([TopicPartition(env.events_topic, p, OFFSET_BEGINNING)
                                for p in partitions])
        key = env.agent_id.encode()
        events: list[Stored] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = events_consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                raise Failure(f"events: {message.error()}")
            if message.key() != key:
                continue  # another stream's event
            events.append(read(codec, message.value()))
            if events[-1].record["type"] == until_type:
                return events
        seen = [event.record["type"] for event in events]
        raise Failure(f"events: no {until_type} within {timeout_s:.0f} s (read {seen})")
    finally:
        events_consumer.close()


# -- the hash chain --------------------------------------------------------------------------


def verify_chain(codec: Codec, events: list[Stored]) -> None:
    """The documented rule: versions 1, 2, 3, ...; each prev_hash is the previous hash
    (64 zeros before version 1); each hash is the SHA-256 (lowercase hex) of the Avro body
    of the same Event with hash = "" (signature and key_id null, where the writer schema has
    them) and its metadata sorted by key, re-encoded with the
    schema it was written with, by the caller's Avro library, from the decoded record."""
    prev_hash = GENESIS_HASH
    for expected_version, stored in enumerate(events, start=1):
        event = stored.record
        version = event["version"]
        if version != expected_version:
            raise Failure(f"chain: version {version} where {expected_version} was expected")
        if event["prev_hash"] != prev_hash:
            raise Failure(f"chain: version {version}: prev_hash {event['prev_hash']} is not "
                          f"the previous hash {prev_hash}")
        unsealed = {**event, "hash": "", "metadata": dict(sorted(event["metadata"].items()))}
        for name in ("signature", "key_id"):  # after hash, not covered by it (it signs it)
            if name in event:
                unsealed[name] = None
        digest = hashlib.sha256(codec.encode(stored.fingerprint, unsealed)).hexdigest()
        if digest != event["hash"]:
            raise Failure(f"chain: version {version}: hash {event['hash']} but the body "
                          f"hashes to {digest}")
        prev_hash = event["hash"]


# -- the outcome -----------------------------------------------------------------------------


def now_micros() -> int:
    """Now, in microseconds since the epoch (a timestamp-micros long)."""
    return time.time_ns() // 1000


@dataclass
class Outcome:
    """What the example found: printed as one JSON line."""

    client: str
    reply_partition: int
    partition_sent: int = -1  # where librdkafka delivered agent.start
    statuses: dict[str, str] = field(default_factory=dict)  # command type -> reply status
    events: list[Stored] = field(default_factory=list)

    def print_json(self, env: MeshEnv) -> None:
        records = [stored.record for stored in self.events]
        print(json.dumps({
            "agent_id": env.agent_id, "client": self.client,
            "start_status": self.statuses["agent.start"],
            "assign_status": self.statuses["task.assign"],
            "events": len(records), "versions": [event["version"] for event in records],
            "types": [event["type"] for event in records], "last_hash": records[-1]["hash"],
            "chain": "verified", "reply_partition": self.reply_partition,
            "partition_sent": self.partition_sent,
        }))


def start_and_task(env: MeshEnv, codec: Codec, client: str,
                   commands: Callable[[int], list[Record]],
                   encode: Callable[[Record], bytes]) -> None:
    """The example's conversation: ``commands(reply_partition)`` (agent.start, then
    task.assign) sent one by one, each reply awaited; then the agent's events read and their
    chain verified; the outcome printed."""
    outcome = Outcome(client, random.randrange(env.replies_partitions))
    replies = reply_consumer(env, outcome.reply_partition)  # before any command is sent
    sender = CommandSender(env)
    for sent in commands(outcome.reply_partition):
        partition = sender.send(env.agent_id, encode(sent))
        if sent["type"] == "agent.start":
            outcome.partition_sent = partition
        reply = wait_for_reply(replies, codec, sent["id"])
        if reply["status"] != "ok":
            raise Failure(f"{sent['type']}: reply {reply['status']}: {reply['message']}")
        outcome.statuses[sent["type"]] = reply["status"]
    replies.close()
    outcome.events = read_events(env, codec, until_type="task.completed")
    verify_chain(codec, outcome.events)
    outcome.print_json(env)


TASK_INPUT = json.dumps({"email": False, "step_ms": 10, "steps": 2},  # canonical JSON
                        sort_keys=True, separators=(",", ":"))


def run(name: str, main: Callable[[MeshEnv], None]) -> int:
    """Run ``main`` against the mesh of the environment: exit 0, or 1 with one line on
    stderr naming what failed."""
    try:
        main(MeshEnv.from_environ())
    except Failure as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # an example's last resort: one line, not a traceback
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
