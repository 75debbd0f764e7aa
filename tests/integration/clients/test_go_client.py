"""The Go client example (examples/clients/go) against a real mesh: franz-go (kgo) and
hamba/avro, none of ares' code.

The module is built once (`go build ./...`, with go.sum's pinned versions only), then the
client runs as its own process with only the documented ARES_* variables: it starts an
agent, assigns it a task and verifies the hash chain of its events. Its report is checked
against what ares' own reader finds in the same stream. The second program,
cmd/fingerprints, prints what two Go Avro libraries compute as canonical forms and
fingerprints of our schemas.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ares.events.wire.foreign import GOAVRO, HAMBA, canonical_form, fingerprint_of
from ares.events.wire.schemas import registry
from tests.integration.clients.conftest import ClientRun

if TYPE_CHECKING:
    from tests.integration.clients.conftest import Mesh

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "clients" / "go"
BUILD_TIMEOUT_S = 900  # the first build downloads the modules into the module cache
RUN_TIMEOUT_S = 240  # the client's own waits: 60 s per reply, 90 s for the events
HEX16 = re.compile(r"^[0-9a-f]{16}$")

# The build happens in the first test's setup: more than the suite's default 300 s.
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S + RUN_TIMEOUT_S + 60)


@dataclass(frozen=True)
class Binaries:
    client: Path
    fingerprints: Path


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Binaries:
    """`go build ./...` of the example module, into a scratch directory."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("`go` is not on PATH: the Go client example needs Go 1.26+ "
                    "(https://go.dev/doc/install)", pytrace=False)
    out = tmp_path_factory.mktemp("go-bin")
    # -mod=readonly: exactly go.mod's and go.sum's versions, never an update of them.
    flags = f"{os.environ.get('GOFLAGS', '')} -mod=readonly -buildvcs=false".strip()
    try:
        built = subprocess.run([go, "build", "-o", f"{out}{os.sep}", "./..."], cwd=EXAMPLE,
                               env={**os.environ, "GOFLAGS": flags}, capture_output=True,
                               text=True, timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"go build took more than {BUILD_TIMEOUT_S} s:\n{exc.stderr!r}",
                    pytrace=False)
    if built.returncode != 0:
        pytest.fail(f"go build failed ({built.returncode}):\n{built.stdout}\n{built.stderr}",
                    pytrace=False)
    found = Binaries(client=out / "client", fingerprints=out / "fingerprints")
    for binary in (found.client, found.fingerprints):
        assert binary.is_file(), f"go build made no {binary}: {sorted(out.iterdir())}"
    return found


def fingerprints(binaries: Binaries, paths: list[Path]) -> dict[str, dict[str, str]]:
    """cmd/fingerprints' JSON object: path -> goavro's and hamba's forms and fingerprints."""
    done = subprocess.run([str(binaries.fingerprints), *map(str, paths)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, f"exit {done.returncode}\nstderr:\n{done.stderr}"
    found: dict[str, dict[str, str]] = json.loads(done.stdout)
    return found


def test_the_mesh_knows_what_each_go_library_computes(binaries: Binaries) -> None:
    """goavro's and hamba's canonical forms and fingerprints of every current and released
    schema are the variants ares.events.wire.foreign models, and the registry accepts them."""
    paths = sorted((REPO / "schemas").rglob("*.avsc"))
    assert len(paths) >= 12  # current and released
    found = fingerprints(binaries, paths)
    assert set(found) == {str(p) for p in paths}
    schemas = registry()
    for path in paths:
        forms, raw = found[str(path)], json.loads(path.read_text())
        assert HEX16.match(forms["goavro_fingerprint"]), (path, forms)
        assert forms["goavro_canonical"] == canonical_form(raw, GOAVRO), path
        assert forms["hamba_canonical"] == canonical_form(raw, HAMBA), path
        for library in ("goavro", "hamba"):
            fp = bytes.fromhex(forms[f"{library}_fingerprint"])
            assert fp == fingerprint_of(raw, GOAVRO if library == "goavro" else HAMBA)
            writer, variant = schemas.by_foreign_fingerprint[fp]
            assert writer.name == json.loads(forms["goavro_canonical"])["name"]
            assert library in variant, (path, library, variant)


@pytest.fixture(scope="module")
async def run(mesh: Mesh, binaries: Binaries,
              tmp_path_factory: pytest.TempPathFactory) -> ClientRun:
    """One run of the client, for a fresh agent, from a scratch directory."""
    agent_id = f"go-{uuid.uuid4().hex[:10]}"
    done = await asyncio.to_thread(
        subprocess.run, [str(binaries.client)], env=mesh.client_env(ARES_AGENT_ID=agent_id),
        cwd=tmp_path_factory.mktemp("go-run"), capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, check=False)
    return ClientRun.of(agent_id, done)


def test_the_example_reports_a_verified_chain(run: ClientRun, mesh: Mesh) -> None:
    mesh.check_report(run, "go/")


async def test_ares_reads_the_same_stream(run: ClientRun, mesh: Mesh) -> None:
    await mesh.check_against_ares(run)
