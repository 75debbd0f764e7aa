"""Durable waits on the real broker, with SIGKILL: two ``ares run runtime-manager`` processes
host agents that wait for an approval or sleep on a durable timer; the worker hosting them
is killed mid-wait. The waits survive on the other worker: the signal sent while no owner
ran is consumed once and the tool runs once; the timer wakes at its original deadline.
Invalid signals are refused with their reason and lose nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from ares.client import Client
from ares.commands.model import Command, ReplyStatus
from ares.config import Settings
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.events.model import Event
from ares.examples import evidence
from ares.examples.refund import REFUNDS
from ares.topics import ALERTS, COMMANDS, DLQ, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env
from tests.support.workers import (
    appended_by,
    epoch,
    fleet_events,
    has,
    host_of,
    of_type,
    wait_fleet,
    wait_group,
    workers,
)

log = logging.getLogger(__name__)

PARTITIONS = 4
SESSION_TIMEOUT_MS = 4000
WORKERS = ("w-a", "w-b")
# An event's timestamp (microseconds, read back as a float) against a float read from the
# same clock just before the event was sealed: equal or later, give or take the rounding.
ROUNDING_S = 0.001


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"dw-{uuid.uuid4().hex[:8]}.", request_timeout_s=40.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


def waits_started(kind: str) -> object:
    return lambda events: any(e.type == "wait.started" and e.payload.get("kind") == kind
                              for e in events)


def victim_and_orphans(fleet: dict[str, list[Event]],
                       agents: Sequence[str]) -> tuple[str, str, list[str]]:
    """The worker to kill (the one hosting the most agents), the survivor, its agents."""
    hosts = {a: host_of(fleet[a]) for a in agents}
    victim = max(WORKERS, key=lambda w: sum(1 for h in hosts.values() if h == w))
    survivor = next(w for w in WORKERS if w != victim)
    orphans = [a for a in agents if hosts[a] == victim]
    assert orphans, hosts
    return victim, survivor, orphans


async def test_an_approval_sent_while_no_owner_runs_is_consumed_once(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    ledger = tmp_path / "ledger"
    agents = [f"refund-{i}" for i in range(8)]
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS,
                 ARES_EXAMPLE_LEDGER_DIR=str(ledger)) as procs:
        await wait_group(settings, topics, members=2)
        async with Client(settings, topics, issuer="test-waits") as client:
            for agent in agents:
                await client.start_agent(agent, "example.refund")
                await client.assign_task(agent, "t1", {"amount": 12.5, "cooling_off_s": 0})
            before = await wait_fleet(settings, topics, agents, waits_started("approval"),
                                      60, "waiting for approval")
            victim, survivor, orphans = victim_and_orphans(before, agents)
            assert procs[victim].proc.poll() is None  # alive, hosting waiting agents
            killed_at = procs[victim].kill()
            # Signals for the orphans go out now, before the group has noticed the death:
            # no owner runs for them until the survivor takes their partitions over.
            sent_epoch = time.time()
            answered = await asyncio.gather(*(
                client.command("agent.signal", agent, name="approved",
                               signal_id=f"{agent}-ok", payload_json="null")
                for agent in agents))
            assert {r.status for r in answered} == {ReplyStatus.OK}
            fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 90,
                                     "done with their refund")
            # A redelivery of the same signal (same id) after the fact changes nothing.
            again = await client.command("agent.signal", orphans[0], name="approved",
                                         signal_id=f"{orphans[0]}-ok")
            assert again.message == "signal already received"
        fleet = await fleet_events(settings, topics)

    refunds = list(evidence.read_lines(ledger / REFUNDS))
    emails = list(evidence.read_lines(ledger / evidence.SIDE_EFFECTS))
    for agent in agents:
        events = fleet[agent]
        assert len(of_type(events, "signal.received")) == 1, agent
        [consumed] = [e for e in of_type(events, "wait.completed")
                      if e.payload.get("kind") == "approval"]
        assert consumed.payload["signal_id"] == f"{agent}-ok"
        assert len(of_type(events, "tool.call.completed")) == 2  # the refund, the e-mail
        assert [r["agent_id"] for r in refunds].count(agent) == 1, refunds
        assert [m["agent_id"] for m in emails].count(agent) == 1, emails
        output = json.loads(of_type(events, "task.completed")[0].payload["output_json"])
        assert output["refunded"] is True
    for agent in orphans:
        events = fleet[agent]
        [back] = of_type(events, "agent.resurrected")
        assert back.payload["worker"] == survivor  # the work moved
        assert epoch(back.timestamp) > sent_epoch  # the signal waited for an owner
        [received] = of_type(events, "signal.received")
        assert received.version > back.version
        [refund] = [r for r in refunds if r["agent_id"] == agent]
        assert refund["incarnation"] == 2  # the refund ran once, after the resurrection
    alerts = await drain_records(settings.kafka_bootstrap, topics.name(ALERTS),
                                 partitions=topics.topic(ALERTS).partitions)
    announced = Counter(r.key.decode() for r in alerts if b"approval.requested" in r.value)
    # Once each: the alert commits with the recorded request, not again after the failover.
    assert announced == dict.fromkeys(agents, 1)
    log.warning("approval: SIGKILL at %.3f; %d of %d agents moved to %s",
                killed_at, len(orphans), len(agents), survivor)


async def test_a_durable_sleep_wakes_at_its_original_deadline_on_the_survivor(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    agents = [f"napper-{i}" for i in range(8)]
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS) as procs:
        await wait_group(settings, topics, members=2)
        async with Client(settings, topics, issuer="test-waits") as client:
            for agent in agents:
                await client.start_agent(agent, "test.napper")
                await client.assign_task(agent, "t1", {"seconds": 20})
        before = await wait_fleet(settings, topics, agents, waits_started("timer"), 60,
                                  "sleeping")
        victim, survivor, orphans = victim_and_orphans(before, agents)
        latest_start = max(epoch(of_type(before[a], "wait.started")[0].timestamp)
                           for a in agents)
        await asyncio.sleep(max(0.0, latest_start + 10 - time.time()))
        assert procs[victim].proc.poll() is None  # alive, hosting sleeping agents
        killed_at = procs[victim].kill()
        fleet = await wait_fleet(settings, topics, agents, has("task.completed"), 90,
                                 "awake and done")

    lateness = []
    for agent in agents:
        events = fleet[agent]
        # One wait, started once: its deadline was fixed when the sleep began (20 s on the
        # clock read just before the event was sealed), and nobody started it again.
        [started] = of_type(events, "wait.started")
        [woke] = of_type(events, "wait.completed")
        deadline = float(started.payload["deadline"])
        assert deadline <= epoch(started.timestamp) + 20 + ROUNDING_S
        assert epoch(started.timestamp) < killed_at < deadline  # asleep at the kill
        assert woke.payload["outcome"] == "elapsed"
        assert epoch(woke.timestamp) >= deadline  # never before its deadline
        assert appended_by(events, "task.completed") == appended_by(events, "wait.completed")
        lateness.append(epoch(woke.timestamp) - deadline)
    for agent in orphans:
        # The kill hit a pending timer and the work moved: the first incarnation started
        # the sleep, the survivor's (the second) woke it at the recorded deadline and
        # finished the task. How late it woke is bench/takeover.py's figure.
        events = fleet[agent]
        [back] = of_type(events, "agent.resurrected")
        assert back.payload["worker"] == survivor
        assert epoch(back.timestamp) > killed_at
        assert appended_by(events, "wait.started") == [1]
        assert appended_by(events, "wait.completed") == [2]
        assert appended_by(events, "task.completed") == [2]
    print(f"\ndurable sleep of 20 s, worker SIGKILLed at 10 s: woke {max(lateness):.3f} s "
          f"after the deadline at most ({len(orphans)} agents moved to {survivor})")


async def test_invalid_signals_are_refused_with_their_reason_and_lose_nothing(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    env = ares_env(settings, PARTITIONS)
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS[:1],
                 session_timeout_ms=SESSION_TIMEOUT_MS):
        await wait_group(settings, topics, members=1)
        unknown = ares("agents", "signal", "ghost", "approved", "--signal-id", "g1", env=env)
        assert unknown.returncode == 1, unknown.stderr
        assert "no agent 'ghost'" in unknown.stderr
        too_big = ares("agents", "signal", "ghost", "approved", "--payload",
                       json.dumps("x" * 70_000), env=env)
        assert too_big.returncode == 2
        assert "over the 65536" in too_big.stderr
        bad_json = ares("agents", "signal", "ghost", "approved", "--payload", "{nope", env=env)
        assert bad_json.returncode == 2
        # Hostile records straight onto ares.commands, as a foreign producer could write.
        async with Client(settings, topics, issuer="test-waits") as client:
            await client.start_agent("target", "test.napper")
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
        await producer.start()
        try:
            for signal_id, payload_json, name in (("bad-json", "{nope", "approved"),
                                                   ("no-name", "null", ""),
                                                   ("huge", json.dumps("y" * 70_000), "x")):
                command = Command(type="agent.signal", stream_id="target", issuer="raw",
                                  payload={"name": name, "signal_id": signal_id,
                                           "payload_json": payload_json})
                await producer.send_and_wait(
                    topics.name(COMMANDS), command.encode(), key=b"target",
                    partition=partition_for("target", PARTITIONS))
        finally:
            await producer.stop()
        # The owner kept serving: a valid signal afterwards is applied.
        ok = ares("agents", "signal", "target", "approved", "--signal-id", "fine", env=env)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip() == "fine"
        events = (await fleet_events(settings, topics))["target"]

    assert [e.payload["signal_id"] for e in of_type(events, "signal.received")] == ["fine"]
    records = await drain_records(settings.kafka_bootstrap, topics.name(DLQ),
                                  partitions=topics.topic(DLQ).partitions)
    letters = [DeadLetter.from_record(r.key, r.value, r.headers) for r in records]
    reasons = {(d.key, d.reason) for d in letters}
    assert reasons == {(b"ghost", "unknown_agent"), (b"target", "invalid_payload"),
                       (b"target", "oversized")}
    assert sum(1 for d in letters if d.reason == "invalid_payload") == 2  # bad JSON, no name
    # The original bytes are kept: a dead letter decodes as the command that was sent.
    originals = {Command.decode(d.value).payload["signal_id"] for d in letters
                 if d.value is not None}
    assert originals == {"g1", "bad-json", "no-name", "huge"}
