"""`ares demo` end to end (small): real processes, a SIGKILL, every promise checked."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.processes import ares


def test_the_demo_keeps_every_promise(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": kafka_bootstrap}
    done = ares("demo", "--agents", "6", "--chats", "1", "--steps", "5", "--step-ms", "150",
                "--json", "--workdir", str(tmp_path), env=env, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["promises_kept"] is True
    assert report["broken_promises"] == []
    # 6 pipelines + the one the demo hangs for the health checker, 1 chat of 3 turns
    assert report["tasks_completed"] == report["tasks_assigned"] == 6 + 1 + 3
    assert report["emails_sent"] == 7
    assert report["emails_sent_twice"] == []
    assert report["steps_executed_twice"] == []
    assert report["integrity_failures"] == []
    causes = {r["cause"] for r in report["resurrections"]}
    assert "worker_lost" in causes  # the SIGKILLed runtime manager's agents came back
    assert "stalled" in causes  # the hung agent, found by the health checker
    assert any(fault.startswith("SIGKILL runtime-manager") for fault in report["faults"])
