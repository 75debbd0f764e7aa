"""Schedules, without a broker: cron ticks, the catch-up decisions, the record's encoding, and
the owner's schedule keeper against a fake partition writer (ticks and their records in one
transaction, a failed transaction retried with no tick lost or doubled, takeover catch-up)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import TopicPartition

from ares.commands.model import Command, InvalidCommandError, ReplyStatus
from ares.commands.policy import IssuerPolicy
from ares.config import Settings
from ares.errors import AresError, FencedError
from ares.events.kafka.routing import partition_for
from ares.runtime_manager.schedules import ScheduleKeeper
from ares.schedules import model as sm
from ares.schedules.model import Cron, Schedule, ScheduleError, decide, plan_after
from ares.tasks import wait_for
from ares.topics import TopicPlan, build_plan, load_topics

T0 = datetime(2026, 3, 2, 8, 59, 30, tzinfo=UTC)  # a Monday


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# -- cron -----------------------------------------------------------------------------------


def test_five_fields_read_in_the_time_zone() -> None:
    cron = Cron.parse("0 9 * * MON-FRI", "Europe/Paris")
    assert cron.next_after(T0) == at("2026-03-03T09:00:00+01:00")  # 09:00 Paris is 08:00Z
    friday = at("2026-03-06T09:00:00+01:00")
    assert cron.next_after(friday) == at("2026-03-09T09:00:00+01:00")  # no weekend


def test_daylight_saving_time_moves_the_utc_time_not_the_local_time() -> None:
    cron = Cron.parse("0 9 * * *", "Europe/Paris")
    before = cron.next_after(at("2026-03-27T12:00:00+00:00"))  # DST starts on the 29th
    after = cron.next_after(before)
    assert (before.hour, after.hour) == (8, 7)  # 09:00 CET, then 09:00 CEST
    # 02:30 does not exist on the spring-forward day: croniter takes the next valid time.
    gap = Cron.parse("30 2 * * *", "Europe/Paris").next_after(at("2026-03-28T12:00:00Z"))
    assert gap == at("2026-03-29T03:00:00+02:00")


def test_six_fields_take_the_seconds_first() -> None:
    cron = Cron.parse("*/5 * * * * *")
    assert cron.next_after(at("2026-01-01T00:00:02.5Z")) == at("2026-01-01T00:00:05Z")
    assert cron.next_after(at("2026-01-01T00:00:05Z")) == at("2026-01-01T00:00:10Z")
    assert cron.latest_at_or_before(at("2026-01-01T00:00:05Z")) == at("2026-01-01T00:00:05Z")
    assert cron.latest_at_or_before(at("2026-01-01T00:00:09.9Z")) == at("2026-01-01T00:00:05Z")


def test_aliases() -> None:
    assert Cron.parse("@daily").next_after(T0) == at("2026-03-03T00:00:00Z")


@pytest.mark.parametrize(("expression", "needle"), [
    ("0 9 * *", "Exactly 5, 6 or 7 columns"),
    ("61 * * * *", "out of range"),
    ("0 9 * * FUNDAY", "is not acceptable"),
    ("", "empty cron expression"),
    ("0 0 30 2 *", "never fires"),
])
def test_a_bad_cron_expression_is_named(expression: str, needle: str) -> None:
    with pytest.raises(ScheduleError) as info:
        Cron.parse(expression)
    assert needle in str(info.value)
    if expression:
        assert repr(expression) in str(info.value)


def test_an_unknown_time_zone_is_named() -> None:
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
        Cron.parse("0 9 * * *", "Mars/Olympus")


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 129, "ä"])
def test_bad_names(name: str) -> None:
    with pytest.raises(ScheduleError, match="invalid schedule name"):
        sm.key_of(name)


def test_keys_and_task_ids() -> None:
    assert sm.key_of("nightly.report-1") == "schedule:nightly.report-1"
    assert sm.name_of("schedule:nightly.report-1") == "nightly.report-1"
    with pytest.raises(ScheduleError, match="not a schedule's"):
        sm.name_of("agent-1")
    tick = at("2026-03-03T09:00:00+01:00")
    assert sm.task_id_for("digest", tick) == "schedule:digest:2026-03-03T08:00:00Z"


# -- decisions ------------------------------------------------------------------------------


def every_5s(**changes: Any) -> Schedule:
    schedule = Schedule.create("tick", "agent-1", "*/5 * * * * *", now=T0)
    return replace(schedule, **changes)


def test_nothing_is_due_before_the_first_tick_after_creation() -> None:
    schedule = every_5s()
    assert decide(schedule, T0) == sm.Decision(wait=at("2026-03-02T08:59:35Z"))


def test_a_planned_tick_fires_at_its_time_even_late() -> None:
    schedule = every_5s()
    planned = at("2026-03-02T08:59:35Z")
    assert decide(schedule, planned - timedelta(milliseconds=1), planned).wait == planned
    late = decide(schedule, planned + timedelta(seconds=3), planned)
    assert (late.fire, late.catchup) == (planned, False)


@pytest.mark.parametrize("catchup", [sm.ONCE, sm.SKIP])
def test_missed_ticks_follow_the_catchup_policy(catchup: str) -> None:
    schedule = every_5s(last_tick=at("2026-03-02T08:59:40Z"), catchup=catchup)
    now = at("2026-03-02T09:00:03Z")  # 08:59:45 .. 09:00:00 missed (four ticks)
    decision = decide(schedule, now)  # a takeover: nothing planned
    assert decision.missed_since == at("2026-03-02T08:59:45Z")
    if catchup == sm.ONCE:
        assert (decision.fire, decision.catchup) == (at("2026-03-02T09:00:00Z"), True)
    else:
        assert (decision.fire, decision.wait) == (None, at("2026-03-02T09:00:05Z"))


def test_a_plan_from_before_the_last_tick_is_ignored() -> None:
    schedule = every_5s(last_tick=at("2026-03-02T08:59:40Z"))
    stale = at("2026-03-02T08:59:40Z")
    assert decide(schedule, at("2026-03-02T08:59:41Z"), stale).wait == at(
        "2026-03-02T08:59:45Z")


def test_paused_fires_nothing_and_resume_does_not_catch_up_the_pause() -> None:
    paused = every_5s(last_tick=at("2026-03-02T08:59:40Z")).paused_at(T0)
    assert decide(paused, at("2026-03-02T09:10:00Z")) == sm.Decision()
    assert paused.next_tick(at("2026-03-02T09:10:00Z")) is None
    resumed = paused.resumed_at(at("2026-03-02T09:10:01Z"))
    assert decide(resumed, at("2026-03-02T09:10:02Z")).wait == at("2026-03-02T09:10:05Z")


def test_the_next_plan_after_a_fire() -> None:
    schedule = every_5s()
    fired = at("2026-03-02T08:59:35Z")
    assert plan_after(schedule, fired, fired + timedelta(seconds=1)) == at(
        "2026-03-02T08:59:40Z")
    # Fell behind by more than a period: the policy decides about what came due.
    assert plan_after(schedule, fired, fired + timedelta(seconds=7)) is None


def test_create_validates_and_canonicalises() -> None:
    schedule = Schedule.create("d", "a", " 0 9 * * * ", input_json='{ "b": 1, "a": [1] }',
                               now=T0)
    assert (schedule.cron, schedule.input_json) == ("0 9 * * *", '{"a":[1],"b":1}')
    with pytest.raises(ScheduleError, match="not JSON"):
        Schedule.create("d", "a", "0 9 * * *", input_json="{", now=T0)
    with pytest.raises(ScheduleError, match="catch-up"):
        Schedule.create("d", "a", "0 9 * * *", catchup="twice", now=T0)
    with pytest.raises(ScheduleError, match="target agent"):
        Schedule.create("d", "", "0 9 * * *", now=T0)


def test_the_record_round_trips() -> None:
    schedule = every_5s(last_tick=at("2026-03-02T08:59:40Z"), ticks=7, fired_by="w-a",
                        paused=True, issuer="ops", timezone="Europe/Paris")
    assert Schedule.decode(schedule.encode()) == schedule
    fresh = every_5s()
    assert Schedule.decode(fresh.encode()) == fresh
    doc = schedule.to_json(T0)
    assert doc["key"] == "schedule:tick"
    assert doc["last_tick"] == "2026-03-02T08:59:40Z"
    assert doc["next_tick"] is None  # paused


# -- the keeper, on a fake partition writer ---------------------------------------------------

PARTITIONS = 4


def topic_plan() -> TopicPlan:
    return load_topics(Settings(), env={"ARES_TOPIC_PARTITIONS": str(PARTITIONS)})


@dataclass
class Sent:
    topic: str
    value: bytes | None
    key: bytes | None
    partition: int | None


@dataclass
class FakeProducer:
    writer: FakeWriter

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   partition: int | None = None) -> None:
        assert self.writer.open is not None, "sent outside a transaction"
        self.writer.open.append(Sent(topic, value, key, partition))


@dataclass
class FakeTx:
    writer: FakeWriter

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> None:
        assert isinstance(value, bytes)
        await self.writer.producer.send(topic, value, key, partition)

    async def append(self, stream_id: str, events: Any, expected_version: int) -> int:
        raise AssertionError("schedules append no event")

    async def commit_offsets(self, offsets: Any, group_id: str) -> None:
        return None


@dataclass
class FakeWriter:
    """Runs each work item in a transaction of its own; ``fail`` aborts the next ones."""

    partition: int
    committed: list[list[Sent]] = field(default_factory=list)
    aborted: list[list[Sent]] = field(default_factory=list)
    open: list[Sent] | None = None
    fail: list[BaseException] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def producer(self) -> FakeProducer:
        return FakeProducer(self)

    async def submit(self, work: Callable[[FakeTx], Awaitable[Any]]) -> Any:
        async with self.lock:
            self.open = []
            try:
                result = await work(FakeTx(self))
                if self.fail:
                    raise self.fail.pop(0)
            except BaseException:
                self.aborted.append(self.open)
                raise
            finally:
                records, self.open = self.open, None
            self.committed.append(records)
            return result

    def records(self, topic: str) -> list[Sent]:
        return [r for tx in self.committed for r in tx if r.topic == topic]


def ticks_of(writer: FakeWriter, keeper: ScheduleKeeper) -> list[Command]:
    return [Command.decode(r.value) for r in writer.records(keeper.commands_topic)
            if r.value is not None]


def schedule_partition(name: str) -> int:
    return partition_for(sm.key_of(name), PARTITIONS)


@dataclass
class FakeScanner:
    records: list[tuple[bytes, bytes | None]]

    async def partitions(self, topic: str) -> int:
        return PARTITIONS

    async def high_watermark(self, tp: TopicPartition) -> int:
        return len(self.records)

    async def wait_until_stable(self, tp: TopicPartition, offset: int,
                                timeout_s: float = 10.0) -> None:
        return None

    async def scan_records(self, tp: TopicPartition) -> AsyncIterator[Any]:
        for offset, (key, value) in enumerate(self.records):
            yield type("Record", (), {"key": key, "value": value, "offset": offset})()


def command(command_type: str, name: str, **payload: object) -> Command:
    return Command(command_type, sm.key_of(name), payload, issuer="tests")


async def keeper_with(name: str, records: list[tuple[bytes, bytes | None]] | None = None,
                      issuers: IssuerPolicy | None = None
                      ) -> tuple[ScheduleKeeper, FakeWriter]:
    keeper = ScheduleKeeper(topic_plan(), "w-test", issuers)
    writer = FakeWriter(schedule_partition(name))
    await keeper.take_over(writer.partition, writer, FakeScanner(records or []))  # type: ignore[arg-type]
    return keeper, writer


async def create(keeper: ScheduleKeeper, writer: FakeWriter, name: str,
                 cron: str = "* * * * * *", **extra: object) -> Any:
    cmd = command(sm.CREATE, name, agent_id="agent-1", cron=cron, input_json='{"n":1}',
                  **extra)
    return await writer.submit(lambda tx: keeper.handle(tx, cmd))


async def wait_until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_tick_is_one_transaction_with_its_record_and_its_task() -> None:
    keeper, writer = await keeper_with("every-second")
    try:
        reply = await create(keeper, writer, "every-second")
        assert reply.status is ReplyStatus.OK
        assert reply.message.startswith("created")
        await wait_until(lambda: len(ticks_of(writer, keeper)) >= 2)
    finally:
        await keeper.close()
    [created] = writer.committed[0]
    assert created.topic == keeper.topic
    assert created.key == b"schedule:every-second"
    tick_txs = writer.committed[1:]
    for tx in tick_txs:
        record, assign = tx  # exactly the schedule's record and the tick's command
        schedule = Schedule.decode(record.value or b"")
        cmd = Command.decode(assign.value or b"")
        assert record.partition == writer.partition
        assert assign.key == b"agent-1"
        assert assign.partition == partition_for("agent-1",
                                                                               PARTITIONS)
        assert schedule.last_tick is not None
        assert schedule.fired_by == "w-test"
        assert cmd.type == "task.assign"
        assert cmd.issuer == "tests"
        assert cmd.payload == {"task_id": sm.task_id_for("every-second", schedule.last_tick),
                               "input_json": '{"n":1}'}
        assert cmd.metadata[sm.META_TICK] == sm.tick_text(schedule.last_tick)
        assert cmd.metadata[sm.META_CATCHUP] == "false"
    tick_times = [Schedule.decode(tx[0].value or b"").last_tick for tx in tick_txs]
    assert all(b - a == timedelta(seconds=1)  # type: ignore[operator]
               for a, b in itertools.pairwise(tick_times))


async def test_a_failed_tick_transaction_is_retried_without_gap_or_double() -> None:
    keeper, writer = await keeper_with("retried")
    try:
        await create(keeper, writer, "retried")
        writer.fail.append(AresError("broker away"))
        await wait_until(lambda: len(ticks_of(writer, keeper)) >= 3 and bool(writer.aborted))
        [schedule] = keeper.schedules()
    finally:
        await keeper.close()
    ticks = [c.metadata[sm.META_TICK] for c in ticks_of(writer, keeper)]
    assert len(set(ticks)) == len(ticks)
    seconds = [at(t.replace("Z", "+00:00")) for t in ticks]
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(seconds))
    aborted = [Command.decode(r.value or b"").metadata[sm.META_TICK]
               for tx in writer.aborted for r in tx if r.topic == keeper.commands_topic]
    assert aborted
    assert aborted[0] == ticks[0]
    assert schedule.ticks >= len(ticks)  # (more may have committed since the copy)


async def test_a_fenced_writer_stops_the_ticker() -> None:
    keeper, writer = await keeper_with("fenced")
    try:
        await create(keeper, writer, "fenced")
        writer.fail.append(FencedError("fenced"))
        await wait_until(lambda: bool(writer.aborted))
        task = keeper.partitions[writer.partition].task
        assert task is not None
        await wait_for(task, 2)
        assert ticks_of(writer, keeper) == []
    finally:
        await keeper.close()


@pytest.mark.parametrize("catchup", [sm.ONCE, sm.SKIP])
async def test_takeover_catches_up_per_policy(catchup: str) -> None:
    now = datetime.now(UTC)
    old = Schedule.create("resumed", "agent-1", "* * * * * *", catchup=catchup,
                          now=now - timedelta(seconds=30))
    old = old.fired(now.replace(microsecond=0) - timedelta(seconds=10), "w-dead", now)
    keeper, writer = await keeper_with("resumed", [(old.key.encode(), old.encode())])
    try:
        await wait_until(lambda: len(ticks_of(writer, keeper)) >= 2)
    finally:
        await keeper.close()
    first, second = ticks_of(writer, keeper)[:2]
    if catchup == sm.ONCE:  # one tick for the nine missed, the latest, marked as such
        assert first.metadata[sm.META_CATCHUP] == "true"
        assert at(first.metadata[sm.META_TICK].replace("Z", "+00:00")) >= now.replace(
            microsecond=0) - timedelta(seconds=1)
    else:  # none: the next tick after the takeover, on time
        assert first.metadata[sm.META_CATCHUP] == "false"
        assert at(first.metadata[sm.META_TICK].replace("Z", "+00:00")) > now
    assert second.metadata[sm.META_CATCHUP] == "false"


async def test_deleted_and_unreadable_records_are_not_loaded() -> None:
    one = Schedule.create("gone", "agent-1", "0 9 * * *", now=T0)
    broken = Schedule.create("broken", "agent-1", "0 9 * * *", now=T0)
    keeper, _ = await keeper_with("gone", [
        (one.key.encode(), one.encode()), (one.key.encode(), None),  # deleted
        (broken.key.encode(), broken.encode()), (broken.key.encode(), b"\xc3\x01garbage"),
        (b"schedule:later", Schedule.create("later", "a", "0 9 * * *", now=T0).encode()),
    ])
    try:
        # The unreadable latest record of "broken" is never replaced by its older one.
        assert [s.name for s in keeper.schedules()] == ["later"]
    finally:
        await keeper.close()


async def test_pause_resume_delete() -> None:
    keeper, writer = await keeper_with("life")
    try:
        await create(keeper, writer, "life", cron="0 9 * * *")
        again = await create(keeper, writer, "life", cron="0 9 * * *")
        assert (again.status, again.message) == (ReplyStatus.OK, "already exists")
        other = await create(keeper, writer, "life", cron="0 10 * * *")
        assert other.status is ReplyStatus.REJECTED
        assert "another definition" in other.message
        for kind, message in [(sm.PAUSE, "paused"), (sm.PAUSE, "already paused"),
                              (sm.RESUME, "resumed"), (sm.RESUME, "not paused"),
                              (sm.DELETE, "deleted")]:
            cmd = command(kind, "life")
            reply = await writer.submit(lambda tx, cmd=cmd: keeper.handle(tx, cmd))
            assert (reply.status, reply.message.split(";")[0]) == (ReplyStatus.OK, message)
        gone = command(sm.PAUSE, "life")
        reply = await writer.submit(lambda tx: keeper.handle(tx, gone))
        assert reply.status is ReplyStatus.REJECTED
        assert "no schedule 'life'" in reply.message
    finally:
        await keeper.close()
    last = writer.records(keeper.topic)[-1]
    assert (last.key, last.value) == (b"schedule:life", None)  # the delete: a tombstone


async def test_a_redone_command_is_answered_alike_and_written_again() -> None:
    keeper, writer = await keeper_with("redo")
    try:
        cmd = command(sm.CREATE, "redo", agent_id="agent-1", cron="0 9 * * *")
        writer.fail.append(AresError("commit failed"))
        with pytest.raises(AresError):
            await writer.submit(lambda tx: keeper.handle(tx, cmd))
        first = writer.aborted[-1]
        reply = await writer.submit(lambda tx: keeper.handle(tx, cmd))  # the owner redoes it
        assert reply.message.startswith("created")
        assert writer.committed[-1][0].value == first[0].value
        delete = command(sm.DELETE, "redo")
        writer.fail.append(AresError("commit failed"))
        with pytest.raises(AresError):
            await writer.submit(lambda tx: keeper.handle(tx, delete))
        reply = await writer.submit(lambda tx: keeper.handle(tx, delete))
        assert (reply.status, reply.message) == (ReplyStatus.OK, "deleted")
        assert writer.committed[-1] == [Sent(keeper.topic, None, b"schedule:redo",
                                             writer.partition)]
    finally:
        await keeper.close()


@pytest.mark.parametrize(("payload", "stream", "reason", "needle"), [
    ({"agent_id": "a", "cron": "0 9 * *"}, "schedule:x", "invalid_schedule",
     "invalid cron expression"),
    ({"agent_id": "a", "cron": "0 9 * * *", "timezone": "Nowhere"}, "schedule:x",
     "invalid_schedule", "unknown time zone"),
    ({"agent_id": "a", "cron": "0 9 * * *", "input_json": "{"}, "schedule:x",
     "invalid_schedule", "not JSON"),
    ({"agent_id": "a", "cron": "0 9 * * *"}, "x", "invalid_schedule", "not a schedule's"),
    ({"agent_id": "secret-agent", "cron": "0 9 * * *"}, "schedule:x", "unauthorised_issuer",
     "may not send task.assign"),
])
async def test_invalid_creates_are_refused_with_a_reason(payload: dict[str, object],
                                                         stream: str, reason: str,
                                                         needle: str) -> None:
    keeper, writer = await keeper_with("x", issuers=IssuerPolicy.parse("tests=a:*"))
    try:
        cmd = Command(sm.CREATE, stream, payload, issuer="tests")
        with pytest.raises(InvalidCommandError) as info:
            await writer.submit(lambda tx: keeper.handle(tx, cmd))
        assert info.value.reason == reason
        assert needle in str(info.value)
        assert keeper.schedules() == []
    finally:
        await keeper.close()


def test_the_topic_is_copartitioned() -> None:
    plan = build_plan({"version": 1, "partitions": 3, "replication_factor": 1,
                       "topics": {name: {"copartitioned": True} for name in [
                           "ares.events", "ares.snapshots", "ares.commands",
                           "ares.heartbeats", "ares.summaries", "ares.schedules"]}
                       | {"ares.alerts": {}, "ares.dlq": {}, "ares.replies": {}}})
    assert plan.topic("ares.schedules").partitions == 3
    assert topic_plan().topic("ares.schedules").configs["cleanup.policy"] == "compact"
