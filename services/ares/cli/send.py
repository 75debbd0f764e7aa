"""One command to its owner and its reply, for the CLI's write commands (agents, schedules)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import click

from ares.cli.common import run_async, settings_of
from ares.client import Client
from ares.commands.model import Reply
from ares.logs import quiet_aiokafka

ISSUER = "cli"  # who the CLI's commands say sent them (ARES_COMMAND_ISSUERS rules name it)


def send_command(ctx: click.Context, call: Callable[[Client], Awaitable[Reply]],
                 timeout: float | None) -> Reply:
    """Run ``call`` with a started ``Client``; ``timeout`` bounds the wait for the reply
    (and for connecting), else ``ARES_REQUEST_TIMEOUT_S``."""
    settings = settings_of(ctx)
    if timeout is not None:
        settings = dataclasses.replace(settings, request_timeout_s=timeout)

    async def go() -> Reply:
        async with Client(settings, issuer=ISSUER) as client:
            return await call(client)

    with quiet_aiokafka():
        return run_async(go())
