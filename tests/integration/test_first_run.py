"""The first run on a fresh machine: commands typed the moment a new broker's port opens.

A broker formatted a moment ago answers metadata before it can coordinate anything
(``__consumer_offsets`` and ``__transaction_state`` are created by the first lookup), so
the first seconds answer "coordinator not available". The rest of the suite never meets
that broker: earlier tests warm the shared one. Here each test formats its own broker with
the project's devenv code (own directory, own free ports), waits only for its port to open
and runs the user's commands at once: they must retry what is retriable and pass. No
sleeps: every wait is a command's own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ares.chaos.toxiproxy import free_port
from ares.devenv import kafka as dev_kafka
from ares.devenv.process import tail
from ares.errors import InfrastructureError
from tests.support.processes import ares, service


@pytest.fixture
def fresh_broker() -> Iterator[dev_kafka.KafkaLayout]:
    """A broker formatted a moment ago whose port just opened (and nothing more)."""
    root = Path(tempfile.mkdtemp(prefix="ares-first-run-"))
    layout = dev_kafka.KafkaLayout(root / "kafka", port=free_port(),
                                   controller_port=free_port())
    try:
        pid = dev_kafka.launch(layout, dev_kafka.kafka_version())
        dev_kafka.wait_listening(layout, pid)
    except InfrastructureError as exc:
        pytest.fail(f"the test's broker did not start: {exc}", pytrace=False)
    try:
        yield layout
    finally:
        dev_kafka.stop(layout, 20.0)
        shutil.rmtree(root, ignore_errors=True)


def _env(layout: dev_kafka.KafkaLayout, **extra: str) -> dict[str, str]:
    return {**os.environ, "ARES_KAFKA_BOOTSTRAP": layout.bootstrap,
            "ARES_TOPIC_PARTITIONS": "3", "ARES_HTTP_PORT": "0", "PYTHONUNBUFFERED": "1",
            **extra}


def _ok(done: object, layout: dev_kafka.KafkaLayout) -> str:
    assert getattr(done, "returncode") == 0, (  # noqa: B009  (CompletedProcess)
        f"exit {done.returncode}\nstdout:\n{done.stdout}\n"
        f"stderr:\n{done.stderr}\nbroker log:\n{tail(layout.log_file, 30)}")
    return str(done.stdout)


@pytest.mark.timeout(600)
def test_the_demo_passes_on_a_broker_formatted_a_moment_ago(
        fresh_broker: dev_kafka.KafkaLayout, tmp_path: Path) -> None:
    # the demo's own step length: each kill lands mid-task (a miss is a broken promise)
    done = ares("demo", "--agents", "6", "--chats", "1", "--steps", "8", "--step-ms", "250",
                "--json", "--workdir", str(tmp_path), env=_env(fresh_broker), timeout=500)
    report = json.loads(_ok(done, fresh_broker))
    assert report["promises_kept"] is True, report["broken_promises"]
    # 6 pipelines, the hung one, a chat's 3 turns, and two teams (a leader, 8 researchers
    # and a distiller each)
    assert report["tasks_completed"] == report["tasks_assigned"] == 6 + 1 + 3 + 2 * (1 + 8 + 1)
    assert report["team"]["llm_steps_repaid"] == []
    sigkill = report["fault_evidence"][0]
    assert (sigkill["kind"], sigkill["hit"]) == ("worker_sigkill", True)


@pytest.mark.timeout(600)
def test_the_first_commands_pass_on_a_broker_formatted_a_moment_ago(
        fresh_broker: dev_kafka.KafkaLayout, tmp_path: Path) -> None:
    env = _env(fresh_broker, ARES_TOPIC_PREFIX="first.")
    _ok(ares("topics", "apply", env=env, timeout=300), fresh_broker)
    with service("runtime-manager", env, tmp_path / "logs") as manager:
        started = ares("agents", "start", "first-1", "--kind", "example.pipeline",
                       "--timeout", "120", env=env, timeout=300)
        assert manager.poll() is None, tail(next((tmp_path / "logs").iterdir()), 40)
        _ok(started, fresh_broker)
        appended = ares("events", "append", "notes-1", "--type", "note.added",
                        "--payload", '{"text": "first"}', "--timeout", "120",
                        env=env, timeout=300)
        assert _ok(appended, fresh_broker).strip() == "1"  # the new stream version
    status = ares("agents", "status", "first-1", "--json", env=env, timeout=300)
    assert json.loads(_ok(status, fresh_broker))["status"] in {"registered", "idle", "running"}
