"""A running mesh for the client examples in other languages (``examples/clients/``).

One fresh topic prefix and one real ``ares run runtime-manager`` process for the package:
each example is then run as its own process, with only the environment below to find the
mesh, and none of ares' code on its path.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ares.chaos.toxiproxy import free_port
from ares.client import Client
from ares.config import Settings
from ares.errors import UnavailableError
from ares.topics import COMMANDS, EVENTS, REPLIES, TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares, ares_env, service
from tests.support.runtime import read_stream

REPO = Path(__file__).resolve().parents[3]
CLIENTS = REPO / "examples" / "clients"
PARTITIONS = 3


@dataclass(frozen=True)
class ClientRun:
    """One run of a client example: the agent it started and its one-line JSON report."""

    agent_id: str
    report: dict[str, Any]

    @classmethod
    def of(cls, agent_id: str, done: subprocess.CompletedProcess[str]) -> ClientRun:
        assert done.returncode == 0, f"exit {done.returncode}\nstderr:\n{done.stderr[-3000:]}"
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1, f"expected one JSON line on stdout, got:\n{done.stdout}"
        return cls(agent_id, json.loads(lines[0]))


@dataclass(frozen=True)
class Mesh:
    """Where a client example finds the mesh: the variables every example reads."""

    settings: Settings
    plan: TopicPlan
    log_dir: Path
    schema_docs: Path  # `ares schemas export --out`: every schema with its spec fingerprint
    metrics_url: str  # the runtime manager's /metrics

    def check_report(self, run: ClientRun, client: str) -> None:
        """What every example reports: its agent started, tasked, its chain verified."""
        report = run.report
        assert report["agent_id"] == run.agent_id
        assert report["client"].startswith(client), report["client"]
        assert (report["start_status"], report["assign_status"]) == ("ok", "ok")
        assert report["chain"] == "verified"
        assert report["versions"] == list(range(1, report["events"] + 1))
        assert len(report["types"]) == report["events"]
        assert "task.completed" in report["types"]
        assert report["reply_partition"] in range(self.plan.topic(REPLIES).partitions)

    async def check_against_ares(self, run: ClientRun) -> None:
        """ares' own reader finds the stream the example verified, to its last hash."""
        events = await read_stream(self.settings, self.plan, run.agent_id)
        assert len(events) == run.report["events"]
        assert [e.type for e in events] == run.report["types"]
        assert events[-1].hash == run.report["last_hash"]

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the runtime manager's /metrics (0 when absent)."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v
                                               for k, v in labels.items()):
                    return float(sample.value)
        return 0.0

    def client_env(self, **extra: str) -> dict[str, str]:
        """The environment of an example process (the documented ARES_* variables)."""
        env = ares_env(self.settings, PARTITIONS)
        env.update({
            "ARES_COMMANDS_TOPIC": self.plan.name(COMMANDS),
            "ARES_REPLIES_TOPIC": self.plan.name(REPLIES),
            "ARES_EVENTS_TOPIC": self.plan.name(EVENTS),
            "ARES_REPLIES_PARTITIONS": str(self.plan.topic(REPLIES).partitions),
            "ARES_SCHEMAS_DIR": str(REPO / "schemas"),
            "ARES_SCHEMA_DOCS_DIR": str(self.schema_docs),
        })
        env.update(extra)
        return env


async def _wait_until_owned(settings: Settings, plan: TopicPlan) -> None:
    """The runtime manager has joined and answers: one agent per partition is started."""
    async with Client(settings, plan, issuer="clients-warmup") as client:
        for attempt in range(6):
            try:
                for n in range(PARTITIONS * 4):
                    await client.start_agent(f"warmup-{n}", "example.pipeline")
                return
            except UnavailableError:
                if attempt == 5:
                    raise
                await asyncio.sleep(1)


@pytest.fixture(scope="package")
async def mesh(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
               ) -> AsyncIterator[Mesh]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, request_timeout_s=20.0,
                        topic_prefix=f"clients-{uuid.uuid4().hex[:8]}.")
    log_dir = tmp_path_factory.mktemp("client-logs")
    schema_docs = tmp_path_factory.mktemp("schema-docs")
    exported = ares("schemas", "export", "--format", "avsc", "--out", str(schema_docs),
                    env=ares_env(settings, PARTITIONS))
    assert exported.returncode == 0, exported.stderr
    port = free_port()
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        found = Mesh(settings, plan, log_dir, schema_docs, f"http://127.0.0.1:{port}/metrics")
        with service("runtime-manager", found.client_env(ARES_HTTP_PORT=str(port)), log_dir,
                     "--session-timeout-ms", "6000"):
            await _wait_until_owned(settings, plan)
            yield found
