"""One command to its owner and its reply, for the CLI's write commands (agents, schedules).

``--deadline`` is the same option on every command that sends one: without it a command is
kept on ``ares.commands`` until an owner takes it, however long none runs; with it an owner
that takes the command too late answers "expired" and dead-letters it
(``ares.commands.deadlines``). When no owner answers within ``--timeout`` the CLI exits 4
saying which of the two will happen, and how to wait for it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import click

from ares.cli.common import run_async, settings_of
from ares.client import Client, NotAnsweredError
from ares.commands.deadlines import DURATION_HELP, parse_seconds
from ares.commands.model import Reply
from ares.errors import UnavailableError
from ares.logs import quiet_aiokafka

ISSUER = "cli"  # who the CLI's commands say sent them (ARES_COMMAND_ISSUERS rules name it)
KEPT = "none: kept until an owner takes it"


class Duration(click.ParamType):
    """Seconds (``30``) or a duration (``90s``, ``5m``, ``1h``, ``2d``)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_seconds(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def deadline_option(default: str = KEPT) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--deadline DURATION``: an owner that takes the command later refuses it (exit 1,
    "expired") and dead-letters it; ``default`` says what happens without the option."""
    return click.option(
        "--deadline", "deadline_s", type=Duration(), default=None, metavar="DURATION",
        help=f"no owner may apply the command after this long ({DURATION_HELP}); a later one "
             f"answers 'expired' and dead-letters it to ares.dlq  [default: {default}]")


def send_command(ctx: click.Context, call: Callable[[Client], Awaitable[Reply]],
                 timeout: float | None, *, again: str = "") -> Reply:
    """Run ``call`` with a started ``Client``; ``timeout`` bounds the wait for the reply
    (and for connecting), else ``ARES_REQUEST_TIMEOUT_S``. Not answered in time: exit 4,
    and ``again`` (how to wait for it again) while an owner may still apply the command."""
    settings = settings_of(ctx)
    if timeout is not None:
        settings = dataclasses.replace(settings, request_timeout_s=timeout)

    async def go() -> Reply:
        async with Client(settings, issuer=ISSUER) as client:
            return await call(client)

    with quiet_aiokafka():
        try:
            return run_async(go())
        except NotAnsweredError as exc:
            if again and exc.kept:
                raise UnavailableError(f"{exc}: {again}") from None
            raise
