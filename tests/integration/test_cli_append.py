"""`ares events append` against a real `ares run runtime-manager` process: the contract's
output and exit codes (0, 2 usage, 3 conflict, 4 no owner)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from ares.config import Settings
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares, ares_env, service

PARTITIONS = 2


@pytest.fixture(scope="module")
def cli_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap,
                    topic_prefix=f"cli-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def plan(cli_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(cli_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture(scope="module")
def env(cli_settings: Settings, plan: TopicPlan) -> dict[str, str]:
    return ares_env(cli_settings, PARTITIONS)


@pytest.fixture(scope="module")
def owner(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with service("runtime-manager", env, tmp_path_factory.mktemp("logs")) as proc:
        _wait_until_serving(env, proc)
        yield
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "graceful stop must exit 0"


def _wait_until_serving(env: dict[str, str], proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    probe = f"probe-{uuid.uuid4().hex[:6]}"
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the runtime manager exited with {proc.returncode}"
        done = ares("events", "append", probe, "--type", "probe.sent", "--timeout", "3",
                    env=env)
        if done.returncode == 0:
            return
    raise AssertionError(f"the runtime manager never answered: {done.stderr}")


def test_append_prints_the_new_version_and_conflicts_exit_3(env: dict[str, str],
                                                            owner: None) -> None:
    stream = f"agent-{uuid.uuid4().hex[:8]}"
    first = ares("events", "append", stream, "--type", "note.added", "--payload",
                 '{"text": "hello"}', "--expected-version", "0", env=env)
    assert (first.returncode, first.stdout.strip()) == (0, "1"), first.stderr
    second = ares("events", "append", stream, "--type", "note.added", env=env)
    assert (second.returncode, second.stdout.strip()) == (0, "2"), second.stderr

    conflict = ares("events", "append", stream, "--type", "note.added",
                    "--expected-version", "0", env=env)
    assert conflict.returncode == 3
    assert "expected version 0" in conflict.stderr
    assert "actual version 2" in conflict.stderr

    read = ares("events", "read", stream, "--json", env=env)
    assert read.returncode == 0, read.stderr
    lines = [json.loads(line) for line in read.stdout.splitlines()]
    assert [e["version"] for e in lines] == [1, 2]
    assert lines[0]["payload"] == {"text": "hello"}
    assert lines[0]["module"] == "cli"
    assert set(lines[0]) == {"id", "stream_id", "type", "module", "version", "timestamp",
                             "payload", "metadata", "prev_hash", "hash", "signature", "key_id"}


@pytest.mark.parametrize(("args", "message"), [
    (["--payload", "{not json"], "not valid JSON"),
    (["--payload", "[1, 2]"], "must be a JSON object"),
    (["--expected-version", "-7"], "expected-version"),
])
def test_bad_input_is_a_usage_error(env: dict[str, str], args: list[str],
                                    message: str) -> None:
    done = ares("events", "append", "agent-x", "--type", "note.added", *args, env=env)
    assert done.returncode == 2
    assert message in done.stderr


def test_unreachable_broker_exits_4(env: dict[str, str]) -> None:
    done = ares("events", "append", "agent-x", "--type", "note.added",
                env=dict(env, ARES_KAFKA_BOOTSTRAP="127.0.0.1:1", ARES_REQUEST_TIMEOUT_S="3",
                         ARES_RETRY_TIMEOUT_S="1"))
    assert done.returncode == 4
    assert "ares dev up" in done.stderr


async def test_no_owner_exits_4_and_says_what_to_start(kafka_bootstrap: str) -> None:
    unserved = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"unserved-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(unserved, partitions=1):
        done = ares("events", "append", "agent-x", "--type", "note.added", "--timeout", "2",
                    env=ares_env(unserved, 1))
    assert done.returncode == 4
    assert "ares run runtime-manager" in done.stderr
