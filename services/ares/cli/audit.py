"""``ares audit verify``: is the event log intact?

\b
Per stream: the hash chain (every event's content hash and its link to the previous one),
contiguous versions, duplicates, records that do not decode or sit under another stream's
key, and truncation — the log ending before a version its latest snapshot, the owner's
partition checkpoint or the projected stream index knows. The log is scanned in full
(never through the index: a forged record sits where no index points), in chunks of at
most --max-replay events, so memory stays bounded on any log.
With --file the log is read from a dump written by kcat (``ares.replay_reader.dump``,
docs/clients.md), offline: neither broker nor database is needed.
With a keyring configured (ARES_KEYRING_FILE), every event's signature is checked too: an
unsigned event dated from the keyring's `since` on, an unknown key or a signature that does
not verify is a `signature` finding (a well-chained forgery written by a plain producer);
unsigned events before `since` are counted as unsigned (legacy).
With --state, each recovery record's state hash (written with ``agent.resurrected``) is
recomputed from the log (``ares.replay_reader.audit_state``): a mismatch fails like a broken
chain; --agents names the agent registries the kinds need, as for the runtime manager.
Exit codes: 0 every stream intact, 5 anything failed (each finding names the stream, the
version and what is wrong), 1 a named stream has no trace anywhere, 2 usage (and a dump
not in the documented framing), 4 broker unreachable.
"""

from __future__ import annotations

import functools
import json
from typing import BinaryIO

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ares.agents.errors import AgentRegistryError
from ares.agents.registry import build_registry
from ares.cli.common import err_console, run_async, settings_of
from ares.config import Settings
from ares.events.signing import default_policy
from ares.replay_reader.audit import AuditReport
from ares.replay_reader.audit_run import (
    DEFAULT_MAX_REPLAY,
    AuditScope,
    audit_source,
    run_audit,
)
from ares.replay_reader.audit_state import (
    Recompute,
    StateReport,
    audit_states,
    run_state_audit,
)
from ares.replay_reader.dump import KCAT_FORMAT, DumpError, DumpSource, read_dump
from ares.replay_reader.wiring import (
    ENV_SCHEMA,
    CompactedSummaries,
    Topics,
    projection_store,
)
from ares.runtime_manager.replay import state_hash_at

INTEGRITY_EXIT = 5


@click.group()
def audit() -> None:
    """Integrity audits of the event log."""


@audit.command()
@click.argument("streams", nargs=-1, metavar="[STREAM]...")
@click.option("--all", "all_streams", is_flag=True, help="every stream of the log")
@click.option("--json", "as_json", is_flag=True, help="one JSON report")
@click.option("--max-replay", type=click.IntRange(min=1), default=DEFAULT_MAX_REPLAY,
              show_default=True, metavar="N",
              help="events decoded and verified per step: bounds the memory of the audit")
@click.option("--schema", envvar=ENV_SCHEMA, show_envvar=True, metavar="NAME",
              help="PostgreSQL schema of the projections  [default: ares_projections]")
@click.option("--no-index", is_flag=True,
              help="do not compare with the projected stream index")
@click.option("--progress/--no-progress", default=None,
              help="a progress bar on stderr  [default: when stderr is a terminal]")
@click.option("--file", "dump", type=click.File("rb"), metavar="PATH",
              help="read the log from a kcat dump instead of the broker ('-': stdin), "
                   f"dumped with -f '{KCAT_FORMAT}'")
@click.option("--state", "check_state", is_flag=True,
              help="also recompute each recovery record's state hash from the log")
@click.option("--agents", "agent_specs", multiple=True, metavar="MODULE:REGISTRY",
              help="agent registries for --state (built-ins and entry points are loaded)")
@click.pass_context
def verify(ctx: click.Context, *, streams: tuple[str, ...], all_streams: bool, as_json: bool,
           max_replay: int, schema: str | None, no_index: bool,
           progress: bool | None, dump: BinaryIO | None, check_state: bool,
           agent_specs: tuple[str, ...]) -> None:
    """Verify STREAM... (agent ids), or --all of them.

    \b
    Checks the hash chain, contiguous versions, duplicates, undecodable and misrouted
    records, and truncation against snapshots, partition checkpoints and the stream index;
    with ARES_KEYRING_FILE set, every event's signature (ares keys).
    The log is scanned in full, --max-replay events at a time.

    \b
    An auditor's copy, verified offline (no broker, no database):
      kcat -C -b BROKER -t ares.events -e -q -X isolation.level=read_committed \\
           -f 'ares-dump-1 %t %p %o %K %S\\n%k%s\\n' > events.dump
      ares audit verify --all --file events.dump
    Exit codes: 0 intact, 5 any finding (stream, version, what is wrong), 1 a named stream
    has no trace anywhere, 2 usage or a dump not in that framing, 4 broker unreachable.
    """
    if bool(streams) == all_streams:
        raise click.UsageError("name the streams to verify, or --all (not both)")
    settings = settings_of(ctx)
    signatures = default_policy()  # a bad ARES_KEYRING_FILE fails here (exit 2), not midway
    show_progress = err_console.is_terminal if progress is None else progress
    wanted = None if all_streams else list(streams)
    recompute: Recompute | None = None
    if check_state:
        try:
            registry = build_registry(agent_specs)
        except AgentRegistryError as exc:
            raise click.BadParameter(str(exc), param_hint="--agents") from None
        # The runtime manager's own fold rebuilds each recorded state (ares.cli wires it:
        # the replay reader does not import the runtime manager).
        recompute = functools.partial(state_hash_at, registry=registry)
    states: StateReport | None = None
    if dump is not None:
        report, notes, states = run_async(_verify_dump(settings, dump, wanted, max_replay,
                                                       recompute))
    else:
        report, notes = run_async(_verify(settings, wanted, max_replay, schema,
                                          not no_index, show_progress))
        if recompute is not None:
            states = run_async(run_state_audit(settings, Topics.of(settings).events, wanted,
                                               recompute))
    for note in notes:
        err_console.print(f"note: {note}", highlight=False)
    if as_json:
        payload = report.to_json()
        payload["signatures"] = signatures.summary()
        if states is not None:
            payload["state"] = states.to_json()
        click.echo(json.dumps(payload))
    else:
        for line in [*report.lines(), signatures.line(),
                     *(states.lines() if states is not None else ())]:
            click.echo(line)
    if not report.ok or (states is not None and not states.ok):
        ctx.exit(INTEGRITY_EXIT)
    ctx.exit(1 if report.unknown else 0)


async def _verify_dump(settings: Settings, dump: BinaryIO, streams: list[str] | None,
                       max_replay: int, recompute: Recompute | None = None,
                       ) -> tuple[AuditReport, list[str], StateReport | None]:
    topics = Topics.of(settings)
    name = getattr(dump, "name", "the dump")
    try:
        source = DumpSource(read_dump(dump, name))
    except DumpError as exc:
        raise click.BadParameter(str(exc), param_hint="--file") from None
    found = source.topics()
    if topics.events not in found:
        held = ", ".join(sorted(found)) or "no record at all"
        raise click.BadParameter(f"{name} holds no record of {topics.events} (it holds: "
                                 f"{held}); set --topic-prefix to the dumped one's",
                                 param_hint="--file")
    snapshots = topics.snapshots if topics.snapshots in found else None
    scope = AuditScope(topics.events, snapshots, streams, max_replay=max_replay)
    if snapshots is None:
        scope.notes.append(f"{name} holds no {topics.snapshots}: truncation is judged "
                           "from the events alone")
    report = await audit_source(source, scope)
    states = (None if recompute is None
              else await audit_states(source, topics.events, streams, recompute))
    return report, scope.notes, states


async def _verify(settings: Settings, streams: list[str] | None, max_replay: int,
                  schema: str | None, use_index: bool,
                  show_progress: bool) -> tuple[AuditReport, list[str]]:
    topics = Topics.of(settings)
    store = projection_store(settings, topics, schema, max_connections=1) if use_index else None
    summaries = CompactedSummaries(settings)
    scope = AuditScope(topics.events, topics.snapshots, streams, index=store,
                       summaries=summaries, max_replay=max_replay)
    try:
        with Progress(TextColumn("auditing {task.description}"), BarColumn(),
                      MofNCompleteColumn(), TimeRemainingColumn(), console=err_console,
                      disable=not show_progress, transient=True) as bar:
            task = bar.add_task(topics.events, total=None)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            report = await run_audit(settings, scope, advance)
    finally:
        await summaries.close()
        if store is not None:
            await store.close()
    return report, scope.notes
