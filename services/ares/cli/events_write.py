"""``ares events append``: the write side of the events CLI, through the stream's owner."""

from __future__ import annotations

import json

import click

from ares.cli.common import run_async, settings_of
from ares.client import Client
from ares.events.model import ANY_VERSION, NewEvent


def _payload(raw: str) -> dict[str, object]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--payload") from None
    except RecursionError:
        raise click.BadParameter("JSON nested too deeply", param_hint="--payload") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object, e.g. '{\"text\": \"hi\"}'",
                                 param_hint="--payload")
    return value


@click.command()
@click.argument("stream")
@click.option("--type", "event_type", required=True, help="Event type, e.g. note.added.")
@click.option("--payload", default="{}", show_default=True, help="The payload, a JSON object.")
@click.option("--module", default="cli", show_default=True,
              help="Which service or subsystem emits the event.")
@click.option("--expected-version", type=click.IntRange(min=-1), default=ANY_VERSION,
              show_default=True,
              help="0: the stream must be empty; N: it must be at N; -1: no check.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds to wait for the owner's reply  [default: ARES_REQUEST_TIMEOUT_S]")
@click.pass_context
def append(ctx: click.Context, stream: str, event_type: str, payload: str, module: str,
           expected_version: int, timeout: float | None) -> None:
    """Append one event to STREAM through its owner; prints the new stream version.

    \b
    Exit codes: 3 version conflict (the message names expected and actual version),
    4 no owner answered in time (start one: ares run runtime-manager).
    """
    if not event_type.strip():
        raise click.BadParameter("an event needs a type, e.g. note.added", param_hint="--type")
    if not module.strip():
        raise click.BadParameter("say which service or subsystem emits the event",
                                 param_hint="--module")
    event = NewEvent(type=event_type, module=module, payload=_payload(payload))
    settings = settings_of(ctx)

    async def go() -> int:
        async with Client(settings, issuer="cli") as client:
            return await client.append(stream, [event], expected_version, timeout)

    click.echo(run_async(go()))
