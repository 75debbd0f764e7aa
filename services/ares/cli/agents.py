"""``ares agents``: the agents' lifecycle from the command line.

Write commands (start, stop, kill, resume, task, resolve, snapshot) go through ``ares.Client``
to the owner of the agent's partition, which validates them and appends the events; they
print one line on stdout once the owner has answered. ``tail --tokens`` follows an agent's
LLM token streams on ``ares.tokens`` (``ares.llm.tokens``). Read commands (status, genealogy,
tree) scan ``ares.events`` read-only (read_committed, no consumer group, no partition
ownership) and fold the views of ``ares.views.agents``, ``ares.lifecycle.genealogy`` and
``ares.views.team``.

A command no owner answers within ``--timeout`` stays on ``ares.commands`` and is applied
when an owner takes it (exit 4 says so, with the command that waits for it again: the same
id is applied once); ``--deadline`` asks for the opposite, and ``kill`` has the wait as its
deadline by default (``ares.commands.deadlines``; docs/operations.md, "Command deadlines").

Exit codes: 0 ok, 1 refused by the owner (its message; "expired" past a --deadline) or no
such agent/call, 2 usage (a bad flag, e.g. JSON that does not parse), 3 version conflict
that persisted (resolve), 4 broker unreachable, topics missing or no owner answered (start
one: ares run runtime-manager).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from aiokafka.errors import KafkaError
from rich import box
from rich.console import Console
from rich.table import Table

from ares.agents.records import RESOLUTIONS
from ares.cli.common import err_console, run_async, settings_of
from ares.cli.events import _quiet_broken_pipe, _stop_on_sigterm
from ares.cli.render import one_line
from ares.cli.send import ISSUER, deadline_option, send_command
from ares.client import Client
from ares.commands.model import MAX_SIGNAL_PAYLOAD_BYTES, Reply
from ares.config import Settings
from ares.errors import UnavailableError
from ares.events.kafka.errors import translate
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event
from ares.events.wire.canonical import canonical_json
from ares.lifecycle.genealogy import Incarnation, genealogy, genealogy_json
from ares.lifecycle.state import AGENT_STARTED, WaitingFor
from ares.llm.telemetry import DELTA, RESTARTED, STREAM_ERROR
from ares.llm.tokens import FROM_BEGINNING, FROM_CHOICES, TokenRecord, TokenTail
from ares.logs import quiet_aiokafka
from ares.resolution import resolve_call
from ares.tasks import wait_for
from ares.topics import EVENTS, TOKENS, load_topics
from ares.views.agents import AgentView, AgentViews, NoSuchAgentError, agent_builder
from ares.views.team import Member, TeamScan, TeamTree, team_tree

T = TypeVar("T")

MODULE = "cli"  # the module of the events the CLI proposes (resolutions)
_RESOLVE_ATTEMPTS = 3  # re-read and re-check when the stream moved under a resolution
_TOPIC_WAIT_S = 5.0  # PartitionScanner.partitions waits this long for a new topic

_TIMEOUT_HELP = "seconds to wait for the owner's reply  [default: ARES_REQUEST_TIMEOUT_S]"
_JSON_HELP = "machine-readable output (JSON)"


@click.group()
def agents() -> None:
    """Agents: start, stop, kill, resume, tasks, in-doubt tool calls, status, genealogy,
    teams.

    \b
    start, stop, kill, resume, task, signal, resolve and snapshot go through the owner of
    the agent's partition (`ares run runtime-manager`); status, genealogy and tree only read
    ares.events, tail --tokens only reads ares.tokens: safe to run at any time.
    A command not answered within --timeout is kept and applied when an owner takes it
    (kill: only until its deadline, the wait); --deadline DURATION refuses it later.
    Exit codes: 0 ok, 1 refused by the owner (its message; expired past a --deadline)
    or no such agent or call, 2 bad flag (e.g. invalid JSON), 3 version conflict (resolve),
    4 broker unreachable, topics missing or no owner answered.
    """


_timeout = click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
                        metavar="SECONDS", help=_TIMEOUT_HELP)
_deadline = deadline_option()


# -- write side: commands to the owner --------------------------------------------------


@agents.command()
@click.argument("agent_id", metavar="ID")
@click.option("--kind", required=True, help="the agent kind, e.g. example.pipeline")
@click.option("--config", "config_json", default="{}", show_default=True, metavar="JSON",
              help="the agent's configuration, a JSON object")
@_timeout
@_deadline
@click.pass_context
def start(ctx: click.Context, agent_id: str, kind: str, config_json: str,
          timeout: float | None, deadline_s: float | None) -> None:
    """Start agent ID of kind KIND (its first incarnation).

    The owner checks the kind and the configuration: an unknown kind is refused (exit 1)
    with the kinds it knows. Starting a running agent is a no-op; a stopped or quarantined
    one is brought back with `ares agents resume`.
    """
    config = _json_value(config_json, "--config", object_only=True)
    reply = send_command(ctx, lambda c: c.start_agent(agent_id, kind, config, deadline_s),
                         timeout, again=_again(f"start {agent_id} --kind {kind}",
                                               "an agent is started once"))
    _done(agent_id, reply, f"started (kind {kind})")


@agents.command()
@click.argument("agent_id", metavar="ID")
@click.option("--reason", default="requested", show_default=True,
              help="why, recorded in agent.stopped")
@_timeout
@_deadline
@click.pass_context
def stop(ctx: click.Context, agent_id: str, reason: str, timeout: float | None,
         deadline_s: float | None) -> None:
    """Stop agent ID voluntarily: it is never resurrected until `ares agents resume`."""
    reply = send_command(ctx, lambda c: c.command("agent.stop", agent_id, deadline_s=deadline_s,
                                                  reason=reason),
                         timeout, again=_again(f"stop {agent_id}", "a stop is applied once"))
    _done(agent_id, reply, "stopped")


@agents.command()
@click.argument("agent_id", metavar="ID")
@_timeout
@deadline_option("the --timeout wait: a kill is meant for now")
@click.pass_context
def kill(ctx: click.Context, agent_id: str, timeout: float | None,
         deadline_s: float | None) -> None:
    """Crash agent ID as if it raised (fault injection).

    The runtime records agent.dead (cause: killed) and resurrects it through the
    resurrection guard; the new incarnation resumes from its journal. Unlike the other
    commands a kill has a deadline by default, the wait: one applied later would crash an
    incarnation nobody meant.
    """
    reply = send_command(ctx, lambda c: c.command("agent.kill", agent_id, deadline_s=deadline_s,
                                                  reason="cli"),
                         timeout, again=f"see `ares agents status {agent_id}` before killing "
                                        "it again (each kill crashes the incarnation running)")
    _done(agent_id, reply, "killed; the runtime records the death and resurrects it")


@agents.command()
@click.argument("agent_id", metavar="ID")
@_timeout
@_deadline
@click.pass_context
def resume(ctx: click.Context, agent_id: str, timeout: float | None,
           deadline_s: float | None) -> None:
    """Resume a stopped or quarantined agent ID (a new incarnation, a fresh restart
    budget)."""
    reply = send_command(ctx, lambda c: c.command("agent.resume", agent_id,
                                                  deadline_s=deadline_s, reason="operator"),
                         timeout, again=_again(f"resume {agent_id}",
                                               "a running agent is not resumed again"))
    _done(agent_id, reply, "resumed")


@agents.command()
@click.argument("agent_id", metavar="ID")
@click.option("--input", "input_json", required=True, metavar="JSON",
              help="the task's input, any JSON value")
@click.option("--task-id", metavar="TASK_ID",
              help="the task's id (re-assigning an id is a no-op)  [default: a new uuid]")
@_timeout
@_deadline
@click.pass_context
def task(ctx: click.Context, agent_id: str, input_json: str, task_id: str | None,
         timeout: float | None, deadline_s: float | None) -> None:
    """Assign a task to agent ID; prints the task id (stdout), for scripts.

    Tasks run one at a time, in assignment order.
    """
    value = _json_value(input_json, "--input")
    task_id = task_id or str(uuid.uuid4())
    # Its id is in the words: waiting again without it would assign the task twice.
    reply = send_command(ctx, lambda c: c.assign_task(agent_id, task_id, value, deadline_s),
                         timeout, again=_again(f"task {agent_id} --task-id {task_id} "
                                               "--input <the same JSON>", "assigned once"))
    click.echo(task_id)
    _note(f"{agent_id}: task {task_id} "
          + (reply.message if reply.message else "assigned")
          + f" (version {reply.stream_version})")


@agents.command()
@click.argument("agent_id", metavar="ID")
@click.argument("name")
@click.option("--payload", "payload_json", default="null", show_default=True, metavar="JSON",
              help="the signal's value, any JSON value (at most 64 KiB)")
@click.option("--signal-id", metavar="SIGNAL_ID",
              help="the signal's id: sending the same id again is applied once  "
                   "[default: a new uuid]")
@_timeout
@_deadline
@click.pass_context
def signal(ctx: click.Context, agent_id: str, name: str, payload_json: str,
           signal_id: str | None, timeout: float | None, deadline_s: float | None) -> None:
    """Send the signal NAME to agent ID (e.g. `approved` for a tool that waits for its
    approval); prints the signal id (stdout), for scripts.

    \b
    A task waiting for NAME (ctx.wait_for) goes on; a signal nobody waits for yet is kept
    for the first wait of that name. After an exit 4 the signal is kept and applied when an
    owner takes it, however long none runs: the same --signal-id waits for it again (it is
    applied once).
    """
    value = _json_value(payload_json, "--payload")
    text = canonical_json(value)
    if len(text.encode()) > MAX_SIGNAL_PAYLOAD_BYTES:
        raise click.BadParameter(f"{len(text.encode())} bytes, over the "
                                 f"{MAX_SIGNAL_PAYLOAD_BYTES} a signal may carry",
                                 param_hint="--payload")
    signal_id = signal_id or str(uuid.uuid4())
    reply = send_command(ctx, lambda c: c.command("agent.signal", agent_id, deadline_s=deadline_s,
                                                  name=name, signal_id=signal_id,
                                                  payload_json=text),
                         timeout, again=_again(f"signal {agent_id} {name} --signal-id "
                                               f"{signal_id}", "applied once"))
    click.echo(signal_id)
    _note(f"{agent_id}: signal {name!r} " + (reply.message or "delivered")
          + f" (version {reply.stream_version})")


@agents.command()
@click.argument("agent_id", metavar="ID")
@click.option("--call", "call_id", required=True, metavar="CALL_ID",
              help="the in-doubt call's id (see `ares agents status ID`)")
@click.option("--as", "as_", required=True, type=click.Choice(RESOLUTIONS),
              help="done: it happened; retry: it did not, run it again; skip: do not run it")
@click.option("--result", "result_json", metavar="JSON",
              help="with --as done: what the call returned, any JSON value  [default: null]")
@click.option("--note", help="a note for the record (who, why)")
@_timeout
@_deadline
@click.pass_context
def resolve(ctx: click.Context, agent_id: str, call_id: str, as_: str,
            result_json: str | None, note: str | None, timeout: float | None,
            deadline_s: float | None) -> None:
    """Resolve tool call CALL_ID of agent ID that is in doubt (its intent is recorded, its
    outcome is not, and no reconcile hook could tell).

    \b
    Appends tool.call.resolved to the agent's stream; the paused task then runs again:
      done   the call happened: ctx.tool returns --result (or null)
      retry  it did not: a new intent is recorded and the call runs
      skip   do not run it: ctx.tool raises ToolSkipped
    The call must be in doubt now: a call with an outcome, already resolved, still running
    or unknown is refused (exit 1) and nothing is appended.
    """
    if result_json is not None and as_ != "done":
        raise click.BadParameter("a result only goes with --as done", param_hint="--result")
    result = None if result_json is None else _json_value(result_json, "--result")
    settings = settings_of(ctx)
    with quiet_aiokafka():
        version = run_async(_resolve(settings, agent_id, call_id, as_, result, note, timeout,
                                     deadline_s))
    click.echo(f"{agent_id}: call {call_id} resolved as {as_} (version {version})")


async def _resolve(settings: Settings, agent_id: str, call_id: str, as_: str, result: Any,
                   note: str | None, reply_timeout_s: float | None,
                   deadline_s: float | None) -> int:
    store = await _open_store(settings)
    try:
        async with Client(settings, issuer=ISSUER) as client:

            async def read(stream_id: str) -> list[Event]:
                return await _read(store, stream_id)

            return await resolve_call(client, read, agent_id, call_id, as_, result=result,
                                      note=note, module=MODULE, by="operator",
                                      reply_timeout_s=reply_timeout_s,
                                      attempts=_RESOLVE_ATTEMPTS, deadline_s=deadline_s)
    finally:
        await store.close()


@agents.command()
@click.argument("agent_id", metavar="ID")
@_timeout
@_deadline
@click.pass_context
def snapshot(ctx: click.Context, agent_id: str, timeout: float | None,
             deadline_s: float | None) -> None:
    """Snapshot agent ID now (state, version, hash-chain head and log offset) to the
    compacted snapshots topic."""
    reply = send_command(ctx, lambda c: c.command("snapshot.request", agent_id,
                                                  deadline_s=deadline_s, reason="cli"),
                         timeout, again=f"a late snapshot is harmless; `ares agents snapshot "
                                        f"{agent_id}` waits for a new one")
    _done(agent_id, reply, "snapshot taken")


def _again(args: str, why: str) -> str:
    """How to wait again for a command that is kept: the same command, the same id."""
    return f"`ares agents {args}` waits for it again ({why})"


def _done(agent_id: str, reply: Reply, what: str) -> None:
    """One line: what the owner did (or its note, e.g. "already running")."""
    click.echo(f"{agent_id}: {reply.message or what} (version {reply.stream_version})")


def _json_value(raw: str, flag: str, *, object_only: bool = False) -> Any:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=flag) from None
    except RecursionError:
        raise click.BadParameter("JSON nested too deeply", param_hint=flag) from None
    if object_only and not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object, e.g. '{\"reconcile\": false}'",
                                 param_hint=flag)
    return value


# -- read side: views folded from ares.events -------------------------------------------


@agents.command()
@click.argument("agent_id", metavar="[ID]", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object (with ID) or one per agent per line (JSON Lines)")
@click.option("--waiting", is_flag=True,
              help="only the agents whose task waits for a signal or a timer")
@click.pass_context
def status(ctx: click.Context, agent_id: str | None, as_json: bool, waiting: bool) -> None:
    """Status of agent ID, or of every agent (a table).

    \b
    Per agent: status, kind, incarnation, restarts, worker, version, last event, the
    current task, task counts, tokens (spent, saved by the journal after recoveries,
    spent twice: must be 0) and the tool calls in doubt (resolve them with
    `ares agents resolve`).
    --json keys: agent_id, kind, status, incarnation, restarts, deaths, recent_deaths,
    worker, version, last_event_time, last_event_type, started_at, config,
    snapshot_version, last_death, quarantine_reason, current_task {task_id, state},
    tasks {assigned, completed, failed, pending}, tokens {spent, saved, spent_twice, ...},
    in_doubt [{call_id, task_id, tool, idempotency_key, reason, since}],
    waiting_for {task_id, kind (signal, timer, approval), names, deadline, since} or null,
    parent_id (the agent that delegated its latest delegated task; `ares agents tree`
    shows the whole team) or null.
    An unknown ID exits 1; no agents at all prints nothing on stdout (exit 0).
    """
    settings = settings_of(ctx)
    with quiet_aiokafka():
        views = run_async(_views(settings, agent_id))
    if waiting:
        views = [v for v in views if v.waiting_for is not None]
        if agent_id is not None and not views:
            raise click.ClickException(f"agent {agent_id!r} waits for nothing")
    if agent_id is not None:
        [view] = views
        click.echo(_json_line(view.to_json()) if as_json else "\n".join(_view_lines(view)))
        return
    if as_json:
        for view in views:
            click.echo(_json_line(view.to_json()))
    elif views:
        _stdout().print(_views_table(views))
    if not views:
        _note(f"no agents in {load_topics(settings).name(EVENTS)}")


async def _views(settings: Settings, agent_id: str | None) -> list[AgentView]:
    store = await _open_store(settings)
    try:
        if agent_id is not None:
            return [agent_builder(await _read(store, agent_id), agent_id).build()]
        views = AgentViews()
        try:
            async for event in store.read_all():
                views.add(event)
        except KafkaError as exc:
            raise translate(exc, f"scanning {store.topic}") from exc
        return views.views()
    finally:
        await store.close()


@agents.command("genealogy")
@click.argument("agent_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.pass_context
def genealogy_command(ctx: click.Context, agent_id: str, as_json: bool) -> None:
    """Every incarnation of agent ID, oldest first: start and end, how it ended (cause of
    death), the worker, its parent and its recovery record.

    \b
    --json: {"agent_id", "incarnations": [{incarnation, parent, started_at, ended_at,
    lifetime_s, end, cause_of_death, stop_reason, quarantined, worker, attempts,
    backoff_ms, recovery, first_version, last_version}]}
    """
    settings = settings_of(ctx)

    async def go() -> list[Incarnation]:
        store = await _open_store(settings)
        try:
            events = await _read(store, agent_id)
        finally:
            await store.close()
        if not any(e.type == AGENT_STARTED for e in events):
            raise NoSuchAgentError(agent_id)
        return genealogy(events)

    with quiet_aiokafka():
        incarnations = run_async(go())
    if as_json:
        click.echo(_json_line(genealogy_json(agent_id, incarnations)))
        return
    _stdout().print(_genealogy_table(agent_id, incarnations))


@agents.command("tree")
@click.argument("agent_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object: the root, with its children nested")
@click.pass_context
def tree_command(ctx: click.Context, agent_id: str, as_json: bool) -> None:
    """The team rooted at agent ID: the agents it delegated tasks to, theirs, and so on
    (teams: a leader's ctx.delegate starts a sub-agent, its child).

    \b
    One line per member, indented under its parent:
      lead (team.lead) · running · incarnation 1 · task t-7 · tokens 1,200 spent, 0 reused
      ├─ lead.research-3 (team.researcher) · running · incarnation 2 · task lead/t-7/3 · …
      └─ lead.write-9 (team.writer) · stopped · incarnation 1 · no task · …
    A member's children are the agents it delegated to, in dispatch order, then any other
    agent naming it as its parent. Each agent is shown once, at its shallowest place:
    a cycle or a child shared by two members is never repeated. A child appears once its
    agent.started is in the log. Tokens: spent (prompt + completion), and re-used from
    the journal after recoveries.
    --json: {agent_id, kind, status, incarnation, task_id, tokens_spent, tokens_reused,
    parent_id, children: [the same shape, recursively]}, as GET /agents/{id}/tree of
    `ares run replay-reader`.
    Reads the whole of ares.events (as `ares agents status` without ID). An unknown ID
    exits 1.
    """
    settings = settings_of(ctx)
    with quiet_aiokafka():
        members = run_async(_members(settings))
    tree = team_tree(agent_id, members)
    if as_json:
        click.echo(_json_line(tree.to_json()))
        return
    for line in tree_lines(tree):
        click.echo(line)


async def _members(settings: Settings) -> dict[str, Member]:
    store = await _open_store(settings)
    try:
        scan = TeamScan()
        try:
            async for event in store.read_all():
                scan.add(event)
        except KafkaError as exc:
            raise translate(exc, f"scanning {store.topic}") from exc
        return scan.members()
    finally:
        await store.close()


@agents.command("tail")
@click.argument("agent_id", metavar="ID")
@click.option("--tokens", is_flag=True,
              help="the agent's LLM token streams (ares.tokens); the only mode for now")
@click.option("--from", "start", type=click.Choice(FROM_CHOICES), default=FROM_BEGINNING,
              show_default=True,
              help="beginning: what the topic still holds (about an hour), then live; "
                   "end: only what comes next")
@click.option("--json", "as_json", is_flag=True,
              help="one token record per line (JSON Lines), as GET /agents/{id}/tokens")
@click.pass_context
def tail_command(ctx: click.Context, agent_id: str, tokens: bool, start: str,
                 as_json: bool) -> None:
    """Follow agent ID live until Ctrl-C (or SIGTERM), exit 0.

    \b
    --tokens: the text its LLM calls stream (ctx.chat / ctx.llm with streaming), as it
    arrives; a line break when a stream ends. When a step is asked again after a crash or
    a retry, a marker line says its earlier partial text is void:
      [restarted: TASK/NAME/OCCURRENCE — previous partial text void]
    A stream that failed ends with [error: TASK/NAME/OCCURRENCE: message].
    --json: the records themselves, one per line: stream, agent_id, task_id, name,
    occurrence, incarnation, kind (start, restarted, delta, end, error), seq, text, at.
    Token records are a live view kept about an hour; the recorded llm.call holds the
    final text (`ares events read ID`).
    """
    if not tokens:
        raise click.UsageError("say what to follow: --tokens (the agent's LLM token "
                               "streams; the only mode for now)")
    settings = settings_of(ctx)
    topic = load_topics(settings).name(TOKENS)
    with _quiet_broken_pipe(), contextlib.suppress(KeyboardInterrupt), quiet_aiokafka():
        run_async(_tail_tokens(settings, topic, agent_id, start, as_json))


async def _tail_tokens(settings: Settings, topic: str, agent_id: str, start: str,
                       as_json: bool) -> None:
    terminated = _stop_on_sigterm()
    try:
        tail = await TokenTail.open(settings, topic, agent_id, start=start)
        try:
            _note(f"following the token streams of {agent_id!r} in {topic} (partition "
                  f"{tail.tp.partition}, from {start}); Ctrl-C to stop")
            printer = _TokenPrinter(as_json)
            while True:
                printer.show((await tail.next()).record)
        finally:
            await tail.close()
    except asyncio.CancelledError:
        if not terminated.is_set():
            raise  # Ctrl-C: asyncio.run turns it into KeyboardInterrupt, which tail ends


class _TokenPrinter:
    """Deltas as running text; a stream's end closes its line, a restart or an error is a
    line of its own."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.mid_line = False

    def show(self, record: TokenRecord) -> None:
        if self.as_json:
            click.echo(_json_line(record.to_json()))
            return
        if record.kind == DELTA:
            if record.text:
                click.echo(record.text, nl=False)  # flushes: text shows as it comes
                self.mid_line = not record.text.endswith("\n")
            return
        if self.mid_line:  # END, or a new stream after one that never ended (a crash)
            click.echo()
            self.mid_line = False
        if record.kind == RESTARTED:
            click.echo(f"[restarted: {record.stream} — previous partial text void]")
        elif record.kind == STREAM_ERROR:
            click.echo(f"[error: {record.stream}: {record.text}]")


# -- reading ----------------------------------------------------------------------------


async def _open_store(settings: Settings) -> KafkaEventStore:
    """A store that owns no partition: it writes nothing and fences nobody."""
    topic = load_topics(settings).name(EVENTS)
    what = "connecting the event reader"
    try:
        return await wait_for(KafkaEventStore.open(settings, owned=[], topic=topic),
                                      settings.request_timeout_s + _TOPIC_WAIT_S + 1)
    except (KafkaError, TimeoutError) as exc:
        error = translate(exc, what)
        if not isinstance(error, UnavailableError):
            raise error from exc
        raise UnavailableError(
            f"{what}: Kafka at {settings.kafka_bootstrap} did not answer "
            f"({type(exc).__name__}: {exc or 'timed out'}); run `ares dev up` for a local "
            "broker or set ARES_KAFKA_BOOTSTRAP") from exc


async def _read(store: KafkaEventStore, agent_id: str) -> list[Event]:
    try:
        return await store.read(agent_id)
    except KafkaError as exc:
        raise translate(exc, f"reading stream {agent_id!r} from {store.topic}") from exc


# -- rendering --------------------------------------------------------------------------


def _view_lines(view: AgentView) -> list[str]:
    """The human status of one agent: a few labelled lines."""
    tokens, tasks = view.tokens, view.tasks
    head = [view.status, f"incarnation {view.incarnation}", f"restarts {view.restarts}"]
    if view.worker:
        head.append(f"worker {view.worker}")
    lines = [
        f"agent     {view.agent_id} ({view.kind})",
        "status    " + " · ".join(head),
        f"version   {view.version} · last event {_when(view.last_event_time)} "
        f"({_ago(view.last_event_time, datetime.now(UTC))}) {view.last_event_type or ''}"
        .rstrip(),
    ]
    if view.parent_id is not None:
        lines.append(f"parent    {view.parent_id} (its team: ares agents tree "
                     f"{view.parent_id})")
    if view.delegated_to:
        lines.append(f"children  {len(view.delegated_to)} delegated to (the team: ares agents "
                     f"tree {view.agent_id})")
    if view.quarantine_reason:
        lines.append(f"quarantine {view.quarantine_reason} (clear it: ares agents resume "
                     f"{view.agent_id})")
    if view.last_death is not None:
        lines.append(f"last death {view.last_death.describe()} at "
                     f"{_when(view.last_death.at)}")
    current = (f"{view.current_task} ({view.task_state})" if view.current_task else "none")
    lines.append(f"task      {current} · {tasks.assigned} assigned, {tasks.completed} "
                 f"completed, {tasks.failed} failed, {len(tasks.pending)} pending")
    lines.append(f"tokens    spent {tokens.spent_tokens:,} ({tokens.calls} calls) · saved "
                 f"{tokens.reused_tokens:,} ({tokens.reused_calls} calls re-used) · spent "
                 f"twice {tokens.spent_twice}")
    if view.waiting_for is not None:
        lines.append(f"waits for {_waits(view.waiting_for)}")
    for call in view.in_doubt:
        lines.append(f"in doubt  {call.call_id} (tool {call.tool}, task {call.task_id}): "
                     f"{call.reason}")
    if view.in_doubt:
        lines.append(f"          resolve: ares agents resolve {view.agent_id} --call CALL_ID "
                     f"--as done|retry|skip")
    return lines


def _views_table(views: list[AgentView]) -> Table:
    # The PARENT column only when teams are in use: a fleet without one reads as before.
    teams = any(v.parent_id is not None for v in views)
    table = _table("AGENT", "KIND", "STATUS", "INC", "RESTARTS", "WORKER", "VERSION", "TASK",
                   "TOKENS", "TWICE", "IN DOUBT", "WAITS FOR", "LAST EVENT",
                   *(("PARENT",) if teams else ()))
    now = datetime.now(UTC)
    for v in views:
        task_text = "-" if v.current_task is None else f"{_short(v.current_task)} ({v.task_state})"
        table.add_row(v.agent_id, v.kind, v.status, str(v.incarnation), str(v.restarts),
                      v.worker or "-", str(v.version), task_text, f"{v.tokens.spent_tokens:,}",
                      str(v.tokens.spent_twice), str(len(v.in_doubt)) if v.in_doubt else "-",
                      "-" if v.waiting_for is None else _waits(v.waiting_for, brief=True),
                      _ago(v.last_event_time, now),
                      *((v.parent_id or "-",) if teams else ()))
    return table


def tree_lines(tree: TeamTree) -> list[str]:
    """The human team tree: one line per member, indented under its parent with ├─ └─
    (what the log holds is escaped: one safe terminal line per member)."""
    lines = []
    for path, node in tree.walk():
        indent = "".join("   " if last else "│  " for last in path[:-1])
        branch = "" if not path else ("└─ " if path[-1] else "├─ ")
        lines.append(indent + branch + _member_text(node.member))
    return lines


def _member_text(m: Member) -> str:
    task = "no task" if m.task_id is None else f"task {one_line(m.task_id)}"
    return (f"{one_line(m.agent_id)} ({one_line(m.kind)}) · {m.status} · incarnation "
            f"{m.incarnation} · {task} · tokens {m.tokens_spent:,} spent, "
            f"{m.tokens_reused:,} reused")


def _waits(w: WaitingFor, *, brief: bool = False) -> str:
    """What a task waits for, in words: "signal 'approved' or 'rejected' (approval) since
    10:02:03 (5m ago), until 11:02:03"."""
    now = datetime.now(UTC)
    since = datetime.fromtimestamp(w.since, UTC)
    what = (" or ".join(repr(n) for n in w.names) if w.names else "a timer")
    text = f"{'signal ' if w.names else ''}{what}"
    if w.kind == "approval":
        text += " (approval)"
    text += f" since {_when(since)} ({_ago(since, now)})"
    if w.deadline is not None:
        text += f", until {_when(datetime.fromtimestamp(w.deadline, UTC))}"
    if brief:
        return text
    return f"{text} · task {w.task_id}"


def _genealogy_table(agent_id: str, incarnations: list[Incarnation]) -> Table:
    table = _table("INC", "PARENT", "STARTED", "LIFETIME", "END", "CAUSE", "WORKER",
                   "RECOVERY")
    table.title = f"{agent_id}: {len(incarnations)} incarnation(s)"
    table.title_justify = "left"
    for inc in incarnations:
        end = inc.end or "running"
        if inc.quarantined:
            end += f", quarantined ({inc.quarantined})"
        cause = inc.cause_of_death or (f"stop: {inc.stop_reason}" if inc.stop_reason else "-")
        lifetime = "-" if inc.lifetime_s is None else f"{inc.lifetime_s:.1f}s"
        table.add_row(str(inc.number), "-" if inc.parent is None else str(inc.parent),
                      _when(inc.started_at), lifetime, end, cause, inc.worker or "-",
                      _recovery(inc))
    return table


def _recovery(inc: Incarnation) -> str:
    record = inc.recovery_record
    if record is None:
        return "-"
    parts = [f"snapshot v{record.snapshot_version}" if record.snapshot_version
             else "full replay", f"{record.events_replayed} replayed"]
    if record.recovery_s is not None:
        parts.append(f"{record.recovery_s * 1000:.0f} ms")
    if record.verified is not None:
        parts.append("verified" if record.verified else "NOT verified")
    if inc.attempts > 1:
        parts.append(f"{inc.attempts} attempts")
    return ", ".join(parts)


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _stdout() -> Console:
    # Not a terminal (a pipe, a file): wide enough that rows are never folded.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 240)


def _when(when: datetime | None) -> str:
    if when is None:
        return "-"
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _ago(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    seconds = max((now - when).total_seconds(), 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _short(task_id: str, width: int = 12) -> str:
    return task_id if len(task_id) <= width else task_id[:width - 1] + "…"


def _json_line(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _note(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, style="dim")
