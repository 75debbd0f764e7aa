"""Teams on the real broker, with SIGKILL: ``example.team`` leaders delegate to
``example.researcher`` sub-agents hosted by real ``ares run runtime-manager`` processes.

* The leader's worker is killed mid-dispatch, then the worker of a sub-agent that is mid-work:
  every child is dispatched exactly once (the log), the leader completes with the answer of
  a team that saw no fault, no recorded LLM step of any member ran twice (the ledger), and
  one e-mail went out.
* A stop mid-dispatch: no child is dispatched after the stop, the children are stopped, and
  nothing is resurrected.
* A child that crashes on every run is quarantined by the death-loop rules, and the leader
  sees it as a failed sub-task (``ChildFailed``) and falls back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from ares.client import Client
from ares.commands.model import ReplyStatus
from ares.config import Settings
from ares.events.model import Event
from ares.examples import evidence
from ares.lifecycle import events as ev
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.workers import (
    fleet_events,
    has,
    host_of,
    incarnations_of,
    of_type,
    wait_fleet,
    wait_group,
    workers,
)

log = logging.getLogger(__name__)

PARTITIONS = 6
SESSION_TIMEOUT_MS = 4000
QUESTION = "How do durable agents survive a crash?"


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"team-{uuid.uuid4().hex[:8]}.", request_timeout_s=40.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


def dispatched(events: Sequence[Event]) -> list[dict[str, object]]:
    return [dict(e.payload) for e in of_type(events, ev.DELEGATION_DISPATCHED)]


def research_children(events: Sequence[Event]) -> list[str]:
    return [str(d["child_id"]) for d in dispatched(events)
            if str(d["name"]).startswith("research-")]


def output_of(events: Sequence[Event]) -> dict[str, object]:
    [done] = of_type(events, ev.TASK_COMPLETED)
    value = json.loads(str(done.payload["output_json"]))
    assert isinstance(value, dict)
    return value


def busy_child(fleet: dict[str, list[Event]], children: Sequence[str],
               alive: set[str]) -> tuple[str, str] | None:
    """A child that is working now (task assigned, not finished) on a live worker."""
    for child in children:
        events = fleet.get(child, [])
        worker = host_of(events)
        if (worker in alive and of_type(events, ev.TASK_ASSIGNED)
                and not of_type(events, ev.TASK_COMPLETED)):
            return child, str(worker)
    return None


def audit_llm_steps(fleet: dict[str, list[Event]], ledger: Path,
                    members: Sequence[str]) -> list[str]:
    """Every recorded LLM step of ``members``: one ``llm.call``, and no execution by an
    incarnation later than the one that recorded it (a re-paid step)."""
    ran: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for line in evidence.read_lines(ledger / evidence.LLM_CALLS):
        ran[(str(line["agent_id"]), str(line["task_id"]), str(line["step"]))].append(
            int(line["incarnation"]))
    problems = []
    for member in members:
        recorded: dict[tuple[str, str], list[int]] = defaultdict(list)
        for incarnation, event in incarnations_of(fleet.get(member, [])):
            if event.type == "llm.call":
                recorded[(str(event.payload["task_id"]), str(event.payload["name"]))].append(
                    incarnation)
        for (task, step), incarnations in recorded.items():
            if len(incarnations) != 1:
                problems.append(f"{member} {task} {step}: {len(incarnations)} llm.call")
                continue
            later = [i for i in ran.get((member, task, step), []) if i > incarnations[0]]
            if later:
                problems.append(f"{member} {task} {step}: recorded by incarnation "
                                f"{incarnations[0]}, executed again by {later}")
    return problems


async def test_a_team_survives_the_kill_of_its_leaders_worker_and_of_a_childs(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    ledger = tmp_path / "ledger"
    task = {"question": QUESTION, "subtasks": 8, "step_ms": 800, "email": True}
    with workers(settings, PARTITIONS, tmp_path / "logs", ("w-a", "w-b", "w-c"),
                 session_timeout_ms=SESSION_TIMEOUT_MS,
                 ARES_EXAMPLE_LEDGER_DIR=str(ledger)) as procs:
        await wait_group(settings, topics, members=3)
        async with Client(settings, topics, issuer="test-teams") as client:
            for leader in ("team-1", "calm-1"):  # calm-1: the same question, no fault
                assert (await client.start_agent(leader, "example.team")).status \
                    is ReplyStatus.OK
                assert (await client.assign_task(leader, "t1", task)).status is ReplyStatus.OK
            before = await wait_fleet(
                settings, topics, ["team-1"],
                lambda events: len(research_children(events)) >= 3, 90, "past 3 dispatches")
            leader_events = before["team-1"]
            first_victim = host_of(leader_events)
            assert first_victim is not None
            # The fault hits work: the leader is alive, mid-dispatch, its task open.
            assert procs[first_victim].proc.poll() is None
            assert 3 <= len(research_children(leader_events)) < 8
            assert not of_type(leader_events, ev.TASK_COMPLETED)
            procs[first_victim].kill()
            alive = {w for w in procs if w != first_victim}

            # Then the worker of a child that is working, once the leader runs again.
            fleet = await wait_fleet(
                settings, topics, ["team-1"],
                lambda events: bool(of_type(events, ev.AGENT_RESURRECTED)), 90,
                "resurrected")
            found = None
            deadline = time.monotonic() + 60
            while found is None and time.monotonic() < deadline:
                fleet = await fleet_events(settings, topics)
                found = busy_child(fleet, research_children(fleet["team-1"]), alive)
                await asyncio.sleep(0.1)
            assert found is not None, ("no child was working on a live worker", alive, {
                c: [f"{e.version}:{e.type}:{e.payload.get('worker', '')}" for e in fleet.get(c, [])]
                for c in research_children(fleet["team-1"])}, [
                f"{e.version}:{e.type}" for e in fleet["team-1"]][-15:])
            busy, second_victim = found
            assert procs[second_victim].proc.poll() is None
            procs[second_victim].kill()
            fleet = await wait_fleet(settings, topics, ["team-1", "calm-1"],
                                     has(ev.TASK_COMPLETED), 180, "done")
        fleet = await fleet_events(settings, topics)

    leader = fleet["team-1"]
    # The work moved: a second incarnation of the leader ran on another worker.
    back = of_type(leader, ev.AGENT_RESURRECTED)[0]
    assert back.payload["worker"] != first_victim
    children = research_children(leader)
    assert len(children) == 8
    assert len(set(children)) == 8  # dispatched exactly once each (the log)
    for child in children:
        assert len(of_type(fleet[child], ev.TASK_ASSIGNED)) == 1, child
        assert len(of_type(fleet[child], ev.TASK_COMPLETED)) == 1, child
        assert len(of_type(fleet[child], ev.DELEGATION_REPORTED)) >= 1, child
    # The busy child died with its worker and finished in a later incarnation elsewhere.
    assert [e.payload["worker"] for e in of_type(fleet[busy], ev.AGENT_RESURRECTED)
            if e.payload["worker"] != second_victim]
    output, calm = output_of(leader), output_of(fleet["calm-1"])
    assert output["failed"] == 0
    assert output["answer"] == calm["answer"]  # the same answer as the team without faults
    members = ["team-1", *children]
    problems = audit_llm_steps(fleet, ledger, members)
    assert problems == []
    emails = [line for line in evidence.read_lines(ledger / evidence.SIDE_EFFECTS)
              if line["agent_id"] == "team-1"]
    assert len(emails) == 1
    log.warning("team: leader moved from %s, child %s from %s; %d members audited", first_victim,
                busy, second_victim, len(members))


async def test_a_stop_mid_dispatch_stops_the_children_and_starts_no_more(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    task = {"question": QUESTION, "subtasks": 10, "step_ms": 600}
    with workers(settings, PARTITIONS, tmp_path / "logs", ("w-a", "w-b"),
                 session_timeout_ms=SESSION_TIMEOUT_MS):
        await wait_group(settings, topics, members=2)
        async with Client(settings, topics, issuer="test-teams") as client:
            await client.start_agent("team-stop", "example.team")
            await client.assign_task("team-stop", "t1", task)
            before = await wait_fleet(
                settings, topics, ["team-stop"],
                lambda events: len(research_children(events)) >= 2, 90, "dispatching")
            assert not of_type(before["team-stop"], ev.TASK_COMPLETED)
            reply = await client.command("agent.stop", "team-stop", reason="test")
            assert reply.status is ReplyStatus.OK
            fleet = await wait_fleet(settings, topics, ["team-stop"],
                                     has(ev.DELEGATION_STOPPED), 60, "stopping its children")
            [sent] = of_type(fleet["team-stop"], ev.DELEGATION_STOPPED)
            stopped_children = [str(c) for c in sent.payload["children"]]
            fleet = await wait_fleet(settings, topics, stopped_children,
                                     has(ev.AGENT_STOPPED), 60, "stopped")
        fleet = await fleet_events(settings, topics)

    leader = fleet["team-stop"]
    children = research_children(leader)
    [stopped] = of_type(leader, ev.AGENT_STOPPED)
    assert all(e.version < stopped.version for e in of_type(leader, ev.DELEGATION_DISPATCHED))
    assert len(children) < 10  # stopped mid-dispatch
    assert stopped_children
    assert set(stopped_children) <= set(children)
    for child in children:  # each child was stopped, or its outcome came back before the stop
        assert child in stopped_children or of_type(fleet[child], ev.DELEGATION_REPORTED)
    # Only the dispatched children exist; nobody was resurrected after the stop.
    team_streams = [s for s in fleet if s.startswith("team-stop.")]
    assert sorted(team_streams) == sorted(children)
    assert not [e for e in leader if e.type == ev.AGENT_RESURRECTED
                and e.version > stopped.version]
    for child in stopped_children:
        [child_stop] = of_type(fleet[child], ev.AGENT_STOPPED)
        assert not [e for e in fleet[child] if e.type == ev.AGENT_RESURRECTED
                    and e.version > child_stop.version]


async def test_a_child_that_always_crashes_is_quarantined_and_the_leader_falls_back(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    task = {"question": QUESTION, "subtasks": 3, "step_ms": 0, "crash": [1], "fail": [2]}
    with workers(settings, PARTITIONS, tmp_path / "logs", ("w-a",),
                 session_timeout_ms=SESSION_TIMEOUT_MS):
        await wait_group(settings, topics, members=1)
        async with Client(settings, topics, issuer="test-teams") as client:
            await client.start_agent("team-q", "example.team")
            await client.assign_task("team-q", "t1", task)
            fleet = await wait_fleet(settings, topics, ["team-q"], has(ev.TASK_COMPLETED),
                                     120, "done")
        fleet = await fleet_events(settings, topics)

    output = output_of(fleet["team-q"])
    crashing, failing = research_children(fleet["team-q"])[1:]
    assert output["failed"] == 2
    assert output["failures"] == [f"{crashing}: quarantined", f"{failing}: failed"]
    crashed = fleet[crashing]
    assert len(of_type(crashed, ev.AGENT_QUARANTINED)) == 1  # the death-loop rules decided
    deaths = of_type(crashed, ev.AGENT_DEAD)
    assert len(deaths) == 6  # the first run and 5 resurrections, then no more
    [quarantined] = of_type(crashed, ev.AGENT_QUARANTINED)
    assert not [e for e in crashed if e.type == ev.AGENT_RESURRECTED
                and e.version > quarantined.version]
    assert of_type(fleet[failing], ev.TASK_FAILED)
    assert not of_type(fleet[failing], ev.AGENT_DEAD)  # a failed task is not a death
