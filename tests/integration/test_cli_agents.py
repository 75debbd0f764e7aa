"""`ares agents` end to end: the real CLI against a real `ares run runtime-manager` process
on the real broker — start, task, status, kill, genealogy, stop, resume, snapshot, resolve,
and the exit codes of the contract (0 ok, 1 refused or unknown, 2 usage, 4 no owner)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ares.agents.records import idempotency_key
from ares.config import Settings
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares, ares_env, service

PARTITIONS = 2
PIPELINE_TASK = '{"steps": 3, "step_ms": 5, "email": true}'
WAIT_S = 90.0


@pytest.fixture(scope="module")
def agents_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap,
                    topic_prefix=f"cliag-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def plan(agents_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(agents_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture(scope="module")
def ledger_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("evidence")


@pytest.fixture(scope="module")
def env(agents_settings: Settings, plan: TopicPlan, ledger_dir: Path) -> dict[str, str]:
    return ares_env(agents_settings, PARTITIONS, ARES_REQUEST_TIMEOUT_S="20",
                    ARES_EXAMPLE_LEDGER_DIR=str(ledger_dir))


@pytest.fixture(scope="module")
def owner(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    logs = tmp_path_factory.mktemp("logs")
    with service("runtime-manager", env, logs) as proc:
        _wait_until_serving(env, proc)
        yield logs
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "graceful stop must exit 0"


def _wait_until_serving(env: dict[str, str], proc: subprocess.Popen[bytes]) -> None:
    """The owner answers commands: a probe agent starts (rc 0)."""
    deadline = time.monotonic() + WAIT_S
    probe = f"probe-{uuid.uuid4().hex[:6]}"
    done = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the runtime manager exited with {proc.returncode}"
        done = ares("agents", "start", probe, "--kind", "example.chat", "--timeout", "3",
                    env=env)
        if done.returncode == 0:
            return
    raise AssertionError(f"the runtime manager never answered: {done and done.stderr}")


def _ok(*args: str, env: dict[str, str]) -> str:
    done = ares(*args, env=env)
    assert done.returncode == 0, f"ares {' '.join(args)} -> {done.returncode}: {done.stderr}"
    return done.stdout


def _poll(env: dict[str, str], args: list[str], done: Callable[[Any], bool],
          what: str) -> Any:
    """Run `ares ARGS` (JSON output) until ``done(document)``; no fixed sleeps."""
    deadline = time.monotonic() + WAIT_S
    last: Any = None
    while time.monotonic() < deadline:
        run = ares(*args, env=env)
        if run.returncode == 0:
            last = json.loads(run.stdout)
            if done(last):
                return last
        else:
            last = f"exit {run.returncode}: {run.stderr.strip()}"
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached in {WAIT_S:.0f}s; last: {last}")


def _status(env: dict[str, str], agent: str, done: Callable[[dict[str, Any]], bool],
            what: str) -> dict[str, Any]:
    result: dict[str, Any] = _poll(env, ["agents", "status", agent, "--json"], done, what)
    return result


def _genealogy(env: dict[str, str], agent: str,
               done: Callable[[list[dict[str, Any]]], bool], what: str) -> list[dict[str, Any]]:
    doc = _poll(env, ["agents", "genealogy", agent, "--json"],
                lambda d: done(d["incarnations"]), what)
    assert doc["agent_id"] == agent
    incarnations: list[dict[str, Any]] = doc["incarnations"]
    return incarnations


def test_pipeline_lifecycle_end_to_end(env: dict[str, str], owner: Path,
                                       ledger_dir: Path) -> None:
    agent = f"pipe-{uuid.uuid4().hex[:8]}"
    assert _ok("agents", "start", agent, "--kind", "example.pipeline", env=env).startswith(
        f"{agent}: ")

    first = _ok("agents", "task", agent, "--input", PIPELINE_TASK, env=env).strip()
    assert uuid.UUID(first)  # the default task id is a uuid, printed alone on stdout
    done = _status(env, agent, lambda s: s["tasks"]["completed"] == 1, "first task completed")
    assert (done["status"], done["kind"], done["incarnation"], done["restarts"]) == (
        "running", "example.pipeline", 1, 0)
    assert done["worker"]
    assert done["current_task"] is None
    assert done["tokens"]["calls"] == 3
    assert done["tokens"]["spent"] > 0
    assert done["tokens"]["spent_twice"] == 0
    assert done["last_event_type"] == "task.completed"

    # kill: a death with cause "killed", then a resurrection (a second incarnation).
    _ok("agents", "kill", agent, env=env)
    incarnations = _genealogy(env, agent, lambda i: len(i) == 2 and i[1]["end"] is None,
                              "a second incarnation after the kill")
    dead, alive = incarnations
    assert (dead["incarnation"], dead["end"], dead["cause_of_death"]) == (1, "dead", "killed")
    assert (alive["incarnation"], alive["parent"]) == (2, 1)
    assert alive["recovery"]["verified"] is True

    second = _ok("agents", "task", agent, "--input", PIPELINE_TASK, "--task-id", "t2",
                 env=env).strip()
    assert second == "t2"
    after = _status(env, agent, lambda s: s["tasks"]["completed"] == 2, "t2 completed")
    assert (after["incarnation"], after["restarts"], after["deaths"]) == (2, 1, 1)
    assert after["last_death"]["cause"] == "killed"
    assert after["tokens"]["calls"] == 6
    assert after["tokens"]["spent_twice"] == 0
    assert after["in_doubt"] == []

    assert "snapshot" in _ok("agents", "snapshot", agent, env=env)
    _status(env, agent, lambda s: s["snapshot_version"] > 0, "a snapshot recorded")

    # stop: never resurrected; resume: a new incarnation.
    _ok("agents", "stop", agent, "--reason", "maintenance", env=env)
    _status(env, agent, lambda s: s["status"] == "stopped", "stopped")
    _ok("agents", "resume", agent, env=env)
    resumed = _status(env, agent, lambda s: s["status"] == "running" and s["incarnation"] == 3,
                      "resumed as incarnation 3")
    assert resumed["restarts"] == 1  # a resume is no resurrection
    incarnations = _genealogy(env, agent, lambda i: len(i) == 3, "three incarnations")
    assert [i["end"] for i in incarnations] == ["dead", "stopped", None]
    assert incarnations[1]["stop_reason"] == "maintenance"

    # Outside Kafka: no LLM step of this agent ran twice, one e-mail per task.
    calls = Counter((c["task_id"], c["step"]) for c in _jsonl(ledger_dir / "llm_calls.jsonl")
                    if c["agent_id"] == agent)
    assert sorted(calls.values()) == [1] * 6
    mails = [m for m in _jsonl(ledger_dir / "side_effects.jsonl") if m["agent_id"] == agent]
    assert sorted(m["task_id"] for m in mails) == sorted([first, "t2"])

    # Every agent: JSON Lines and the human table list it.
    every = [json.loads(line) for line in
             _ok("agents", "status", "--json", env=env).splitlines()]
    assert agent in [a["agent_id"] for a in every]
    assert [a["agent_id"] for a in every] == sorted(a["agent_id"] for a in every)
    table = _ok("agents", "status", env=env)
    assert "AGENT" in table.splitlines()[0]
    assert any(line.split()[:3] == [agent, "example.pipeline", "running"]
               for line in table.splitlines())
    human = _ok("agents", "genealogy", agent, env=env)
    assert "3 incarnation(s)" in human
    assert "killed" in human


def test_an_in_doubt_call_is_resolved_and_the_task_resumes(env: dict[str, str], owner: Path,
                                                            ledger_dir: Path) -> None:
    """A task whose e-mail intent is recorded without an outcome (as when the worker died
    between the two), on an agent without a reconcile hook: the runtime reports the call in
    doubt and pauses the task; `resolve --as retry` lets it run again, once."""
    agent = f"doubt-{uuid.uuid4().hex[:8]}"
    _ok("agents", "start", agent, "--kind", "example.pipeline", "--config",
        '{"reconcile": false}', env=env)
    _ok("agents", "stop", agent, env=env)
    _status(env, agent, lambda s: s["status"] == "stopped", "stopped")
    _ok("agents", "task", agent, "--input", '{"steps": 0, "email": true}', "--task-id", "t9",
        env=env)
    call = "t9:send_email:0:0"
    _ok("events", "append", agent, "--type", "tool.call.intent",
        "--module", "agent.example.pipeline", "--payload", json.dumps({
            "call_id": call, "tool": "send_email", "effect": "at_most_once",
            "idempotency_key": idempotency_key(agent, "t9", "send_email", 0),
            "args_json": "{}", "occurrence": 0, "task_id": "t9"}), env=env)
    unreported = ares("agents", "resolve", agent, "--call", call, "--as", "retry", env=env)
    assert unreported.returncode == 1
    assert "not reported it in doubt" in unreported.stderr

    _ok("agents", "resume", agent, env=env)
    paused = _status(env, agent, lambda s: bool(s["in_doubt"]), "the call reported in doubt")
    assert [(c["call_id"], c["tool"], c["task_id"]) for c in paused["in_doubt"]] == [
        (call, "send_email", "t9")]
    assert paused["current_task"] == {"task_id": "t9", "state": "paused_in_doubt"}
    assert "ares agents resolve" in _ok("agents", "status", agent, env=env)

    out = _ok("agents", "resolve", agent, "--call", call, "--as", "retry", "--note",
              "not in the mail log", env=env)
    assert f"call {call} resolved as retry" in out
    done = _status(env, agent, lambda s: s["tasks"]["completed"] == 1, "t9 completed")
    assert (done["in_doubt"], done["current_task"]) == ([], None)
    mails = [m for m in _jsonl(ledger_dir / "side_effects.jsonl") if m["agent_id"] == agent]
    assert len(mails) == 1  # the retry sent it, once

    events = [json.loads(line) for line in
              _ok("events", "read", agent, "--json", env=env).splitlines()]
    [resolved] = [e for e in events if e["type"] == "tool.call.resolved"]
    assert resolved["payload"] == {"call_id": call, "as": "retry", "result": None,
                                   "note": "not in the mail log", "task_id": "t9",
                                   "tool": "send_email", "by": "operator"}
    assert resolved["module"] == "cli"
    again = ares("agents", "resolve", agent, "--call", call, "--as", "done", env=env)
    assert again.returncode == 1
    assert "already resolved as retry by operator" in again.stderr


def test_refusals_and_usage_errors(env: dict[str, str], owner: Path) -> None:
    agent = f"bad-{uuid.uuid4().hex[:8]}"
    bad_config = ares("agents", "start", agent, "--kind", "example.pipeline", "--config",
                      "{not json", env=env)
    assert bad_config.returncode == 2
    assert "--config" in bad_config.stderr
    assert "not valid JSON" in bad_config.stderr

    bad_input = ares("agents", "task", agent, "--input", "[1,", env=env)
    assert (bad_input.returncode, "--input" in bad_input.stderr) == (2, True)

    unknown_kind = ares("agents", "start", agent, "--kind", "example.nope", env=env)
    assert unknown_kind.returncode == 1
    assert "unknown agent kind 'example.nope'" in unknown_kind.stderr
    assert "known kinds: example.assistant, example.chat, example.distiller" in unknown_kind.stderr

    bad_setting = ares("agents", "start", agent, "--kind", "example.pipeline", "--config",
                       '{"colour": "red"}', env=env)
    assert bad_setting.returncode == 1
    assert "colour" in bad_setting.stderr

    for command in (["stop", agent], ["kill", agent], ["resume", agent]):
        refused = ares("agents", *command, env=env)
        assert refused.returncode == 1, command
        assert f"no agent {agent!r}" in refused.stderr

    unknown = ares("agents", "status", agent, env=env)
    assert unknown.returncode == 1
    assert f"no agent {agent!r}" in unknown.stderr
    assert ares("agents", "genealogy", agent, "--json", env=env).returncode == 1

    live = f"live-{uuid.uuid4().hex[:8]}"
    _ok("agents", "start", live, "--kind", "example.pipeline", env=env)
    no_call = ares("agents", "resolve", live, "--call", "t1:send_email:0:0", "--as", "skip",
                   env=env)
    assert no_call.returncode == 1
    assert "has no tool call 't1:send_email:0:0'" in no_call.stderr
    assert ares("agents", "resolve", agent, "--call", "c", "--as", "skip",
                env=env).returncode == 1  # no such agent


async def test_no_owner_exits_4(kafka_bootstrap: str) -> None:
    unserved = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"unserved-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(unserved, partitions=1):
        done = ares("agents", "start", "a1", "--kind", "example.chat", "--timeout", "2",
                    env=ares_env(unserved, 1))
        empty = ares("agents", "status", env=ares_env(unserved, 1))
        task = ares("agents", "task", "a1", "--input", "{}", "--timeout", "2",
                    env=ares_env(unserved, 1))
    assert done.returncode == 4
    assert "ares run runtime-manager" in done.stderr
    # The generated id is in the message: a retry with it cannot assign the task twice.
    assert task.returncode == 4
    assert task.stdout == ""
    assert "--task-id " in task.stderr
    assert (empty.returncode, empty.stdout) == (0, "")
    assert "no agents" in empty.stderr


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
