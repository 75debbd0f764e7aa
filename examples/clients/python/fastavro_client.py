"""A Python client of the ares mesh with fastavro and confluent-kafka, no ares code.

It starts an agent, assigns it a task, reads the agent's events from Kafka and verifies
their hash chain, with nothing but the .avsc files (see README.md):

    python fastavro_client.py   # with the ARES_* variables of README.md set

Prints one JSON line (exit 0), or one line on stderr naming what failed (exit 1).
"""

from __future__ import annotations

import io
import json
import sys
import uuid

import common
import fastavro
import fastavro.schema
from common import Codec, Failure, MeshEnv, Record
from fastavro.types import Schema

COMMAND = "ares.v1.Command"
ISSUER = "python-client-example"


class FastavroSchemas(Codec):
    """Every schema of schemas/ and schemas/released/v*/, by its fingerprint."""

    def __init__(self, env: MeshEnv) -> None:
        docs = common.schema_docs(env.schema_docs_dir)
        self.by_fingerprint: dict[bytes, Schema] = {}
        self.current: dict[str, bytes] = {}  # full name -> fingerprint of the current schema
        for path in env.avsc_files():
            # parse_schema: "name" becomes the full name ("ares.v1.Event").
            schema = fastavro.schema.parse_schema(json.loads(path.read_text()))
            assert isinstance(schema, dict)
            # The spec fingerprint: CRC-64-AVRO of the Parsing Canonical Form. fastavro's hex
            # is already in wire order (the 8 header bytes, little-endian).
            canonical = fastavro.schema.to_parsing_canonical_form(schema)
            found = bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
            name, version = str(schema["name"]), common.version_of(path)
            if (name, version) not in docs:
                raise Failure(f"schemas: {name} ({version}) is not among the exported documents")
            documented = docs[name, version]["x-ares"]["fingerprint"]
            if found.hex() != documented:
                raise Failure(f"schemas: fastavro fingerprints {name} ({version}) as "
                              f"{found.hex()}, the mesh documents {documented}")
            self.by_fingerprint[found] = schema
            if version == "current":
                self.current[name] = found

    def decode(self, fingerprint: bytes, body: bytes) -> Record:
        schema = self.by_fingerprint.get(fingerprint)
        if schema is None:
            raise Failure(f"decode: unknown schema fingerprint {fingerprint.hex()}")
        # return_record_name: a union of records decodes to (record name, record), the form
        # schemaless_writer takes back: re-encoding keeps the branch the writer chose.
        record = fastavro.schemaless_reader(io.BytesIO(body), schema, None,
                                            return_record_name=True)
        assert isinstance(record, dict)
        return record

    def encode(self, fingerprint: bytes, record: Record) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.by_fingerprint[fingerprint], record)
        return out.getvalue()

    def single_object(self, name: str, record: Record) -> bytes:
        """``record`` as Kafka carries it: magic, fingerprint, Avro body."""
        current = self.current[name]
        return common.frame(current, self.encode(current, record))


def command(env: MeshEnv, command_type: str, payload: tuple[str, Record],
            reply_partition: int) -> Record:
    """An ares.v1.Command; ``payload`` is (the union branch's record name, its fields)."""
    return {"id": str(uuid.uuid4()), "stream_id": env.agent_id, "type": command_type,
            "issuer": ISSUER, "timestamp": common.now_micros(), "payload": payload,
            # reply_to: the partition of the replies topic to answer on, in decimal.
            "reply_to": str(reply_partition), "metadata": {}}


def main(env: MeshEnv) -> None:
    schemas = FastavroSchemas(env)

    def commands(reply_partition: int) -> list[Record]:
        return [
            command(env, "agent.start", ("ares.v1.command.StartAgent",
                                         {"kind": "example.pipeline", "config_json": "{}"}),
                    reply_partition),
            command(env, "task.assign", ("ares.v1.command.AssignTask",
                                         {"task_id": "t-1", "input_json": common.TASK_INPUT}),
                    reply_partition),
        ]

    common.start_and_task(env, schemas, "python/fastavro", commands,
                          lambda sent: schemas.single_object(COMMAND, sent))


if __name__ == "__main__":
    sys.exit(common.run("fastavro client", main))
