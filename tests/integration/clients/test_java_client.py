"""The Java client example (examples/clients/java) against a real mesh.

The example is built once with Maven (a shaded jar), then run as its own JVM with only the
documented ARES_* variables: it starts an agent, assigns it a task and verifies the hash
chain of its events with kafka-clients and Apache Avro alone. Its report is then checked
against what ares' own reader finds in the same stream.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.clients.conftest import ClientRun

if TYPE_CHECKING:
    from tests.integration.clients.conftest import Mesh

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "clients" / "java"
JAR = EXAMPLE / "target" / "ares-client-example.jar"
BUILD_TIMEOUT_S = 900  # the first build downloads the plugins and jars into ~/.m2
RUN_TIMEOUT_S = 240  # the example's own waits: 60 s per reply, 90 s for the events

# The build happens in the first test's setup: more than the suite's default 300 s.
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S + RUN_TIMEOUT_S + 60)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` is not on PATH: the Java client example needs a JDK 17+ and "
                    "Maven 3.8+ (Debian: apt-get install openjdk-17-jdk-headless maven)",
                    pytrace=False)
    return found


@pytest.fixture(scope="module")
def jar() -> Path:
    """`mvn -q -B package`: the runnable jar, with every dependency shaded in."""
    mvn = _tool("mvn")
    _tool("java")
    try:
        built = subprocess.run([mvn, "-q", "-B", "-Dstyle.color=never", "package"], cwd=EXAMPLE,
                               capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                               check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mvn package took more than {BUILD_TIMEOUT_S} s:\n{exc.stdout!r}",
                    pytrace=False)
    if built.returncode != 0:
        pytest.fail(f"mvn package failed ({built.returncode}):\n{built.stdout}\n{built.stderr}",
                    pytrace=False)
    assert JAR.is_file(), f"mvn package built no {JAR}"
    return JAR


@pytest.fixture(scope="module")
async def run(mesh: Mesh, jar: Path) -> ClientRun:
    """One run of the example, for a fresh agent."""
    agent_id = f"java-{uuid.uuid4().hex[:10]}"
    done = await asyncio.to_thread(
        subprocess.run, [_tool("java"), "-jar", str(jar)],
        env=mesh.client_env(ARES_AGENT_ID=agent_id), capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, check=False)
    return ClientRun.of(agent_id, done)


def test_the_example_reports_a_verified_chain(run: ClientRun, mesh: Mesh) -> None:
    mesh.check_report(run, "java/")


async def test_ares_reads_the_same_stream(run: ClientRun, mesh: Mesh) -> None:
    await mesh.check_against_ares(run)
