"""``ares replay STREAM``: a stream step by step, the folded state after each step.

\b
On a terminal it is interactive: Enter/n next, b back, j N (or just N) jump to step N,
s summary, q quit. Scriptable:
  ares replay STREAM --to N --json       the event and state after step N
  ares replay STREAM --at TIME --json    the state as of TIME (ISO 8601)
  ares replay STREAM --summary [--json]  totals: steps, time span, types, modules, tokens
  ares replay STREAM --steps [--to N]    JSON Lines: every step with its state
Exit codes: 0 ok, 1 no such stream, 2 usage, 4 broker unreachable, 5 the replayed events
fail the integrity check (the output says where; ``ares audit verify`` for the full story).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console, Group
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table

from ares.agents.registry import build_registry
from ares.cli.common import err_console, run_async, settings_of
from ares.config import Settings
from ares.lifecycle.verification import VerificationFailure
from ares.replay_reader.kafka_source import KafkaStreamReader
from ares.replay_reader.session import ReplaySession, ReplayStep, ReplaySummary, failure_json
from ares.replay_reader.wiring import ENV_SCHEMA, CompactedSummaries, Topics, open_reader

INTEGRITY_EXIT = 5


def parse_time(value: str) -> datetime:
    """ISO 8601 (``Z`` allowed); a time without a zone is UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time "
                                 "(e.g. 2026-11-30T12:00:00Z)") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


@click.command()
@click.argument("stream")
@click.option("--to", "to_step", type=click.IntRange(min=0), metavar="N",
              help="replay up to step N (step N is version N of an intact stream)")
@click.option("--at", "at_time", metavar="TIME",
              help="the state as of TIME, ISO 8601 (e.g. 2026-11-30T12:00:00Z)")
@click.option("--summary", "show_summary", is_flag=True, help="totals over the whole stream")
@click.option("--steps", "all_steps", is_flag=True,
              help="JSON Lines: every step (up to --to) with its event and state")
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
@click.option("--schema", envvar=ENV_SCHEMA, show_envvar=True, metavar="NAME",
              help="PostgreSQL schema of the projections  [default: ares_projections]")
@click.option("--no-index", is_flag=True,
              help="never ask the stream index: scan the log (what happens anyway when "
                   "PostgreSQL is down)")
@click.option("--agents", "agent_specs", multiple=True, envvar="ARES_AGENTS", show_envvar=True,
              help="agent kinds to fold with, package.module:REGISTRY (repeatable); the "
                   "built-in and entry-point kinds are always there")
@click.pass_context
def replay(ctx: click.Context, *, stream: str, to_step: int | None, at_time: str | None,
           show_summary: bool, all_steps: bool, as_json: bool, schema: str | None,
           no_index: bool, agent_specs: tuple[str, ...]) -> None:
    """Replay STREAM (an agent id) event by event, with the folded state after each.

    \b
    On a terminal: interactive (Enter/n next, b back, j N jump, s summary, q quit).
    Scripts:
      --to N --json       the event and the state after step N
      --at TIME --json    the state as of TIME (by the events' timestamps)
      --summary [--json]  steps, time span, agents, modules, event types, tokens
      --steps [--to N]    JSON Lines: every step with its event and state
      --json              the state at the end of the stream
    Every event is verified (versions, hash chain) as it is replayed.
    Exit codes: 0 ok, 1 no such stream, 2 usage (or --to past the end), 4 broker
    unreachable, 5 the replayed events fail the integrity check.
    """
    modes = [m for m, on in (("--at", at_time is not None), ("--summary", show_summary),
                             ("--steps", all_steps)) if on]
    if len(modes) > 1 or (to_step is not None and {"--at", "--summary"} & set(modes)):
        raise click.UsageError(f"choose one of --to, --at, --summary, --steps (got "
                               f"{', '.join(modes + (['--to'] if to_step is not None else []))})")
    at = parse_time(at_time) if at_time is not None else None
    interactive = not (modes or to_step is not None or as_json)
    if interactive and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise click.UsageError("not a terminal: use --to N --json, --at TIME --json, --summary "
                               "or --steps for scripts")
    settings = settings_of(ctx)
    options = _Options(stream, to_step, at, show_summary, all_steps, as_json, interactive)
    ctx.exit(run_async(_replay(settings, options, schema, not no_index, agent_specs)))


class _Options:
    def __init__(self, stream: str, to_step: int | None, at: datetime | None, summary: bool,
                 steps: bool, as_json: bool, interactive: bool) -> None:
        self.stream, self.to_step, self.at, self.summary = stream, to_step, at, summary
        self.steps, self.as_json, self.interactive = steps, as_json, interactive


async def _replay(settings: Settings, o: _Options, schema: str | None, use_index: bool,
                  agent_specs: tuple[str, ...]) -> int:
    registry = build_registry(agent_specs)
    summaries = CompactedSummaries(settings)
    try:
        async with open_reader(settings, Topics.of(settings), schema=schema,
                               use_index=use_index) as reader:
            session = await ReplaySession.open(reader, o.stream, registry=registry,
                                               summaries=summaries)
            return await _run_mode(session, reader, o)
    finally:
        await summaries.close()


async def _run_mode(session: ReplaySession, reader: KafkaStreamReader, o: _Options) -> int:
    if o.interactive:
        return await _interactive(session)
    if o.summary:
        summary = await session.summary()
        _print_summary(summary, o.as_json)
        return 0 if summary.failure is None else INTEGRITY_EXIT
    if o.steps:
        async for each in session.steps(o.to_step):
            click.echo(json.dumps(each.to_json(), default=str))
        return _verdict(session.failure)
    step: ReplayStep | None
    if o.at is not None:
        version = await reader.version_at(o.stream, o.at)
        step = await session.to_version(version)
        _print_state(session, step, o.as_json, at=o.at)
        return _verdict(session.failure)
    target = session.expected_total if o.to_step is None else o.to_step
    step = await session.step_to(target)
    if o.to_step is not None and session.position < o.to_step:
        err_console.print(f"stream {o.stream!r} has {session.position} step(s): showing "
                          "the last")
        _print_state(session, step, o.as_json)
        return 2
    _print_state(session, step, o.as_json)
    return _verdict(session.failure)


def _verdict(failure: VerificationFailure | None) -> int:
    if failure is None:
        return 0
    err_console.print(f"[red]integrity failure:[/red] stream {failure.stream_id!r} version "
                      f"{failure.version}: {failure.kind}: {failure.detail}", highlight=False)
    return INTEGRITY_EXIT


def _state_doc(session: ReplaySession, step: ReplayStep | None,
               at: datetime | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"stream_id": session.stream_id}
    if at is not None:
        doc["at"] = at.isoformat()
    doc.update({
        "step": session.position, "version": session.state.version,
        "head_version": session.head,
        "event": None if step is None else step.event.to_json(),
        "state": session.state.to_json(), "integrity": failure_json(session.failure),
    })
    return doc


def _print_state(session: ReplaySession, step: ReplayStep | None, as_json: bool,
                 at: datetime | None = None) -> None:
    if as_json:
        click.echo(json.dumps(_state_doc(session, step, at), default=str))
        return
    console = Console()
    if step is None:
        console.print(f"stream {session.stream_id!r}: before the first event (step 0)")
        return
    console.print(_step_panel(step, session.head))


def _step_panel(step: ReplayStep, head: int) -> Panel:
    e = step.event
    info = Table.grid(padding=(0, 1))
    info.add_row("[bold]time[/bold]", e.timestamp.isoformat())
    info.add_row("[bold]module[/bold]", e.module)
    info.add_row("[bold]id[/bold]", e.id)
    info.add_row("[bold]hash[/bold]", f"{e.hash[:16]}... (prev {e.prev_hash[:16]}...)")
    if e.metadata:
        info.add_row("[bold]metadata[/bold]", json.dumps(dict(e.metadata)))
    state = step.state
    lc = state.lifecycle
    pending = ", ".join(t.task_id for t in lc.pending_tasks) or "-"
    life = (f"{lc.status.value} · kind {lc.kind or '?'} · incarnation {lc.incarnation} · "
            f"restarts {len(lc.restarts)} · tasks {lc.tasks_completed}/{lc.tasks_assigned} "
            f"done · pending {pending}")
    parts: list[Any] = [info, "[bold]payload[/bold]", JSON(json.dumps(dict(e.payload),
                                                                      default=str)),
                        f"[bold]lifecycle[/bold] {life}"]
    if state.agent is not None:
        parts += ["[bold]agent state[/bold]", JSON(json.dumps(dict(state.agent), default=str))]
    elif state.agent_note:
        parts.append(f"[dim]agent state: {state.agent_note}[/dim]")
    if step.failure is not None:
        f = step.failure
        parts.append(f"[bold red]INTEGRITY: version {f.version}: {f.kind}: {f.detail}[/]")
    title = f"step {step.step}/{head} · v{e.version} · [bold]{e.type}[/bold]"
    return Panel(Group(*parts), title=title, title_align="left")


def _print_summary(summary: ReplaySummary, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(summary.to_json(), default=str))
        return
    doc = summary.to_json()
    table = Table(title=f"stream {summary.stream_id!r}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for label, value in (
        ("steps", f"{doc['total_steps']} (versions {doc['first_version']}.."
                  f"{doc['last_version']})"),
        ("time span", f"{doc['started_at']} → {doc['ended_at']} ({doc['duration_s']} s)"),
        ("agents", ", ".join(doc["agents"])), ("workers", ", ".join(doc["workers"]) or "-"),
        ("incarnations", str(doc["incarnations"])), ("tasks", str(doc["tasks"])),
        ("modules", ", ".join(f"{k} {v}" for k, v in doc["modules"].items())),
        ("event types", ", ".join(f"{k} {v}" for k, v in doc["types"].items())),
        ("tokens", f"spent {doc['tokens']['spent_tokens']} in {doc['tokens']['calls']} "
                   f"call(s), reused {doc['tokens']['reused_tokens']}, spent twice "
                   f"{doc['tokens']['spent_twice']}"),
        ("integrity", "intact" if doc["intact"] else f"[red]{doc['integrity']}[/red]"),
    ):
        table.add_row(label, value)
    Console().print(table)


_HELP = "[dim]Enter/n next · b back · j N jump · s summary · q quit[/dim]"


async def _interactive(session: ReplaySession) -> int:
    console = Console()
    console.print(f"replaying stream [bold]{session.stream_id}[/bold]: {session.head} "
                  f"version(s)  {_HELP}")
    while True:
        try:
            command = console.input(f"[bold]step {session.position}/{session.head}>[/bold] ")
        except (EOFError, KeyboardInterrupt):
            return 0
        word, _, arg = command.strip().lower().partition(" ")
        if word in ("q", "quit", "exit"):
            return 0
        if word in ("s", "summary"):
            _print_summary(await session.summary(), False)
            continue
        if word in ("", "n", "next"):
            step = await session.step()
            if step is None:
                console.print("[dim]end of the stream[/dim]")
                continue
        elif word in ("b", "back"):
            step = await session.back()
        elif word in ("j", "jump") or word.isdigit():
            target = arg if word in ("j", "jump") else word
            if not target.strip().isdigit():
                console.print("jump to which step? e.g. j 12")
                continue
            step = await session.step_to(int(target))
        else:
            console.print(f"unknown command {command!r}  {_HELP}")
            continue
        if step is None:
            console.print("before the first event (step 0)")
        else:
            console.print(_step_panel(step, session.head))
