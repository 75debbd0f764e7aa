"""Commands outlive an outage of every runtime manager, on the real broker with real
``ares run runtime-manager`` processes and the real CLI.

* An approval given while no runtime manager runs — all of them SIGKILLed while an
  ``example.refund`` agent waits for it, the next one started 60 s later, far past any wait
  a sender had — is kept on ``ares.commands`` and applied once: one refund, one e-mail.
* A command whose sender asked for a ``--deadline`` that passed before an owner took it is
  answered "expired" and dead-lettered with its reason and original bytes; one sent without
  a deadline in the same outage is applied.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ares.client import Client, CommandRejectedError
from ares.commands.deadlines import EXPIRED_REASON, EXPIRED_REPLY
from ares.commands.model import Command
from ares.config import Settings
from ares.events.kafka.dlq import DeadLetter
from ares.events.model import Event
from ares.examples import evidence
from ares.examples.refund import REFUNDS
from ares.topics import DLQ, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env
from tests.support.workers import (
    fleet_events,
    has,
    host_of,
    of_type,
    start_worker,
    stop_worker,
    wait_fleet,
    wait_group,
    workers,
)

PARTITIONS = 2
SESSION_TIMEOUT_MS = 6000
OUTAGE_S = 60.0  # longer than any wait a sender had (the old deadline was the CLI's 10 s)
CLI_WAIT_S = 5


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"kept-{uuid.uuid4().hex[:8]}.", request_timeout_s=40.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


def waits_for_approval(events: list[Event]) -> bool:
    return (any(e.type == "wait.started" and e.payload.get("kind") == "approval"
                for e in events) and not of_type(events, "task.completed"))


async def dead_letters(settings: Settings, topics: TopicPlan) -> list[DeadLetter]:
    records = await drain_records(settings.kafka_bootstrap, topics.name(DLQ),
                                  partitions=topics.topic(DLQ).partitions)
    return [DeadLetter.from_record(r.key, r.value, r.headers) for r in records]


async def nothing_applied_until(settings: Settings, topics: TopicPlan, agent: str,
                                until: float) -> int:
    """Poll the agent's stream until the epoch time ``until``: no owner runs, so nothing may
    be appended to it meanwhile (the outage is real); the number of polls."""
    polls = 0
    while True:
        events = (await fleet_events(settings, topics)).get(agent, [])
        assert not of_type(events, "signal.received"), "an owner applied the signal"
        assert waits_for_approval(events)
        polls += 1
        if time.time() >= until:
            return polls
        await asyncio.sleep(min(2.0, max(until - time.time(), 0.0)))


async def applied_once_after_the_outage(settings: Settings, topics: TopicPlan,
                                        events: list[Event], ledger: Path, signal_id: str,
                                        outage_end: float) -> None:
    """One signal, consumed by the wait, after the outage, by a new incarnation on the
    runtime manager started then; one refund, one e-mail (the log and the ledgers agree);
    nothing dead-lettered."""
    agent = events[0].stream_id
    [received] = of_type(events, "signal.received")
    assert received.payload["signal_id"] == signal_id
    assert received.timestamp.timestamp() >= outage_end  # applied after the outage
    [consumed] = [e for e in of_type(events, "wait.completed")
                  if e.payload.get("kind") == "approval"]
    assert consumed.payload["signal_id"] == signal_id
    # The work moved: a new incarnation on the runtime manager started after the outage.
    [back] = of_type(events, "agent.resurrected")
    assert back.payload["worker"] == "w-c"
    assert back.version < received.version
    completed = [e.payload["tool"] for e in of_type(events, "tool.call.completed")]
    assert sorted(completed) == ["refund", "send_email"]
    [done] = of_type(events, "task.completed")
    assert json.loads(done.payload["output_json"])["refunded"] is True
    refunds = [r for r in evidence.read_lines(ledger / REFUNDS) if r["agent_id"] == agent]
    emails = [m for m in evidence.read_lines(ledger / evidence.SIDE_EFFECTS)
              if m["agent_id"] == agent]
    assert len(refunds) == 1, refunds
    assert len(emails) == 1, emails
    assert [d for d in await dead_letters(settings, topics) if d.key == agent.encode()] == []


async def test_an_approval_given_during_a_60_s_outage_of_every_runtime_manager_is_applied_once(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    ledger = tmp_path / "ledger"
    env = ares_env(settings, PARTITIONS, ARES_EXAMPLE_LEDGER_DIR=str(ledger))
    agent, signal_id = "refund-outage", "approval-of-refund-outage"
    with workers(settings, PARTITIONS, tmp_path / "logs", ("w-a", "w-b"),
                 session_timeout_ms=SESSION_TIMEOUT_MS,
                 ARES_EXAMPLE_LEDGER_DIR=str(ledger)) as procs:
        await wait_group(settings, topics, members=2)
        async with Client(settings, topics, issuer="test-kept") as client:
            await client.start_agent(agent, "example.refund")
            await client.assign_task(agent, "t1", {"amount": 42.0, "cooling_off_s": 0})
        before = await wait_fleet(settings, topics, [agent], waits_for_approval, 90,
                                  "waiting for approval")
        first_host = host_of(before[agent])
        status = ares("agents", "status", agent, "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["waiting_for"]["kind"] == "approval"
        # Every runtime manager, alive until now, goes at once: no owner is left anywhere.
        assert all(w.proc.poll() is None for w in procs.values())
        killed_at = max(w.kill() for w in procs.values())

        sent = ares("agents", "signal", agent, "approved", "--signal-id", signal_id,
                    "--timeout", str(CLI_WAIT_S), env=env)
        assert sent.returncode == 4, sent.stderr
        assert sent.stdout == ""  # the id is printed once the owner has answered
        words = " ".join(sent.stderr.split())
        assert f"not answered within {CLI_WAIT_S} s" in words
        assert ("the command is kept on ares.commands and will be applied when an owner "
                "takes it") in words
        assert (f"`ares agents signal {agent} approved --signal-id {signal_id}` waits for it "
                "again (applied once)") in words

        polls = await nothing_applied_until(settings, topics, agent, killed_at + OUTAGE_S)
        successor = start_worker(env, tmp_path / "logs", "w-c",
                                 session_timeout_ms=SESSION_TIMEOUT_MS)
        try:
            await wait_fleet(settings, topics, [agent], has("task.completed"), 180,
                                     "done with the refund after the outage")
            # Waiting again with the same id: answered, applied once (nothing new appended).
            again = ares("agents", "signal", agent, "approved", "--signal-id", signal_id,
                         "--timeout", "30", env=env)
        finally:
            stop_worker(successor)
    events = (await fleet_events(settings, topics))[agent]
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == signal_id
    assert "signal already received" in again.stderr
    assert first_host in ("w-a", "w-b")
    await applied_once_after_the_outage(settings, topics, events, ledger, signal_id,
                                        killed_at + OUTAGE_S)
    print(f"\napproval sent during a {OUTAGE_S:.0f} s outage of every runtime manager "
          f"({polls} polls saw nothing applied): applied once, refund and e-mail once")


async def test_a_command_past_the_deadline_its_sender_asked_for_is_answered_and_dead_lettered(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    env = ares_env(settings, PARTITIONS)
    agent = "keeper"
    # No runtime manager runs: the start, kept, waits for one; the signals carry deadlines.
    started = ares("agents", "start", agent, "--kind", "test.waiter", "--timeout", "2", env=env)
    assert started.returncode == 4, started.stderr
    assert "will be applied when an owner takes it" in " ".join(started.stderr.split())
    late = ares("agents", "signal", agent, "go", "--signal-id", "cli-late", "--deadline", "1",
                "--timeout", "2", env=env)
    assert late.returncode == 4, late.stderr
    words = " ".join(late.stderr.split())
    assert ("has passed: an owner that takes it now refuses it and dead-letters it to "
            "ares.dlq (reason expired), it is not applied") in words
    assert "waits for it again" not in words
    async with Client(settings, topics, issuer="test-kept") as client:
        answer = asyncio.ensure_future(client.command(
            "agent.signal", agent, timeout_s=120, deadline_s=0.5, name="go",
            signal_id="client-late", payload_json="null"))
        await asyncio.sleep(1.0)  # the fault: the deadline passes while no owner runs
        assert not answer.done()
        with workers(settings, PARTITIONS, tmp_path / "logs", ("w-a",),
                     session_timeout_ms=SESSION_TIMEOUT_MS):
            with pytest.raises(CommandRejectedError) as refused:
                await answer
            fleet = await wait_fleet(settings, topics, [agent], has("agent.started"), 60,
                                     "started")
    assert EXPIRED_REPLY in str(refused.value)
    assert of_type(fleet[agent], "signal.received") == []  # the agent is there, unsignalled
    letters = [d for d in await dead_letters(settings, topics) if d.key == agent.encode()]
    assert {d.reason for d in letters} == {EXPIRED_REASON}
    assert letters
    originals = {Command.decode(d.value).payload["signal_id"]: d for d in letters
                 if d.value is not None}
    assert set(originals) == {"cli-late", "client-late"}
    assert "the sender's deadline" in originals["client-late"].detail
