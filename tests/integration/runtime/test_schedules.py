"""Schedules on the real broker, with real `ares run runtime-manager` processes and the real
CLI: create, list, pause, resume, delete; invalid input refused with its reason (CLI exit
codes, dead letters) while the owner keeps serving; and a schedule ticking every 5 s across
two runtime managers, one SIGKILLed and later restarted: the tick log (the task.assigned
events of the target agent) has no duplicate and no gap beyond the catch-up policy, and the
ticks really moved to the other owner. Order and counts only: how soon a takeover fires the
catch-up is bench/takeover.py's figure.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import signal
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from ares.client import Client
from ares.commands.model import Command
from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.events.model import Event
from ares.schedules import model as sm
from ares.topics import COMMANDS, DLQ, TopicPlan
from tests.support.kafka import admin_client, applied_topics, drain_records
from tests.support.processes import ares, ares_env, service
from tests.support.runtime import read_stream, wait_for_events
from tests.support.workers import (
    Worker,
    runtime_group,
    start_worker,
    stop_worker,
    wait_group,
    workers,
)

log = logging.getLogger(__name__)

PARTITIONS = 2
PERIOD = timedelta(seconds=5)
EVERY_5S = "*/5 * * * * *"
TASK_INPUT = '{"steps": 1, "step_ms": 1, "email": false}'
WAIT_S = 90.0
# Two periods: the SIGKILLed owner's partition moves only once its session expired, so ticks
# are necessarily missed meanwhile and the catch-up policy is exercised.
SESSION_TIMEOUT_MS = 10_000
WORKERS = ("sw-a", "sw-b")


# -- helpers ------------------------------------------------------------------------------


def _ok(*args: str, env: dict[str, str]) -> str:
    done = ares(*args, env=env)
    assert done.returncode == 0, f"ares {' '.join(args)} -> {done.returncode}: {done.stderr}"
    return done.stdout


def _listed(env: dict[str, str]) -> dict[str, dict[str, object]]:
    lines = _ok("schedules", "list", "--json", env=env).splitlines()
    return {str(doc["name"]): doc for doc in map(json.loads, lines)}


def _tick_of(task_id: str, name: str) -> datetime:
    return _tick(task_id.removeprefix(f"schedule:{name}:"))


def _tick(text: str) -> datetime:
    """A tick as the schedules print it (``ares.schedules.model.tick_text``)."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _ticks(events: Sequence[Event], name: str) -> list[str]:
    """The task ids of the tasks the schedule assigned, in log order."""
    return [str(e.payload["task_id"]) for e in events if e.type == "task.assigned"
            and str(e.payload["task_id"]).startswith(f"schedule:{name}:")]


async def _tick_commands(settings: Settings, plan: TopicPlan, name: str) -> list[Command]:
    """The task.assign commands the schedule's owners committed (read_committed)."""
    records = await drain_records(settings.kafka_bootstrap, plan.name(COMMANDS),
                                  partitions=plan.topic(COMMANDS).partitions)
    found = []
    for record in records:
        try:
            command = Command.decode(record.value)
        except SchemaError:
            continue
        if command.type == "task.assign" and command.metadata.get(sm.META_SCHEDULE) == name:
            found.append(command)
    return found


async def _wait_commands(settings: Settings, plan: TopicPlan, name: str,
                         done: Callable[[list[Command]], bool], what: str,
                         timeout_s: float = WAIT_S) -> list[Command]:
    deadline = time.monotonic() + timeout_s
    commands: list[Command] = []
    while time.monotonic() < deadline:
        commands = await _tick_commands(settings, plan, name)
        if done(commands):
            return commands
        await asyncio.sleep(0.5)
    raise AssertionError(f"schedule {name}: not {what} after {timeout_s}s: "
                         f"{[_describe(c) for c in commands][-10:]}")


def _describe(command: Command) -> str:
    meta = command.metadata
    return f"{meta[sm.META_TICK]} by {meta[sm.META_WORKER]} catchup={meta[sm.META_CATCHUP]}"


def _worker(command: Command) -> str:
    return command.metadata[sm.META_WORKER]


async def _owner_of(settings: Settings, plan: TopicPlan, partition: int) -> str | None:
    """The client id (the worker id) of the group member assigned ``partition``."""
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

    topic = plan.name(COMMANDS)
    async with admin_client(settings.kafka_bootstrap) as admin:
        response = await admin.describe_consumer_groups([runtime_group(settings)])
    group = response[0].to_object()["groups"][0]
    if group["state"] != "Stable":
        return None
    for member in group["members"]:
        if member["member_assignment"]:
            assignment = ConsumerProtocolMemberAssignment.decode(member["member_assignment"])
            if any(t == topic and partition in ps for t, ps in assignment.assignment):
                return str(member["client_id"])
    return None


# -- one runtime manager: the CLI, invalid input ------------------------------------------


@pytest.fixture(scope="module")
def cli_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap,
                    topic_prefix=f"sched-{uuid.uuid4().hex[:8]}.")


@pytest.fixture(scope="module")
async def cli_plan(cli_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(cli_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture(scope="module")
def env(cli_settings: Settings, cli_plan: TopicPlan) -> dict[str, str]:
    return ares_env(cli_settings, PARTITIONS, ARES_REQUEST_TIMEOUT_S="20")


@pytest.fixture(scope="module")
def owner(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    logs = tmp_path_factory.mktemp("logs")
    with service("runtime-manager", env, logs) as proc:
        _wait_until_serving(env, proc)
        yield logs
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "graceful stop must exit 0"


def _wait_until_serving(env: dict[str, str], proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    done = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the runtime manager exited with {proc.returncode}"
        done = ares("agents", "start", "sched-target", "--kind", "example.pipeline",
                    "--timeout", "3", env=env)
        if done.returncode == 0:
            return
    raise AssertionError(f"the runtime manager never answered: {done and done.stderr}")


async def test_create_list_pause_resume_delete(owner: Path, env: dict[str, str],
                                              cli_settings: Settings,
                                              cli_plan: TopicPlan) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    create = ("schedules", "create", name, "--agent", "sched-target", "--cron", EVERY_5S,
              "--input", TASK_INPUT)
    out = _ok(*create, env=env)
    assert out.startswith(f"{name}: created; next tick ")
    assert _ok(*create, env=env).startswith(f"{name}: already exists")
    other = ares("schedules", "create", name, "--agent", "sched-target", "--cron",
                 "0 9 * * *", env=env)
    assert other.returncode == 1, other.stderr
    assert "another definition" in other.stderr

    listed = _listed(env)[name]
    assert (listed["agent_id"], listed["cron"], listed["catchup"], listed["paused"]) == (
        "sched-target", EVERY_5S, "once", False)
    assert listed["input"] == json.loads(TASK_INPUT)
    assert listed["next_tick"] is not None
    assert name in _ok("schedules", "list", env=env)

    events = await wait_for_events(cli_settings, cli_plan, "sched-target",
                                   lambda es: len(_ticks(es, name)) >= 1, timeout_s=WAIT_S)
    first = _tick_of(_ticks(events, name)[0], name)
    assert first.second % 5 == 0
    task_id = _ticks(events, name)[0]
    await wait_for_events(cli_settings, cli_plan, "sched-target",
                          lambda es: any(e.type == "task.completed"
                                         and e.payload["task_id"] == task_id for e in es),
                          timeout_s=WAIT_S)

    assert _ok("schedules", "pause", name, env=env).strip() == f"{name}: paused"
    paused_at = datetime.now(UTC)
    assert _ok("schedules", "pause", name, env=env).strip() == f"{name}: already paused"
    assert _listed(env)[name]["paused"] is True
    table = _ok("schedules", "list", env=env)
    assert "paused" in next(line for line in table.splitlines() if line.startswith(name))
    await asyncio.sleep(PERIOD.total_seconds() + 1)
    during = _ticks(await read_stream(cli_settings, cli_plan, "sched-target"), name)
    assert all(_tick_of(t, name) <= paused_at for t in during), during

    resumed = _ok("schedules", "resume", name, env=env).strip()
    assert resumed.startswith(f"{name}: resumed; next tick ")
    # The owner's next tick from the moment it applied the resume: a clock read here, after
    # the CLI returned, can be later than a tick that rightly fired after the resume.
    next_tick = _tick(resumed.rsplit(" ", 1)[1])
    events = await wait_for_events(
        cli_settings, cli_plan, "sched-target",
        lambda es: any(_tick_of(t, name) >= next_tick for t in _ticks(es, name)),
        timeout_s=WAIT_S)
    ticks = [_tick_of(t, name) for t in _ticks(events, name)]
    assert not [t for t in ticks if paused_at < t < next_tick]  # no catch-up of a pause
    assert len(ticks) == len(set(ticks))

    assert _ok("schedules", "delete", name, env=env).strip() == f"{name}: deleted"
    deleted_at = datetime.now(UTC)
    assert name not in _listed(env)
    again = ares("schedules", "delete", name, env=env)
    assert again.returncode == 1, again.stderr
    assert f"no schedule '{name}'" in again.stderr
    unknown = ares("schedules", "pause", name, env=env)
    assert unknown.returncode == 1
    assert "no schedule" in unknown.stderr
    await asyncio.sleep(PERIOD.total_seconds() + 1)
    after = _ticks(await read_stream(cli_settings, cli_plan, "sched-target"), name)
    assert all(_tick_of(t, name) <= deleted_at for t in after), after


@pytest.mark.parametrize(("args", "code", "needles"), [
    (("--cron", "0 9 * *"), 2, ["--cron", "'0 9 * *'", "5 fields"]),
    (("--cron", "99 * * * *"), 2, ["--cron", "'99 * * * *'"]),
    (("--cron", "0 9 * * *", "--timezone", "Mars/Olympus"), 2, ["--timezone", "Mars/Olympus"]),
    (("--cron", "0 9 * * *", "--input", "{nope"), 2, ["--input", "not valid JSON"]),
    (("--cron", "0 9 * * *", "--catchup", "twice"), 2, ["--catchup"]),
])
def test_bad_flags_are_usage_errors_naming_them(env: dict[str, str], args: tuple[str, ...],
                                                code: int, needles: list[str]) -> None:
    done = ares("schedules", "create", "bad", "--agent", "sched-target", *args, env=env)
    assert done.returncode == code, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def test_bad_names_and_unknown_agents(owner: Path, env: dict[str, str]) -> None:
    bad = ares("schedules", "create", "no spaces", "--agent", "sched-target", "--cron",
               "0 9 * * *", env=env)
    assert bad.returncode == 2, bad.stderr
    assert "invalid schedule name" in bad.stderr
    assert ares("schedules", "pause", "-x", env=env).returncode == 2
    nobody = ares("schedules", "create", "for-nobody", "--agent", "nobody-here", "--cron",
                  "0 9 * * *", env=env)
    assert nobody.returncode == 1, nobody.stderr
    assert "no agent 'nobody-here'" in nobody.stderr
    assert "for-nobody" not in _listed(env)


async def test_malformed_commands_are_dead_lettered_and_the_owner_keeps_serving(
    owner: Path, env: dict[str, str], cli_settings: Settings, cli_plan: TopicPlan
) -> None:
    bad_cron = Command(sm.CREATE, "schedule:raw-bad", {"agent_id": "sched-target",
                                                       "cron": "every day at nine"},
                       issuer="raw-producer")
    no_prefix = Command(sm.CREATE, "raw-no-prefix", {"agent_id": "sched-target",
                                                     "cron": "0 9 * * *"},
                        issuer="raw-producer")
    inputs = {
        b"schedule:raw-bad": (bad_cron.encode(), "invalid_schedule", "every day at nine"),
        b"raw-no-prefix": (no_prefix.encode(), "invalid_schedule", "is not a schedule's"),
        b"schedule:raw-garbage": (b"\x00not avro at all", "bad_magic", ""),
    }
    producer = AIOKafkaProducer(bootstrap_servers=cli_settings.kafka_bootstrap)
    await producer.start()
    try:
        for key, (value, _, _) in inputs.items():
            await producer.send_and_wait(cli_plan.name(COMMANDS), value, key=key)
    finally:
        await producer.stop()
    letters: dict[bytes, DeadLetter] = {}
    deadline = time.monotonic() + WAIT_S
    while set(letters) != set(inputs) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        letters = {r.key: DeadLetter.from_record(r.key, r.value, r.headers)
                   for r in await drain_records(cli_settings.kafka_bootstrap,
                                                cli_plan.name(DLQ),
                                                partitions=cli_plan.topic(DLQ).partitions)
                   if r.key in inputs}
    assert set(letters) == set(inputs)
    # The owner keeps serving: a valid schedule after them is created.
    async with Client(cli_settings, cli_plan, issuer="tests") as client:
        reply = await client.command(sm.CREATE, "schedule:raw-good", agent_id="sched-target",
                                     cron="0 9 * * *")
        assert reply.message.startswith("created")
    for key, (value, reason, needle) in inputs.items():
        letter = letters[key]
        assert letter.value == value  # the original bytes, whole
        assert letter.reason == reason, letter
        assert needle in letter.detail
        assert letter.source_topic == cli_plan.name(COMMANDS)
    names = _listed(env)
    assert "raw-good" in names
    assert "raw-bad" not in names
    assert "raw-garbage" not in names
    _ok("schedules", "delete", "raw-good", env=env)


# -- two runtime managers: the acceptance ---------------------------------------------------


@pytest.fixture
async def failover_plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"schfo-{uuid.uuid4().hex[:8]}.", request_timeout_s=30.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


async def test_a_schedule_ticks_once_across_a_sigkill_and_a_restart(
    failover_plan: tuple[Settings, TopicPlan], tmp_path: Path
) -> None:
    settings, plan = failover_plan
    name, agent = "every-5s", "tick-target"
    partition = partition_for(sm.key_of(name), plan.partitions)
    environment = ares_env(settings, PARTITIONS, ARES_REQUEST_TIMEOUT_S="20")
    restarted: Worker | None = None
    with workers(settings, PARTITIONS, tmp_path / "logs", WORKERS,
                 session_timeout_ms=SESSION_TIMEOUT_MS) as procs:
        try:
            await wait_group(settings, plan, members=2)
            async with Client(settings, plan, issuer="test-schedules") as client:
                await client.start_agent(agent, "example.pipeline")
            _ok("schedules", "create", name, "--agent", agent, "--cron", EVERY_5S,
                "--input", TASK_INPUT, env=environment)
            victim = await _owner_of(settings, plan, partition)
            assert victim in WORKERS, victim
            [survivor] = [w for w in WORKERS if w != victim]

            # The owner of the schedule's partition fires it.
            fired = await _wait_commands(settings, plan, name,
                                         lambda cs: sum(_worker(c) == victim for c in cs) >= 2,
                                         f"fired twice by {victim}")
            # Killed a second after a tick: the next one falls inside the outage.
            latest = max(_tick_of(c.payload["task_id"], name) for c in fired)
            await asyncio.sleep(max(0.0, (latest + timedelta(seconds=1)
                                          - datetime.now(UTC)).total_seconds()))
            assert procs[victim].proc.poll() is None, "the victim was alive before the kill"
            assert await _owner_of(settings, plan, partition) == victim
            killed_at = datetime.fromtimestamp(procs[victim].kill(), UTC)

            # Its partition moves: the survivor takes the schedule over and fires it.
            await _wait_commands(
                settings, plan, name,
                lambda cs: sum(_worker(c) == survivor and c.timestamp > killed_at
                               for c in cs) >= 3, f"fired three times by {survivor}")
            assert await _owner_of(settings, plan, partition) == survivor

            # The victim comes back; the group rebalances (the partition may move back).
            restarted_at = datetime.now(UTC)
            restarted = start_worker(environment, tmp_path / "logs", victim,
                                     session_timeout_ms=SESSION_TIMEOUT_MS)
            await wait_group(settings, plan, members=2)
            settled_at = datetime.now(UTC)
            await _wait_commands(settings, plan, name,
                                 lambda cs: sum(c.timestamp > settled_at for c in cs) >= 3,
                                 "firing after the restart")
            last_owner = await _owner_of(settings, plan, partition)
            _ok("schedules", "delete", name, "--timeout", "30", env=environment)
        finally:
            if restarted is not None:
                stop_worker(restarted)

    await _assert_tick_log(settings, plan, name, agent, victim=victim, survivor=survivor,
                           killed_at=killed_at, restarted_at=restarted_at,
                           last_owner=last_owner)


async def _assert_tick_log(settings: Settings, plan: TopicPlan, name: str, agent: str, *,
                           victim: str, survivor: str, killed_at: datetime,
                           restarted_at: datetime, last_owner: str | None) -> None:
    commands = await _tick_commands(settings, plan, name)
    fired = {c.metadata[sm.META_TICK]: c for c in commands}
    # Every committed tick reached the agent (its owner may have been a moment behind).
    events = await wait_for_events(settings, plan, agent,
                                   lambda es: set(fired) <= {sm.tick_text(_tick_of(t, name))
                                                             for t in _ticks(es, name)},
                                   timeout_s=WAIT_S)
    task_ids = _ticks(events, name)
    ticks = sorted(_tick_of(t, name) for t in task_ids)
    log.warning("schedule %s: %d ticks from %s to %s; killed %s at %s, restarted at %s; "
                "owner at the end %s; fired by %s", name, len(ticks), ticks[0], ticks[-1],
                victim, killed_at, restarted_at, last_owner,
                sorted({_describe(c) for c in commands}))

    # No duplicate: one task per tick, one committed command per tick.
    assert len(task_ids) == len(set(task_ids)), task_ids
    per_tick: dict[str, int] = defaultdict(int)
    for command in commands:
        per_tick[command.metadata[sm.META_TICK]] += 1
    assert {t: n for t, n in per_tick.items() if n != 1} == {}
    assert {sm.tick_text(t) for t in ticks} == set(fired)
    assert all(t.second % 5 == 0 and t.microsecond == 0 for t in ticks)

    # No gap beyond the catch-up policy (once): ticks follow each other every 5 s, except
    # across an outage (the kill, the restart's rebalance), closed by one catch-up tick for
    # the latest missed time, fired by the owner that took over.
    outages = (killed_at, restarted_at)
    gaps = 0
    for before, after in itertools.pairwise(ticks):
        if after - before == PERIOD:
            continue
        gaps += 1
        closing = fired[sm.tick_text(after)]
        assert closing.metadata[sm.META_CATCHUP] == "true", (before, after, _describe(closing))
        assert after <= closing.timestamp, _describe(closing)  # never before it was due
        missed = [before + PERIOD * i for i in range(1, (after - before) // PERIOD)]
        for tick in missed:
            assert any(start - PERIOD < tick <= closing.timestamp for start in outages), (
                f"tick {tick} missed outside an outage (kill {killed_at}, restart "
                f"{restarted_at})")
    assert gaps <= len(outages)

    # The work moved: the survivor fired ticks after the kill, the victim none between its
    # death and its restart.
    after_kill = [c for c in commands if c.timestamp > killed_at]
    assert any(_worker(c) == survivor for c in after_kill)
    assert not [c for c in after_kill if _worker(c) == victim and c.timestamp < restarted_at]
    assert any(_worker(c) == victim and c.timestamp < killed_at for c in commands)
    # Its session outlived a period: ticks were missed while no owner ran, and the takeover
    # fired one for them (catch-up once).
    first_after = min(after_kill, key=lambda c: c.timestamp)
    assert _worker(first_after) == survivor
    assert first_after.metadata[sm.META_CATCHUP] == "true", _describe(first_after)
