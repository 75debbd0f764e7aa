"""An auditor's copy: the log dumped by kcat (Debian's package, read_committed), verified
offline by `ares audit verify --file`; a byte flipped in the file is found (exit 5)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ares.chaos.toxiproxy import free_port
from ares.config import Settings
from ares.events.model import NewEvent
from ares.replay_reader.dump import KCAT_FORMAT
from ares.topics import EVENTS, SNAPSHOTS, TopicPlan
from tests.integration.replay.conftest import PARTITIONS, write_streams
from tests.support.kafka import applied_topics
from tests.support.processes import ares, ares_env

STREAMS = {f"audited-{n}": [NewEvent("note.added", "tests", {"marker": f"m-{n}-{i}"})
                            for i in range(1, 9)] for n in range(5)}


def kcat_dump(settings: Settings, topic: str) -> bytes:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is missing: scripts/install-prereqs.sh installs it"
    done = subprocess.run([kcat, "-C", "-b", settings.kafka_bootstrap, "-t", topic, "-e", "-q",
                           "-X", "isolation.level=read_committed", "-f", KCAT_FORMAT],
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


@pytest.fixture(scope="module")
async def dumped(rp_settings: Settings, tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[tuple[Settings, Path]]:
    """Five streams written by the transactional writer, dumped with the snapshots topic."""
    settings = rp_settings.with_overrides(topic_prefix=f"dump-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        await write_streams(settings, plan, STREAMS, batch=3)
        path = tmp_path_factory.mktemp("audit") / "log.dump"
        path.write_bytes(kcat_dump(settings, plan.name(EVENTS))
                         + kcat_dump(settings, plan.name(SNAPSHOTS)))
        yield settings, path


def offline_env(settings: Settings) -> dict[str, str]:
    """No broker and no database where the auditor runs: nothing listens at either."""
    return ares_env(settings, PARTITIONS, ARES_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
                    ARES_POSTGRES_DSN=f"postgresql://ares:ares@127.0.0.1:{free_port()}/ares",
                    ARES_RETRY_TIMEOUT_S="1")


def verify_file(settings: Settings, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ares("audit", "verify", "--json", "--file", str(path), *args,
                env=offline_env(settings), timeout=120)


def test_a_kcat_dump_verifies_offline(dumped: tuple[Settings, Path]) -> None:
    settings, path = dumped
    done = verify_file(settings, path, "--all")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["streams_checked"] == len(STREAMS)
    assert report["events_verified"] == sum(len(e) for e in STREAMS.values())


def test_a_named_stream_of_the_dump(dumped: tuple[Settings, Path]) -> None:
    settings, path = dumped
    done = verify_file(settings, path, "audited-3", "ghost")
    assert done.returncode == 1, done.stderr  # ghost: no trace
    report = json.loads(done.stdout)
    assert [s["stream_id"] for s in report["streams"]] == ["audited-3"]
    assert report["events_verified"] == 8
    assert report["unknown_streams"] == ["ghost"]


def test_a_byte_flipped_in_the_file_is_reported(dumped: tuple[Settings, Path],
                                                 tmp_path: Path) -> None:
    settings, path = dumped
    data = path.read_bytes()
    marker = b"m-2-5"  # the payload of audited-2's fifth event
    assert data.count(marker) == 1
    flipped = tmp_path / "flipped.dump"
    flipped.write_bytes(data.replace(marker, b"m-2-6"))
    done = verify_file(settings, flipped, "--all")
    assert done.returncode == 5, done.stderr
    [failed] = [s for s in json.loads(done.stdout)["streams"] if not s["ok"]]
    assert failed["stream_id"] == "audited-2"
    assert (failed["findings"][0]["version"], failed["findings"][0]["kind"]) == \
        (5, "hash_mismatch")


def test_the_dump_may_come_on_stdin(dumped: tuple[Settings, Path]) -> None:
    settings, path = dumped
    done = subprocess.run([sys.executable, "-m", "ares", "audit", "verify", "--json", "--all",
                           "--file", "-"], input=path.read_bytes(), capture_output=True,
                          env=offline_env(settings), timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert json.loads(done.stdout)["events_verified"] == sum(len(e) for e in STREAMS.values())


def test_a_dump_cut_short_is_a_usage_error_naming_the_byte(dumped: tuple[Settings, Path],
                                                          tmp_path: Path) -> None:
    settings, path = dumped
    cut = tmp_path / "cut.dump"
    cut.write_bytes(path.read_bytes()[:-7])
    done = verify_file(settings, cut, "--all")
    assert done.returncode == 2
    assert "ends early" in done.stderr
    assert "byte " in done.stderr


def test_kcats_default_output_is_refused_with_the_framing_to_use(
        dumped: tuple[Settings, Path], tmp_path: Path, plan_of_dump: TopicPlan) -> None:
    settings, _ = dumped
    kcat = shutil.which("kcat")
    assert kcat is not None
    plain = subprocess.run([kcat, "-C", "-b", settings.kafka_bootstrap, "-t",
                            plan_of_dump.name(EVENTS), "-e", "-q"],
                           capture_output=True, timeout=120, check=True).stdout
    path = tmp_path / "plain.dump"
    path.write_bytes(plain)
    done = verify_file(settings, path, "--all")
    assert done.returncode == 2
    assert "ares-dump-1 %t %p %o %K %S" in done.stderr


@pytest.fixture
def plan_of_dump(dumped: tuple[Settings, Path]) -> TopicPlan:
    from ares.topics import load_topics
    return load_topics(dumped[0], env={"ARES_TOPIC_PARTITIONS": str(PARTITIONS)})
