"""`ares demo` end to end (small): real processes, a SIGKILL, every promise checked."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ares.demo.runner import TEAM_LEADER_STEPS
from tests.support.processes import ares


def test_the_demo_keeps_every_promise(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": kafka_bootstrap}
    # the demo's own step length: each kill lands mid-task (a miss is a broken promise)
    done = ares("demo", "--agents", "6", "--chats", "1", "--steps", "8", "--step-ms", "250",
                "--json", "--workdir", str(tmp_path), env=env, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["promises_kept"] is True
    assert report["broken_promises"] == []
    # 6 pipelines + the one the demo hangs for the health checker, 1 chat of 3 turns, and
    # two teams: a leader, 8 researchers and a distiller each
    assert report["tasks_completed"] == report["tasks_assigned"] == 6 + 1 + 3 + 2 * (1 + 8 + 1)
    assert report["emails_sent"] == 7 + 2
    assert report["emails_sent_twice"] == []
    assert report["steps_executed_twice"] == []
    assert report["integrity_failures"] == []
    causes = {r["cause"] for r in report["resurrections"]}
    assert "worker_lost" in causes  # the SIGKILLed runtime manager's agents came back
    assert "stalled" in causes  # the hung agent, found by the health checker
    # Each fault hit busy work, by the log: its victim was mid-task at its agent.dead (of
    # the fault's cause), and a later incarnation finished that task. The team leader's
    # worker SIGKILLed mid-dispatch, then a busy sub-agent and a pipeline killed, and one
    # pipeline hung for the health checker.
    faults = report["fault_evidence"]
    assert len(report["faults"]) == len(faults)
    assert [(f["kind"], f["cause"]) for f in faults] == [
        ("worker_sigkill", "worker_lost"), ("agent_kill", "killed"), ("agent_kill", "killed"),
        ("hang", "stalled")]
    for fault in faults:
        assert fault["hit"] is True, fault
        assert fault["missed"] is None
        assert fault["refused"] is None
        victim = fault["victims"][0]
        assert victim["mid_task"] is True, fault
        assert victim["dead_cause"] == fault["cause"]
        assert victim["finished_by_incarnation"] >= 2
        assert victim["completed_version"] > victim["dead_version"] > 0
        assert 0 <= victim["steps_before"] <= victim["steps_total"]
    sigkill, child, _pipeline, hang = faults
    assert sigkill["victims"][0]["agent_id"] == "team-1"
    assert sigkill["victims"][0]["steps_before"] < TEAM_LEADER_STEPS  # not yet aggregated
    assert child["victims"][0]["agent_id"].startswith("team-1.research-")
    assert hang["victims"][0]["agent_id"] == "pipeline-hung"
    team = report["team"]
    assert team["dispatched"] == {"team-1": 8, "team-calm": 8}
    assert team["dispatched_twice"] == team["assigned_not_once"] == []
    assert team["members"] == 2 * (1 + 8 + 1)
    assert team["llm_steps_repaid"] == []
    assert team["llm_steps_recorded"] == 2 * (3 + 8 * 2 + 1)
    assert team["answers_identical"] is True
    assert team["answer"] == team["reference_answer"]
    assert team["emails"] == {"team-1": 1, "team-calm": 1}
    team_resurrected = {r["agent_id"] for r in report["resurrections"]}
    assert "team-1" in team_resurrected


@pytest.mark.usefixtures("sigint_not_ignored")  # it stops the demo with Ctrl-C
def test_the_demo_with_ui_ends_in_the_arena(kafka_bootstrap: str, tmp_path: Path) -> None:
    """``--ui``: after the report the dashboard keeps running and its URL is printed (with
    the operator token, once, and nowhere else); it serves the fleet and refuses a write
    without the token; Ctrl+C stops every service and the demo exits cleanly."""
    env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": kafka_bootstrap}
    proc = subprocess.Popen(
        # steps long enough for the kills to land mid-task (a miss exits 1)
        [sys.executable, "-m", "ares", "demo", "--ui", "--agents", "2", "--chats", "0",
         "--steps", "2", "--step-ms", "250", "--workdir", str(tmp_path)],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        url = token = None
        deadline = time.monotonic() + 400
        for line in proc.stdout:  # the report first, then the dashboard's line
            found = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/ui/) .*operator token "
                              r"(\S+)", line)
            if found:
                url, token = found.groups()
                break
            assert time.monotonic() < deadline, "no dashboard URL printed"
        assert url is not None, "the demo ended without a dashboard"
        assert token is not None

        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200
            html = page.read().decode()
        assert "pipeline-01" in html
        assert "team-1" in html
        base = url.removesuffix("/ui/")
        refused = urllib.request.Request(f"{base}/agents/pipeline-01/kill", data=b"{}",
                                         headers={"Content-Type": "application/json"},
                                         method="POST")
        with pytest.raises(urllib.error.HTTPError) as no_token:
            urllib.request.urlopen(refused, timeout=30)
        assert no_token.value.code == 401
        assert proc.poll() is None  # still serving

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
        with pytest.raises(urllib.error.URLError):  # the services are stopped with it
            urllib.request.urlopen(url, timeout=5)
        logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
        assert logs
        assert token not in logs
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
