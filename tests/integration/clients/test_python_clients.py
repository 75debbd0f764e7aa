"""The Python client examples (examples/clients/python) against a real mesh: fastavro and the
Apache Avro library, each with confluent-kafka (librdkafka) and none of ares' code.

Each example runs as its own process from a scratch directory; `-X importtime` lists every
module it imported, so the test sees that ares was not among them (the venv could import
it: the example must not). The example's report is then checked against ares' own reader.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.topics import COMMANDS, DLQ
from tests.integration.clients.conftest import ClientRun
from tests.support.kafka import drain_records

if TYPE_CHECKING:
    from tests.integration.clients.conftest import Mesh

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "clients" / "python"
IMPORTS_ARES = re.compile(r"^\s*(?:from|import)\s+ares\b", re.MULTILINE)
TIMEOUT_S = 240


def test_the_examples_do_not_import_ares() -> None:
    sources = sorted(EXAMPLES.glob("*.py"))
    assert {p.name for p in sources} >= {"fastavro_client.py", "avro_client.py", "common.py"}
    assert [p.name for p in sources if IMPORTS_ARES.search(p.read_text())] == []


def forwarded_agent_id(mesh: Mesh) -> str:
    """A fresh agent id that librdkafka's default partitioner (consistent_random: CRC32 of
    the key) puts on another partition than ares' murmur2: its commands are forwarded."""
    partitions = mesh.plan.topic(COMMANDS).partitions
    while True:
        agent_id = f"py-fastavro-{uuid.uuid4().hex[:8]}"
        if zlib.crc32(agent_id.encode()) % partitions != partition_for(agent_id, partitions):
            return agent_id


async def run_example(mesh: Mesh, script: str, agent_id: str,
                      tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # -E -s: no PYTHONPATH, no user site; -B: no __pycache__ in the checkout; cwd: a scratch
    # directory. (Not -I: the script's own directory must stay on sys.path, for common.py.)
    argv = [sys.executable, "-E", "-s", "-B", "-X", "importtime", str(EXAMPLES / script)]
    return await asyncio.to_thread(
        subprocess.run, argv, env=mesh.client_env(ARES_AGENT_ID=agent_id), cwd=tmp_path,
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def imported_modules(stderr: str) -> list[str]:
    """The module names of `-X importtime`'s lines ("import time: self | cumulative | name")."""
    return [line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line]


def messages(stderr: str) -> str:
    """stderr without `-X importtime`'s lines: what the example itself said."""
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("import time:"))


async def dead_letters_of(mesh: Mesh, agent_id: str) -> list[tuple[str, str, str]]:
    """Diagnostic: (reason, header fingerprint, detail) of the mesh's dead letters of this
    agent's records (e.g. unknown_fingerprint for a fingerprint the mesh does not know)."""
    records = await drain_records(mesh.settings.kafka_bootstrap, mesh.plan.name(DLQ),
                                  partitions=mesh.plan.topic(DLQ).partitions)
    letters = [DeadLetter.from_record(r.key, r.value, r.headers) for r in records]
    return [(d.reason, (d.value or b"")[2:10].hex(), d.detail)
            for d in letters if d.key == agent_id.encode()]


async def check_example(mesh: Mesh, script: str, client: str, agent_id: str,
                        tmp_path: Path) -> dict[str, Any]:
    """Run the example; its report, checked on its own and against ares' reader."""
    done = await run_example(mesh, script, agent_id, tmp_path)
    ares_modules = [m for m in imported_modules(done.stderr) if m.split(".")[0] == "ares"]
    assert ares_modules == [], f"{script} imported ares: {ares_modules}"
    if done.returncode != 0:
        raise AssertionError(
            f"{script} exited {done.returncode}: {messages(done.stderr)}\n"
            f"stdout: {done.stdout}\n"
            f"dead letters of {agent_id}: {await dead_letters_of(mesh, agent_id)}")
    run = ClientRun.of(agent_id, done)
    mesh.check_report(run, client)
    assert run.report["client"] == client
    assert run.report["partition_sent"] in range(mesh.plan.topic(COMMANDS).partitions)
    await mesh.check_against_ares(run)
    return run.report


async def test_the_fastavro_client_runs_an_agent_and_verifies_its_chain(
        mesh: Mesh, tmp_path: Path) -> None:
    # Its commands reach a partition that does not own the agent: the events arriving
    # (checked against ares' reader) show that the owner there forwarded them.
    agent_id = forwarded_agent_id(mesh)
    report = await check_example(mesh, "fastavro_client.py", "python/fastavro", agent_id,
                                 tmp_path)
    assert report["events"] > 0


async def test_the_avro_client_runs_an_agent_and_verifies_its_chain(
        mesh: Mesh, tmp_path: Path) -> None:
    # Its commands carry the avro library's own fingerprint (not the specification's; see
    # the example's docstring): the mesh must know it as one of ares.v1.Command's.
    agent_id = f"py-avro-{uuid.uuid4().hex[:8]}"
    counted = {"schema": "ares.v1.Command", "variant": "python-avro"}
    before = mesh.metric("ares_foreign_fingerprint_total", **counted)
    report = await check_example(mesh, "avro_client.py", "python/avro", agent_id, tmp_path)
    # agent.start and task.assign, each decoded where it landed and, when that was not the
    # owner's partition, once more by the owner (a command is forwarded as it came).
    partitions = mesh.plan.topic(COMMANDS).partitions
    forwarded = report["partition_sent"] != partition_for(agent_id, partitions)
    decoded = 2 * (2 if forwarded else 1)
    assert mesh.metric("ares_foreign_fingerprint_total", **counted) - before == decoded
