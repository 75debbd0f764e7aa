"""``ares events read|tail|dump`` on the real broker.

Each test gets a topic prefix of its own (``ares topics apply`` with 2 partitions), writes
through a KafkaEventStore that owns every partition (or produces raw records with aiokafka)
and runs the CLI. ``read`` and ``dump`` run in-process through click's CliRunner; ``tail``
and the exit-code checks run the real ``ares`` entry point as a subprocess, because they are
about signals, the process's exit status and what reaches its stderr.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from click.testing import CliRunner, Result

from ares.cli import cli
from ares.config import Settings
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event, NewEvent
from ares.events.wire.codec import encode
from ares.events.wire.schemas import COMMAND, EVENT
from ares.topics import COMMANDS, DLQ, EVENTS, apply_topics, delete_topics, load_topics

PARTITIONS = 2
ARES = Path(sys.executable).parent / "ares"
ENVELOPE = ["id", "stream_id", "type", "module", "version", "timestamp", "payload", "metadata",
            "prev_hash", "hash", "signature", "key_id"]
JUNK = b"\x00not avro at all\xff"


@pytest.fixture
def env(settings: Settings, unique: str) -> Iterator[Settings]:
    """Settings under a prefix of this test's own, with every ares topic created."""
    scoped = settings.with_overrides(topic_prefix=f"{settings.topic_prefix}{unique}.")
    plan = load_topics(scoped, env={"ARES_TOPIC_PARTITIONS": str(PARTITIONS)})
    asyncio.run(apply_topics(plan, scoped))
    yield scoped
    asyncio.run(delete_topics(plan, scoped))


def topic(settings: Settings, logical: str) -> str:
    return load_topics(settings, env={}).name(logical)


def ares(settings: Settings, *args: str) -> Result:
    """The CLI in-process, pointed at the test's broker and prefix."""
    return CliRunner().invoke(cli, ["--bootstrap-servers", settings.kafka_bootstrap,
                                    "--topic-prefix", settings.topic_prefix, *args],
                              catch_exceptions=False)


def ares_process(settings: Settings, *args: str, **env: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ARES_")}
    environ["PYTHONFAULTHANDLER"] = "1"  # SIGABRT prints every thread's stack (a hang's why)
    environ.update(env)
    return subprocess.Popen(
        [str(ARES), "--bootstrap-servers", settings.kafka_bootstrap, "--topic-prefix",
         settings.topic_prefix, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ)


def lines(result: Result) -> list[str]:
    return result.stdout.splitlines()


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(result)]


def append(settings: Settings, appends: Sequence[tuple[str, list[NewEvent]]]) -> list[Event]:
    """Append through a store owning every partition; the stored events, once stable."""

    async def run() -> list[Event]:
        store = await KafkaEventStore.open(settings, topic=topic(settings, EVENTS))
        try:
            for stream, new in appends:
                await store.append(stream, new)
            # A read through the owner waits until the commit markers are written: after
            # it, any read_committed reader sees the events.
            return [e for stream in dict(appends) for e in await store.read(stream)]
        finally:
            await store.close()

    return asyncio.run(run())


def notes(*texts: str, module: str = "tests") -> list[NewEvent]:
    return [NewEvent("note.added", module, {"text": text}) for text in texts]


def produce(settings: Settings, logical: str, records: Sequence[
        tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]) -> None:
    """Raw records (partition, key, value, headers): what a misbehaving client could send."""

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for partition, key, value, headers in records:
                await producer.send_and_wait(topic(settings, logical), value, key=key,
                                             partition=partition, headers=headers)
        finally:
            await producer.stop()

    asyncio.run(run())


# -- read ------------------------------------------------------------------------------------


def test_read_json_is_the_envelope_in_version_order(env: Settings) -> None:
    stored = append(env, [
        ("agent-a", [NewEvent("task.assigned", "tests",
                              {"task_id": "t-1", "input_json": '{"text":"hi"}'},
                              {"trace": "x"})]),
        ("agent-b", notes("other stream")),
        ("agent-a", notes("one", "two")),
    ])
    result = ares(env, "events", "read", "agent-a", "--json")
    assert result.exit_code == 0, result.output
    found = json_lines(result)
    assert [list(obj) for obj in found] == [ENVELOPE] * 3
    assert [obj["version"] for obj in found] == [1, 2, 3]
    assert found == [e.to_json() for e in stored if e.stream_id == "agent-a"]
    assert found[0]["payload"] == {"task_id": "t-1", "input_json": '{"text":"hi"}'}
    assert found[0]["metadata"] == {"trace": "x"}
    assert found[1]["prev_hash"] == found[0]["hash"]
    assert result.stderr == ""


def test_read_from_version_limit_backward(env: Settings) -> None:
    append(env, [("agent-a", notes("1", "2", "3", "4", "5"))])

    def versions(*flags: str) -> list[int]:
        result = ares(env, "events", "read", "agent-a", "--json", *flags)
        assert result.exit_code == 0, result.output
        return [obj["version"] for obj in json_lines(result)]

    assert versions("--from-version", "2", "--limit", "2") == [2, 3]
    assert versions("--from-version", "4") == [4, 5]
    assert versions("--backward") == [5, 4, 3, 2, 1]
    assert versions("--backward", "--limit", "2") == [5, 4]
    assert versions("--backward", "--from-version", "3", "--limit", "2") == [3, 2]


def test_read_human_lines(env: Settings) -> None:
    append(env, [("agent-a", notes("hello", module="planner"))])
    result = ares(env, "events", "read", "agent-a")
    assert result.exit_code == 0, result.output
    (line,) = lines(result)
    assert line.startswith("v1  20")
    assert line.endswith('  note.added  [planner]  {"text":"hello"}')


def test_read_of_an_unknown_stream_is_empty_with_a_note(env: Settings) -> None:
    append(env, [("agent-a", notes("x"))])
    result = ares(env, "events", "read", "nobody")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "stream 'nobody' has no events" in result.stderr
    result = ares(env, "events", "read", "agent-a", "--from-version", "5")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "is at version 1: no event from version 5" in result.stderr


def test_read_skips_garbage_in_the_partition(env: Settings) -> None:
    partition = partition_for("agent-a", PARTITIONS)
    append(env, [("agent-a", notes("before"))])
    produce(env, EVENTS, [(partition, b"agent-a", JUNK, [])])
    append(env, [("agent-a", notes("after"))])
    result = ares(env, "events", "read", "agent-a", "--json")
    assert result.exit_code == 0, result.output
    assert [obj["payload"]["text"] for obj in json_lines(result)] == ["before", "after"]


@pytest.mark.parametrize("flags", [["--limit", "0"], ["--from-version", "0"],
                                   ["--from-version", "x"]])
def test_read_bad_flags_are_usage_errors(env: Settings, flags: list[str]) -> None:
    result = CliRunner().invoke(cli, ["events", "read", "agent-a", *flags])
    assert result.exit_code == 2


# -- dump ------------------------------------------------------------------------------------


def test_dump_decodes_the_events_topic(env: Settings) -> None:
    stored = append(env, [("agent-a", notes("one", "two")), ("agent-b", notes("three"))])
    result = ares(env, "events", "dump", "--topic", "ares.events", "--json")
    assert result.exit_code == 0, result.output
    found = json_lines(result)
    assert {obj["record"] for obj in found} == {EVENT}
    assert sorted(obj["value"]["id"] for obj in found) == sorted(e.id for e in stored)
    for obj in found:
        event = next(e for e in stored if e.id == obj["value"]["id"])
        assert obj["value"] == event.to_json()
        assert obj["key"] == event.stream_id
        assert obj["partition"] == partition_for(event.stream_id, PARTITIONS)
        assert obj["topic"] == topic(env, EVENTS)
        assert obj["error"] is None
    # Partitions in order, offsets increasing within each.
    assert [(o["partition"], o["offset"]) for o in found] == sorted(
        (o["partition"], o["offset"]) for o in found)

    human = ares(env, "events", "dump", "--topic", topic(env, EVENTS))  # the full name too
    assert human.exit_code == 0, human.output
    assert len(lines(human)) == 3
    assert all("note.added [tests]" in line for line in lines(human))


def test_dump_partition_offset_and_limit(env: Settings) -> None:
    append(env, [("agent-a", notes("1", "2", "3", "4"))])
    partition = str(partition_for("agent-a", PARTITIONS))
    result = ares(env, "events", "dump", "--topic", "ares.events", "--partition", partition,
                  "--from-offset", "1", "--limit", "2", "--json")
    assert result.exit_code == 0, result.output
    found = json_lines(result)
    # Offsets 0-3 are the four events (one transaction, its commit marker at 4).
    assert [o["value"]["payload"]["text"] for o in found] == ["2", "3"]
    assert found[0]["offset"] >= 1
    beyond = ares(env, "events", "dump", "--topic", "ares.events", "--partition", partition,
                  "--from-offset", "1000")
    assert (beyond.exit_code, beyond.stdout) == (0, "")
    assert "no records" in beyond.stderr


def test_dump_shows_undecodable_records(env: Settings) -> None:
    command = encode(COMMAND, {"id": "cmd-1", "stream_id": "agent-a", "type": "agent.kill",
                               "issuer": "tests", "timestamp": time.time_ns() // 1000,
                               "payload": {}, "reply_to": None, "metadata": {}})
    produce(env, COMMANDS, [(0, b"agent-a", JUNK, []), (0, b"agent-a", command, []),
                            (0, b"agent-a", b"\xc3\x01\x01\x02", [])])
    result = ares(env, "events", "dump", "--topic", "ares.commands", "--partition", "0",
                  "--json")
    assert result.exit_code == 0, result.output
    junk, valid, truncated = json_lines(result)
    assert junk["error"]["reason"] == "bad_magic"
    assert base64.b64decode(junk["value_base64"]) == JUNK
    assert (junk["record"], junk["value"]) == (None, None)
    assert valid["record"] == COMMAND
    assert valid["value"]["type"] == "agent.kill"
    assert truncated["error"]["reason"] == "truncated"

    human = ares(env, "events", "dump", "--topic", "ares.commands")
    assert human.exit_code == 0, human.output
    text = human.stdout
    assert "UNDECODABLE bad_magic: expected c3 01, got 00 6e" in text
    assert f"value {len(JUNK)} bytes: 00 6e 6f 74" in text
    assert "command agent.kill stream=agent-a issuer=tests id=cmd-1" in text
    assert "UNDECODABLE truncated" in text


def test_dump_shows_dead_letters(env: Settings) -> None:
    letter = DeadLetter(reason="bad_magic", detail="expected c3 01, got 00 6e",
                        source_topic=topic(env, COMMANDS), source_partition=1,
                        source_offset=42, key=b"agent-a", value=JUNK)
    produce(env, DLQ, [(1, letter.key, JUNK, letter.headers())])
    result = ares(env, "events", "dump", "--topic", "ares.dlq", "--json")
    assert result.exit_code == 0, result.output
    (obj,) = json_lines(result)
    dead = obj["dead_letter"]
    assert dead["reason"] == "bad_magic"
    assert dead["detail"] == "expected c3 01, got 00 6e"
    assert (dead["source_topic"], dead["source_partition"], dead["source_offset"]) == (
        topic(env, COMMANDS), 1, 42)
    assert dead["time"] is not None
    assert base64.b64decode(obj["value_base64"]) == JUNK
    assert (obj["key"], obj["partition"]) == ("agent-a", 1)

    human = ares(env, "events", "dump", "--topic", "ares.dlq")
    assert human.exit_code == 0, human.output
    head, source, original, b64 = lines(human)
    assert head.endswith("key=agent-a  DEAD LETTER bad_magic: expected c3 01, got 00 6e")
    assert source.startswith(f"    from {topic(env, COMMANDS)}/1@42, rejected 20")
    assert original.startswith(f"    original {len(JUNK)} bytes: 00 6e")
    assert b64 == f"    base64 {base64.b64encode(JUNK).decode()}"


def test_dump_usage_errors(env: Settings) -> None:
    result = ares(env, "events", "dump", "--topic", "ares.events", "--partition", "7")
    assert result.exit_code == 2
    assert "has 2 partition(s)" in result.stderr
    result = ares(env, "events", "dump", "--topic", "no.such.topic")
    assert result.exit_code == 2
    assert "not an ares topic" in result.stderr
    assert ares(env, "events", "dump").exit_code == 2  # --topic is required


# -- tail ------------------------------------------------------------------------------------


class Tail:
    """``ares events tail`` as a process; ``started`` once it follows (its stderr says so)."""

    def __init__(self, settings: Settings, *args: str) -> None:
        self.process = ares_process(settings, "events", "tail", *args)
        self.following = threading.Event()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            if line.startswith("following"):
                self.following.set()

    def wait_following(self) -> None:
        if not self.following.wait(60):
            self.process.kill()
            pytest.fail(f"tail did not start: {''.join(self.stderr)}")

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        try:
            out, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)  # the stacks, then the end
            try:
                _, rest = self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                _, rest = self.process.communicate()
            self._reader.join(10)
            pytest.fail(f"tail still ran {timeout} s later; its stderr:\n"
                        f"{''.join(self.stderr)}{rest or ''}")
        self._reader.join(10)
        return self.process.returncode, out, "".join(self.stderr)


def test_tail_follows_matching_live_events(env: Settings) -> None:
    append(env, [("agent-a", notes("old"))])  # before the tail: not shown
    tail = Tail(env, "--stream", "agent-a", "--type", "task.", "--json", "--max", "2",
                "--timeout", "90")
    tail.wait_following()
    append(env, [
        ("agent-b", [NewEvent("task.completed", "tests", {"task_id": "t-1"})]),
        ("agent-a", notes("not a task")),
        ("agent-a", [NewEvent("task.completed", "tests", {"task_id": "t-2"})]),
        ("agent-a", [NewEvent("task.failed", "tests",
                              {"task_id": "t-3", "error_message": "boom"})]),
    ])
    code, out, err = tail.finish()
    assert code == 0, err
    found = [json.loads(line) for line in out.splitlines()]
    assert [(o["stream_id"], o["type"], o["version"]) for o in found] == [
        ("agent-a", "task.completed", 3), ("agent-a", "task.failed", 4)]
    assert [list(o) for o in found] == [ENVELOPE] * 2
    assert "Traceback" not in err


def test_tail_human_lines_and_module_filter(env: Settings) -> None:
    tail = Tail(env, "--module", "planner", "--max", "1", "--timeout", "90")
    tail.wait_following()
    append(env, [("agent-b", notes("ignored")), ("agent-a", notes("hi", module="planner"))])
    code, out, err = tail.finish()
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith("agent-a  v1  20")
    assert line.endswith('note.added  [planner]  {"text":"hi"}')


def test_tail_ends_on_timeout(env: Settings) -> None:
    tail = Tail(env, "--timeout", "1")
    code, out, err = tail.finish()  # a tail that ignored --timeout would outlive finish's
    assert (code, out) == (0, ""), err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.usefixtures("sigint_not_ignored")
def test_tail_ends_cleanly_on_a_signal(env: Settings, sig: signal.Signals) -> None:
    tail = Tail(env)
    tail.wait_following()
    tail.process.send_signal(sig)
    code, _, err = tail.finish()
    assert code == 0, err
    assert "Traceback" not in err


# -- unavailable -----------------------------------------------------------------------------


UNREACHABLE = Settings(kafka_bootstrap="127.0.0.1:1")


@pytest.mark.parametrize("args", [["events", "read", "agent-a"],
                                  ["events", "dump", "--topic", "ares.events"],
                                  ["events", "tail", "--timeout", "3600"]])
def test_an_unreachable_broker_is_exit_4(args: list[str]) -> None:
    # The retry budget shortened (what is checked is the exit and the advice); a tail that
    # waited for its own --timeout instead of failing would outlive communicate's.
    process = ares_process(UNREACHABLE, *args, ARES_RETRY_TIMEOUT_S="1")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 4, err
    assert out == ""
    assert "ares dev up" in err
    assert "ARES_KAFKA_BOOTSTRAP" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("args", [["events", "read", "agent-a"],
                                  ["events", "dump", "--topic", "ares.dlq"]])
def test_missing_topics_are_exit_4(settings: Settings, unique: str, args: list[str]) -> None:
    bare = settings.with_overrides(topic_prefix=f"{settings.topic_prefix}{unique}.none.")
    process = ares_process(bare, *args)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 4, err
    assert "ares topics apply" in err
