"""Exactly-once at every crash point of a command's life, proven by crashes on the real broker.

A runtime manager armed with ``ARES_CRASH_POINT=<point>:2`` SIGKILLs itself when its second
command (a ``task.assign``; the first is the agent's ``agent.start``) reaches the point
(ares.runtime_manager.crash_points lists them and where each sits). The event-id dedupe
window is 0 on every process (``ARES_DEDUPE_WINDOW=0``): no in-memory memory of appended
ids can hide a double append; what must make the effect happen once is the transaction
(events, reply and consumed offset commit together or not at all) and the stream state
folded from the log (a task id already assigned is not assigned again).

Then a second, unarmed runtime manager takes the partition over (fencing the victim's
transactional id, which aborts its open transaction) and the client sends the same command
again (same command id). The log must hold the assignment exactly once, the retry must be
answered OK, and the task must complete once. The survivor's recovery record of the agent
lists the checks it ran, and ``ares audit verify --state`` recomputes its state hash from
the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ares.client import Client
from ares.commands.model import COMMAND_ID, Command, Reply, ReplyStatus
from ares.config import Settings
from ares.events.model import Event
from ares.events.wire.canonical import canonical_json
from ares.lifecycle.recovery import RecoveryRecord
from ares.runtime_manager.crash_points import ENV, POINTS
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares, ares_env
from tests.support.workers import (
    TEST_AGENTS,
    has,
    start_worker,
    stop_worker,
    wait_fleet,
    wait_group,
)

PARTITIONS = 1
SESSION_TIMEOUT_MS = 4000
AGENT = "crash-point-waiter"


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"crashpt-{uuid.uuid4().hex[:8]}.", request_timeout_s=30.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


async def wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (code := proc.poll()) is not None:
            return code
        await asyncio.sleep(0.1)
    return None


def by_command(events: list[Event], event_type: str, command_id: str) -> list[Event]:
    return [e for e in events if e.type == event_type and e.metadata.get(COMMAND_ID) == command_id]


def assert_recovery_audited(settings: Settings, events: list[Event]) -> None:
    """The survivor's recovery of the agent says what it checked, and the audit rebuilds the
    state it recorded from the log and finds the same hash."""
    records = [RecoveryRecord.from_event(e) for e in events if e.type == "agent.resurrected"]
    assert records, [f"{e.version}:{e.type}" for e in events]
    for record in records:
        assert record.verified is True
        assert record.checks is not None
        assert "chain" in record.checks
        assert record.resume_s is not None
    done = ares("audit", "verify", "--json", "--no-index", "--state", "--agents", TEST_AGENTS,
                AGENT, env=ares_env(settings, PARTITIONS), timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    state = json.loads(done.stdout)["state"]
    assert [r["status"] for r in state["records"]] == ["ok"] * len(records), state


@pytest.mark.parametrize("point", POINTS)
async def test_a_command_crashed_at_each_point_takes_effect_exactly_once(
    point: str, plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    settings, topics = plan
    logs = tmp_path / "logs"
    victim = start_worker(ares_env(settings, PARTITIONS, ARES_DEDUPE_WINDOW="0",
                                   **{ENV: f"{point}:2"}),
                          logs, "crash-victim", session_timeout_ms=SESSION_TIMEOUT_MS)
    survivor = None
    try:
        await wait_group(settings, topics, members=1)
        async with Client(settings, topics, issuer="test-crash-points") as client:
            started = await client.start_agent(AGENT, "test.waiter")
            assert started.status is ReplyStatus.OK
            assert victim.proc.poll() is None, "the victim died before the command under test"
            assign = Command(type="task.assign", stream_id=AGENT, issuer="test-crash-points",
                             payload={"task_id": "t1",
                                      "input_json": canonical_json({"signal": "go"})})
            first = asyncio.create_task(client.send(assign, timeout_s=120))
            code = await wait_exit(victim.proc, 60)
            assert code == -signal.SIGKILL, (code, victim.log_text()[-3000:])
            tail = victim.log_text().strip().splitlines()[-5:]
            assert any(f"crash point {point} reached" in line for line in tail), tail

            # The victim's last word: committed at after_commit, so its reply may be out.
            first_reply: Reply | None = None
            await asyncio.sleep(0.5)
            if first.done() and first.exception() is None:
                first_reply = first.result()
            else:
                first.cancel()
                with contextlib.suppress(BaseException):
                    await first

            survivor = start_worker(ares_env(settings, PARTITIONS, ARES_DEDUPE_WINDOW="0"),
                                    logs, "crash-survivor",
                                    session_timeout_ms=SESSION_TIMEOUT_MS)
            # The same command again: the same id, so the same correlation.
            retry = await client.send(assign, timeout_s=120)
            assert retry.status is ReplyStatus.OK, retry.message
            if first_reply is not None:
                assert first_reply.status is ReplyStatus.OK, first_reply.message
            await client.command("agent.signal", AGENT, name="go", signal_id="s1",
                                 payload_json="null")

        fleet = await wait_fleet(settings, topics, [AGENT], has("task.completed"), 90,
                                 "done with t1")
        events = fleet[AGENT]
        assert [e.version for e in events] == list(range(1, len(events) + 1))
        assert len(by_command(events, "agent.started", started.correlation_id)) == 1
        assigned = [e for e in events if e.type == "task.assigned"]
        assert len(assigned) == 1, [f"{e.version}:{e.type}" for e in events]
        assert assigned[0].metadata.get(COMMAND_ID) == assign.id
        assert assigned[0].payload["task_id"] == "t1"
        assert len([e for e in events if e.type == "task.completed"]) == 1
        assert len([e for e in events if e.type == "signal.received"]) == 1

        assert_recovery_audited(settings, events)
    finally:
        stop_worker(victim)
        if survivor is not None:
            stop_worker(survivor)
