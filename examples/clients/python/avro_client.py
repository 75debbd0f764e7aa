"""A Python client of the ares mesh with the Apache Avro library (``avro``) and
confluent-kafka, no ares code.

It starts an agent, assigns it a task, reads the agent's events from Kafka and verifies
their hash chain, with nothing but the .avsc files (see README.md):

    python avro_client.py   # with the ARES_* variables of README.md set

Prints one JSON line (exit 0), or one line on stderr naming what failed (exit 1).

Fingerprints, the one thing to know about this library: ``Schema.fingerprint()`` (CRC-64-AVRO
by default) hashes the library's own canonical form, which keeps ``{"type":"long"}`` for a
timestamp-micros field where the Avro specification writes ``"long"``. So for every schema
with a timestamp it differs from the specification's fingerprint, the one ares writes in its
records (ares.v1.Command: ce16cc0347335a4a by this library, 9ff50b0e0cb48d1e by the
specification).
"""

from __future__ import annotations

import io
import json
import sys
import uuid
from datetime import UTC, datetime

import avro.io
import avro.schema
import common
from common import Codec, Failure, MeshEnv, Record

COMMAND = "ares.v1.Command"
ISSUER = "python-client-example"


class AvroSchemas(Codec):
    """Every schema the mesh documents, by fingerprint, parsed by the avro library."""

    def __init__(self, env: MeshEnv) -> None:
        # Reading: the records ares writes carry the SPECIFICATION's fingerprint, which this
        # library does not compute (module docstring). The exported documents give it:
        # "x-ares": {"fingerprint": the 8 header bytes in hex, ...}; the rest of each
        # document is the .avsc itself (current and released versions alike).
        self.by_fingerprint: dict[bytes, avro.schema.Schema] = {}
        for doc in common.schema_docs(env.schema_docs_dir).values():
            spec_fingerprint = bytes.fromhex(doc["x-ares"]["fingerprint"])
            self.by_fingerprint[spec_fingerprint] = avro.schema.parse(json.dumps(doc))
        # Writing: what a user of this library writes, the library's own fingerprint. (ares
        # learns such "foreign" fingerprints of its schemas; before it did, it dead-lettered
        # the command as unknown_fingerprint and no reply came.)
        self.command_schema = avro.schema.parse((env.schemas_dir / f"{COMMAND}.avsc").read_text())
        self.command_fingerprint = self.command_schema.fingerprint()
        self.by_fingerprint[self.command_fingerprint] = self.command_schema

    def decode(self, fingerprint: bytes, body: bytes) -> Record:
        schema = self.by_fingerprint.get(fingerprint)
        if schema is None:
            raise Failure(f"decode: unknown schema fingerprint {fingerprint.hex()}")
        record = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(body)))
        assert isinstance(record, dict)
        return record

    def encode(self, fingerprint: bytes, record: Record) -> bytes:
        # A union branch is not kept in the decoded dict: the writer takes the first record
        # branch whose fields cover the dict's keys. No two Event payload records are
        # confused that way; among the Command payloads StopAgent, KillAgent, ResumeAgent
        # and RequestSnapshot are ({reason}), so this example sends only the other ones.
        out = io.BytesIO()
        avro.io.DatumWriter(self.by_fingerprint[fingerprint]).write(
            record, avro.io.BinaryEncoder(out))
        return out.getvalue()

    def single_object_command(self, record: Record) -> bytes:
        """A Command as Kafka carries it: magic, fingerprint, Avro body."""
        return common.frame(self.command_fingerprint,
                            self.encode(self.command_fingerprint, record))


def command(env: MeshEnv, command_type: str, payload: Record, reply_partition: int) -> Record:
    """An ares.v1.Command (the avro library writes timestamp-micros from an aware datetime)."""
    return {"id": str(uuid.uuid4()), "stream_id": env.agent_id, "type": command_type,
            "issuer": ISSUER, "timestamp": datetime.now(UTC), "payload": payload,
            # reply_to: the partition of the replies topic to answer on, in decimal.
            "reply_to": str(reply_partition), "metadata": {}}


def main(env: MeshEnv) -> None:
    schemas = AvroSchemas(env)

    def commands(reply_partition: int) -> list[Record]:
        return [
            command(env, "agent.start", {"kind": "example.pipeline", "config_json": "{}"},
                    reply_partition),
            command(env, "task.assign", {"task_id": "t-1", "input_json": common.TASK_INPUT},
                    reply_partition),
        ]

    common.start_and_task(env, schemas, "python/avro", commands, schemas.single_object_command)


if __name__ == "__main__":
    sys.exit(common.run("avro client", main))
