"""The crash-point seam (ARES_CRASH_POINT), the dedupe-window setting (ARES_DEDUPE_WINDOW)
and a command's effect staged once per transaction without any event-id window."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from ares.agents.host_api import AgentServices
from ares.commands.model import Command, ReplyStatus
from ares.config import DEFAULT_DEDUPE_WINDOW, Settings
from ares.errors import ConfigError
from ares.events.model import NewEvent
from ares.events.writer import DEFAULT_ID_WINDOW, StreamTable
from ares.runtime_manager import crash_points
from ares.runtime_manager.host import AgentHost, PartitionState
from ares.topics import load_topics
from tests.support.agents import REGISTRY


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """os.kill recorded instead of done; the seam disarmed afterwards."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: calls.append((pid, sig)))
    yield calls
    crash_points.arm(None)


# -- the seam --------------------------------------------------------------------------------


def test_a_spec_names_a_point_and_optionally_its_nth_time() -> None:
    assert crash_points.parse("consumed") == ("consumed", 1)
    assert crash_points.parse("before_commit:3") == ("before_commit", 3)
    for bad in ("nowhere", "handled:0", "handled:x", "handled:-1"):
        with pytest.raises(ConfigError, match="ARES_CRASH_POINT"):
            crash_points.parse(bad)


def test_unarmed_every_point_passes(kills: list[tuple[int, int]]) -> None:
    crash_points.arm_from_env({})
    assert crash_points.armed() is None
    for point in crash_points.POINTS:
        crash_points.reached(point)
    assert kills == []


def test_armed_the_process_is_sigkilled_the_nth_time_the_point_is_reached(
    kills: list[tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    crash_points.arm_from_env({crash_points.ENV: "handled:2"})
    crash_points.reached("consumed")  # another point: not counted
    crash_points.reached("handled")
    assert kills == []
    crash_points.reached("handled")
    assert [sig for _, sig in kills] == [signal.SIGKILL]
    assert "crash point handled reached" in caplog.text


class Producer:
    def __init__(self) -> None:
        self.commits = 0

    async def commit_transaction(self) -> None:
        self.commits += 1


async def test_events_sent_fires_in_the_commit_of_a_transaction_that_carries_commands(
    kills: list[tuple[int, int]]
) -> None:
    crash_points.arm("events_sent")
    producer = Producer()
    crash_points.watch_commits(producer, 0)
    crash_points.watch_commits(producer, 0)  # wrapped once
    await producer.commit_transaction()  # an agent's own append: no command in it
    assert kills == []
    crash_points.carrying(0)
    await producer.commit_transaction()
    assert len(kills) == 1
    assert producer.commits == 2


async def test_other_points_leave_the_producer_alone(kills: list[tuple[int, int]]) -> None:
    crash_points.arm("after_commit")
    producer = Producer()
    original = producer.commit_transaction
    crash_points.watch_commits(producer, 0)
    assert producer.commit_transaction == original


# -- the dedupe window -----------------------------------------------------------------------


def test_the_dedupe_window_is_a_setting_and_zero_disables_it() -> None:
    assert DEFAULT_DEDUPE_WINDOW == DEFAULT_ID_WINDOW
    assert Settings.from_env({}).dedupe_window == DEFAULT_ID_WINDOW
    assert Settings.from_env({"ARES_DEDUPE_WINDOW": "0"}).dedupe_window == 0
    with pytest.raises(ConfigError, match="ARES_DEDUPE_WINDOW"):
        Settings.from_env({"ARES_DEDUPE_WINDOW": "-1"})
    event = NewEvent("note.added", "tests", {})
    remembering, forgetting = StreamTable(), StreamTable(0)
    for table in (remembering, forgetting):
        table.apply(table.plan("s", [event]))
    assert remembering.plan("s", [event]).is_noop  # a re-sent append, recognised
    assert not forgetting.plan("s", [event]).is_noop  # window 0: nothing remembered


# -- effects once per transaction, without the window -----------------------------------------


class Writer:
    partition = 0

    def __init__(self) -> None:
        self.table = StreamTable(0)


class Tx:
    """A transaction staging into the writer's table, as the real one does."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.appended: list[str] = []

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int) -> int:
        plan = self.writer.table.plan(stream_id, events, expected_version)
        self.writer.table.apply(plan)
        self.appended.extend(e.type for e in events)
        return plan.version

    async def send(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def commit_offsets(self, *args: Any) -> None:
        return None


def host_with_one_partition() -> tuple[AgentHost, PartitionState, Writer]:
    settings = Settings()
    plan = load_topics(settings, env={"ARES_TOPIC_PARTITIONS": "1"})
    host = AgentHost(settings, plan, REGISTRY, "w1", services=AgentServices())
    writer = Writer()
    state = PartitionState(writer)  # type: ignore[arg-type]
    host.partitions[0] = state
    return host, state, writer


async def test_a_command_and_its_copy_in_one_transaction_take_effect_once() -> None:
    host, _, writer = host_with_one_partition()
    start = Command(type="agent.start", stream_id="a", payload={"kind": "test.waiter"})
    assign = Command(type="task.assign", stream_id="a",
                     payload={"task_id": "t1", "input_json": "{}"})
    tx = Tx(writer)
    replies = [await host.handle(tx, c)
               for c in (start, start, assign, assign)]
    assert [r.status for r in replies] == [ReplyStatus.OK] * 4
    assert tx.appended == ["agent.started", "task.assigned"]
    assert "already applied" in replies[3].message
    # Another task id is another effect.
    other = Command(type="task.assign", stream_id="a",
                    payload={"task_id": "t2", "input_json": "{}"})
    await host.handle(tx, other)
    assert tx.appended[-1] == "task.assigned"
    assert len(tx.appended) == 3


async def test_a_new_transaction_starts_without_the_aborted_ones_effects() -> None:
    host, state, writer = host_with_one_partition()
    start = Command(type="agent.start", stream_id="a", payload={"kind": "test.waiter"})
    aborted = Tx(writer)
    await host.handle(aborted, start)
    writer.table = StreamTable(0)  # the abort restores the table
    state.starting.clear()
    retried = Tx(writer)
    await host.handle(retried, start)
    assert retried.appended == ["agent.started"]
