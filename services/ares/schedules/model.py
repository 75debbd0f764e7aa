"""A schedule: a task assigned to an agent on every tick of a cron expression. Pure: no I/O.

A schedule lives under the key ``schedule:<name>`` (its commands' stream id and its record's
key on ``ares.schedules``), so it belongs to the owner of that key's partition, like an
agent. Ticks are the times the cron expression names, read in the schedule's time zone
(croniter does the calendar: ranges, steps, names, ``L``, DST gaps and overlaps); each tick
assigns one task whose id is derived from the name and the tick's time, so a tick sent twice
is one task ("task already assigned").

When ticks fire (``decide``): a tick the owner planned while it ran fires at its time, late
or not. Ticks that came due while nothing had planned them — no owner ran, the partition was
moving, the owner could not write for more than a period — are *missed*, and the
schedule's ``catchup`` decides: ``once`` fires one tick, for the latest missed time;
``skip`` fires none and waits for the next tick. A paused schedule fires nothing, and its
resume does not catch up the ticks of the pause.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from ares.errors import SchemaError
from ares.events.wire.canonical import canonical_json
from ares.events.wire.codec import decode, encode
from ares.events.wire.schemas import SCHEDULE

KEY_PREFIX: Final = "schedule:"
ONCE: Final = "once"
SKIP: Final = "skip"
CATCHUPS: Final = (ONCE, SKIP)
DEFAULT_TIMEZONE: Final = "UTC"
# Command types of the schedules (payload records in ares.v1.Command).
CREATE: Final = "schedule.create"
PAUSE: Final = "schedule.pause"
RESUME: Final = "schedule.resume"
DELETE: Final = "schedule.delete"
COMMAND_TYPES: Final = frozenset({CREATE, PAUSE, RESUME, DELETE})
# Metadata of the task.assign command a tick sends.
META_SCHEDULE: Final = "ares.schedule"
META_TICK: Final = "ares.schedule.tick"
META_WORKER: Final = "ares.schedule.worker"
META_CATCHUP: Final = "ares.schedule.catchup"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ScheduleError(ValueError):
    """A schedule that cannot be: a bad name, cron expression, time zone or input."""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ScheduleError(f"invalid schedule name {name!r}: 1 to 128 letters, digits, "
                            "'.', '_' or '-', starting with a letter or digit")
    return name


def key_of(name: str) -> str:
    """The schedule's key: its commands' stream id and its record's key."""
    return KEY_PREFIX + check_name(name)


def name_of(key: str) -> str:
    """The name of the schedule keyed ``key``."""
    if not key.startswith(KEY_PREFIX):
        raise ScheduleError(f"stream id {key!r} is not a schedule's: a schedule command is "
                            f"keyed {KEY_PREFIX}<name>")
    return check_name(key.removeprefix(KEY_PREFIX))


def check_catchup(catchup: str) -> str:
    if catchup not in CATCHUPS:
        raise ScheduleError(f"invalid catch-up policy {catchup!r}: once or skip")
    return catchup


def zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"unknown time zone {timezone!r} (an IANA name such as UTC or "
                            f"Europe/Paris): {exc}") from None


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression read in a time zone: the ticks it names, as UTC datetimes.

    Five fields (minute hour day-of-month month day-of-week), or six with the seconds
    first (``*/5 * * * * *``: every 5 seconds), or croniter's aliases (``@daily``...).
    """

    expression: str
    timezone: str

    @classmethod
    def parse(cls, expression: str, timezone: str = DEFAULT_TIMEZONE) -> Cron:
        """The cron, or a ``ScheduleError`` naming what is wrong with it."""
        return _parsed(expression.strip(), timezone)

    def next_after(self, when: datetime) -> datetime:
        """The first tick strictly after ``when``."""
        return _tick(self.expression, self.timezone, when, forward=True)

    def latest_at_or_before(self, when: datetime) -> datetime:
        """The last tick at or before ``when``."""
        return _tick(self.expression, self.timezone, when + timedelta(microseconds=1),
                     forward=False)


@lru_cache(maxsize=4096)
def _parsed(expression: str, timezone: str) -> Cron:
    zone(timezone)
    if not expression:
        raise ScheduleError("empty cron expression")
    try:
        croniter(expression, datetime(2000, 1, 1, tzinfo=UTC), second_at_beginning=True)
    except (CroniterError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ScheduleError(f"invalid cron expression {expression!r}: {exc} (5 fields: "
                            "minute hour day-of-month month day-of-week, e.g. "
                            "'0 9 * * MON-FRI'; or 6 with seconds first, e.g. "
                            "'*/5 * * * * *')") from None
    cron = Cron(expression, timezone)
    try:
        cron.next_after(datetime.now(UTC))
    except ScheduleError as exc:
        raise ScheduleError(f"cron expression {expression!r} never fires: {exc}") from None
    return cron


def _tick(expression: str, timezone: str, when: datetime, *, forward: bool) -> datetime:
    start = _aware(when).astimezone(zone(timezone))
    try:
        it = croniter(expression, start, second_at_beginning=True)
        found = it.get_next(datetime) if forward else it.get_prev(datetime)
    except CroniterBadDateError as exc:
        raise ScheduleError(str(exc)) from None
    if not isinstance(found, datetime):
        raise ScheduleError(f"croniter returned {found!r}, not a datetime")
    return found.astimezone(UTC)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def task_id_for(name: str, tick: datetime) -> str:
    """The id of the task a tick assigns: the same for every owner that fires it."""
    return f"{KEY_PREFIX}{name}:{tick.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def tick_text(tick: datetime) -> str:
    return f"{tick.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as its record on ``ares.schedules`` holds it."""

    name: str
    agent_id: str
    cron: str
    created_at: datetime
    since: datetime  # ticks strictly after it are due: its creation or its last resume
    updated_at: datetime
    timezone: str = DEFAULT_TIMEZONE
    input_json: str = "null"
    catchup: str = ONCE
    paused: bool = False
    issuer: str = ""
    last_tick: datetime | None = None
    ticks: int = 0
    fired_by: str | None = None

    @property
    def key(self) -> str:
        return KEY_PREFIX + self.name

    @property
    def schedule(self) -> Cron:
        return Cron.parse(self.cron, self.timezone)

    @property
    def definition(self) -> tuple[str, str, str, str, str]:
        """What the user asked for; two creates of the same definition are one."""
        return (self.agent_id, self.cron, self.timezone, self.input_json, self.catchup)

    @property
    def base(self) -> datetime:
        """Ticks strictly after this time may fire."""
        return self.since if self.last_tick is None else max(self.since, self.last_tick)

    @classmethod
    def create(cls, name: str, agent_id: str, cron: str, *, input_json: str = "null",
               catchup: str = ONCE, timezone: str = DEFAULT_TIMEZONE, issuer: str = "",
               now: datetime) -> Schedule:
        """A new schedule, validated; its first tick is the first after ``now``."""
        check_name(name)
        if not agent_id:
            raise ScheduleError("a schedule needs a target agent id")
        Cron.parse(cron, timezone)
        return cls(name, agent_id, cron.strip(), now, now, now, timezone,
                   canonical_input(input_json), check_catchup(catchup), issuer=issuer)

    def fired(self, tick: datetime, worker: str, now: datetime) -> Schedule:
        return replace(self, last_tick=tick, ticks=self.ticks + 1, fired_by=worker,
                       updated_at=now)

    def paused_at(self, now: datetime) -> Schedule:
        return replace(self, paused=True, updated_at=now)

    def resumed_at(self, now: datetime) -> Schedule:
        return replace(self, paused=False, since=now, updated_at=now)

    def next_tick(self, now: datetime) -> datetime | None:
        """When it fires next, as an owner that runs now would decide; None when paused."""
        if self.paused:
            return None
        first = self.schedule.next_after(self.base)
        if first > now:
            return first
        return now if self.catchup == ONCE else self.schedule.next_after(now)

    # -- the record on ares.schedules --------------------------------------------------

    def encode(self) -> bytes:
        return encode(SCHEDULE, {
            "name": self.name, "agent_id": self.agent_id, "cron": self.cron,
            "timezone": self.timezone, "input_json": self.input_json,
            "catchup": self.catchup, "paused": self.paused, "issuer": self.issuer,
            "created_at": self.created_at, "since": self.since, "last_tick": self.last_tick,
            "ticks": self.ticks, "fired_by": self.fired_by, "updated_at": self.updated_at,
        })

    @classmethod
    def decode(cls, data: bytes) -> Schedule:
        name, record = decode(data)
        if name != SCHEDULE:
            raise SchemaError(f"schema_mismatch: expected a {SCHEDULE}, got a {name}")
        return cls(record["name"], record["agent_id"], record["cron"], record["created_at"],
                   record["since"], record["updated_at"], record["timezone"],
                   record["input_json"], record["catchup"], record["paused"],
                   record["issuer"], record["last_tick"], record["ticks"],
                   record["fired_by"])

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """What ``ares schedules list --json`` prints of it."""
        next_tick = None
        if now is not None:
            try:
                next_tick = self.next_tick(now)
            except ScheduleError:
                next_tick = None
        return {
            "name": self.name, "key": self.key, "agent_id": self.agent_id, "cron": self.cron,
            "timezone": self.timezone, "catchup": self.catchup,
            "input": json.loads(self.input_json), "paused": self.paused,
            "issuer": self.issuer, "created_at": _iso(self.created_at),
            "since": _iso(self.since), "last_tick": _iso(self.last_tick),
            "ticks": self.ticks, "fired_by": self.fired_by,
            "updated_at": _iso(self.updated_at), "next_tick": _iso(next_tick),
        }


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def canonical_input(input_json: str) -> str:
    try:
        return canonical_json(json.loads(input_json))
    except RecursionError:
        raise ScheduleError("the task input is JSON nested too deeply") from None
    except (ValueError, TypeError) as exc:
        raise ScheduleError(f"the task input is not JSON: {exc}") from None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one schedule now: fire ``fire`` (a tick time), or wait for ``wait``
    (None: nothing to wait for, e.g. paused)."""

    fire: datetime | None = None
    catchup: bool = False  # the fired tick stands for missed ones (the catch-up policy)
    wait: datetime | None = None
    missed_since: datetime | None = None  # the first missed tick, for the log


def decide(schedule: Schedule, now: datetime, planned: datetime | None = None) -> Decision:
    """Fire or wait: ``planned`` is the tick this owner planned for the schedule while it
    ran (None after a takeover, a resume or a change)."""
    if schedule.paused:
        return Decision()
    base = schedule.base
    if planned is not None and planned > base:
        return Decision(wait=planned) if planned > now else Decision(fire=planned)
    cron = schedule.schedule
    first = cron.next_after(base)
    if first > now:
        return Decision(wait=first)
    # Due ticks that nothing had planned: they were missed.
    if schedule.catchup == ONCE:
        return Decision(fire=cron.latest_at_or_before(now), catchup=True, missed_since=first)
    return Decision(wait=cron.next_after(now), missed_since=first)


def plan_after(schedule: Schedule, fired: datetime, now: datetime) -> datetime | None:
    """The tick to plan after ``fired``; None when it is already past (the owner fell
    behind by more than a period: the catch-up policy decides about what came due)."""
    following = schedule.schedule.next_after(fired)
    return following if following > now else None
