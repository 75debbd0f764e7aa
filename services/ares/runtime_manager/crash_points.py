"""Crash points: a runtime manager that SIGKILLs itself at a named point of a command's life.

For tests and chaos runs only. ``ARES_CRASH_POINT=<point>[:<nth>]`` arms one point, read once
when the partition owner starts (``arm_from_env``); the process then kills itself with
SIGKILL (no cleanup, no goodbye to the group, an open transaction left behind) the ``nth``
time (default 1) a command reaches that point. Unset, ``reached`` costs one global look-up.
A command can never arm it: only the process environment does.

A command's life in the owner (``owner.PartitionOwner._process``), in the order it happens.
The reply is produced **inside** the command's transaction (with its events, dead letters
and the consumed offset), so it becomes visible exactly when the transaction commits:

``consumed``       the command record was read, its transaction begun, nothing staged
                   (owner.py: ``PartitionOwner._process.work``)
``handled``        the handler decided the command's events: staged in the writer's
                   transaction, not yet handed to the producer, reply not sent
                   (command_handler.py: ``CommandHandler._admit``)
``after_reply``    the reply record was produced into the open transaction (invisible to a
                   ``read_committed`` client until the commit)
                   (command_handler.py: ``CommandHandler._reply``)
``before_commit``  the consumed offsets were sent to the transaction
                   (``send_offsets_to_transaction`` returned); the commit is not called
                   (owner.py: ``PartitionOwner._process.work``)
``events_sent``    the writer produced the events and the broker acknowledged them, inside
                   the transaction; ``commit_transaction`` is about to be called. The writer
                   hands its staged events to the producer only here (one batch per
                   transaction), so this is later than ``before_commit``
                   (``watch_commits``: the writer's producer's ``commit_transaction``)
``after_commit``   the transaction committed (events, reply and offsets visible together);
                   nothing after it has run (owner.py: ``PartitionOwner._process``)

``before_commit``/``events_sent``/``after_commit`` count once per transaction that carried
commands; the others once per command.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ares.errors import ConfigError

log = logging.getLogger(__name__)

ENV = "ARES_CRASH_POINT"
POINTS = ("consumed", "handled", "after_reply", "before_commit", "events_sent", "after_commit")


@dataclass(slots=True)
class _Armed:
    point: str
    nth: int
    seen: int = 0
    # Partitions whose open transaction carries commands (for ``events_sent``).
    carrying: set[int] = field(default_factory=set)


class _State:
    """The armed point of this process (None: none, and ``reached`` returns at once)."""

    armed: _Armed | None = None


def parse(spec: str) -> tuple[str, int]:
    """``point[:nth]`` → (point, nth); ``ConfigError`` for anything else."""
    point, _, nth = spec.strip().partition(":")
    if point not in POINTS:
        raise ConfigError(f"{ENV}: unknown crash point {point!r} (one of {', '.join(POINTS)})")
    if nth and (not nth.isdigit() or int(nth) < 1):
        raise ConfigError(f"{ENV}: the count after ':' must be a positive integer (got {nth!r})")
    return point, int(nth or 1)


def arm(spec: str | None) -> None:
    """Arm the point ``spec`` names (None or "": disarm)."""
    if not spec:
        _State.armed = None
        return
    point, nth = parse(spec)
    _State.armed = _Armed(point, nth)
    log.warning("crash point armed: this process SIGKILLs itself the %s time a command "
                "reaches %r (%s; tests and chaos only)", _ordinal(nth), point, ENV)


def arm_from_env(env: Mapping[str, str] | None = None) -> None:
    arm((os.environ if env is None else env).get(ENV))


def armed() -> str | None:
    armed_point = _State.armed
    return None if armed_point is None else armed_point.point


def reached(point: str) -> None:
    """A command reached ``point``: SIGKILL this process if it is the armed one's nth time."""
    armed_point = _State.armed
    if armed_point is None or armed_point.point != point:
        return
    armed_point.seen += 1
    if armed_point.seen < armed_point.nth:
        return
    log.critical("crash point %s reached (%s time): SIGKILL", point,
                 _ordinal(armed_point.seen))
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def carrying(partition: int, carries: bool = True) -> None:
    """Whether ``partition``'s open transaction carries commands (``events_sent`` counts
    only those, not an agent's own appends)."""
    armed_point = _State.armed
    if armed_point is None:
        return
    if carries:
        armed_point.carrying.add(partition)
    else:
        armed_point.carrying.discard(partition)


def watch_commits(producer: Any, partition: int) -> None:
    """Armed at ``events_sent``: reach it in ``producer.commit_transaction``, the one call
    the writer makes after its events were produced and acknowledged and before the commit
    (the writer is compiled code, left alone: the hook sits on the producer instance)."""
    armed_point = _State.armed
    if armed_point is None or armed_point.point != "events_sent":
        return
    commit: Callable[[], Awaitable[None]] = producer.commit_transaction
    if getattr(commit, "_crash_point", False):
        return

    async def commit_transaction() -> None:
        if partition in armed_point.carrying:
            reached("events_sent")
        await commit()

    commit_transaction._crash_point = True  # type: ignore[attr-defined]
    producer.commit_transaction = commit_transaction


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


__all__ = ["ENV", "POINTS", "arm", "arm_from_env", "armed", "carrying", "parse", "reached",
           "watch_commits"]
