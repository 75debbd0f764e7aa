"""The agent host's commands: one function per command type, each validating the command
and answering with a reply; state changes only as appended events (the host reacts to them
once committed, ``AgentHost._on_commit``).

``HANDLERS`` maps each command type to its function; ``AgentHost.handle`` dispatches.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ares.agents.errors import AgentConfigError, UnknownAgentKindError
from ares.agents.host_api import signal_event
from ares.commands.model import (
    MAX_SIGNAL_NAME,
    MAX_SIGNAL_PAYLOAD_BYTES,
    Command,
    InvalidCommandError,
    Reply,
    ReplyStatus,
)
from ares.events.kafka.partition_writer import TransactionScope
from ares.events.model import ANY_VERSION, NewEvent
from ares.events.wire.canonical import canonical_json
from ares.lifecycle import state as lc
from ares.runtime_manager import delegations, supervision
from ares.runtime_manager.alerts import alert_record
from ares.runtime_manager.hosted import HostedAgent
from ares.topics import ALERTS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ares.runtime_manager.host import AgentHost, PartitionState

    Handler = Callable[[AgentHost, TransactionScope, PartitionState, HostedAgent | None, Command],
                       Awaitable[Reply]]

MODULE = "runtime-manager"  # the module of every event the runtime manager appends
# A verdict's metadata: the incarnation it judged (a stale one must not kill a successor).
INCARNATION_META = "ares.incarnation"


async def start(host: AgentHost, tx: TransactionScope, state: PartitionState,
                hosted: HostedAgent | None, command: Command) -> Reply:
    kind = str(command.payload["kind"])
    config_json = str(command.payload.get("config_json") or "{}")
    try:
        config = json.loads(config_json)
        host.registry.create(kind, command.stream_id, config)  # validates kind and config
    except (UnknownAgentKindError, AgentConfigError, ValueError) as exc:
        raise InvalidCommandError("invalid_agent", str(exc)) from exc
    if hosted is not None and hosted.lifecycle.is_live:
        return reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                     "already running")
    if hosted is not None and hosted.lifecycle.version > 0:
        return reply(command, ReplyStatus.REJECTED, hosted.lifecycle.version,
                     f"agent is {hosted.lifecycle.status.value}: use `ares agents resume`")
    incarnation = 1 if hosted is None else hosted.lifecycle.incarnation + 1
    version = await tx.append(command.stream_id, [NewEvent(lc.AGENT_STARTED, MODULE, {
        "kind": kind, "config_json": canonical_json(config), "incarnation": incarnation,
        "worker": host.worker_id})], ANY_VERSION)
    if hosted is None:
        state.starting.add(command.stream_id)
    return reply(command, ReplyStatus.OK, version)


async def stop(host: AgentHost, tx: TransactionScope, state: PartitionState,
               hosted: HostedAgent | None, command: Command) -> Reply:
    if hosted is None:
        return unknown(command)
    # The flag before anything else: a crash racing this stop must not resurrect.
    hosted.lifecycle = lc.mark_stop_requested(hosted.lifecycle)
    if hosted.lifecycle.status is lc.Status.STOPPED:
        return reply(command, ReplyStatus.OK, hosted.lifecycle.version, "already stopped")
    version = await tx.append(command.stream_id, [NewEvent(lc.AGENT_STOPPED, MODULE, {
        "reason": str(command.payload.get("reason") or "requested")})], ANY_VERSION)
    return reply(command, ReplyStatus.OK, version, delegations.stop_summary(hosted.lifecycle))


async def kill(host: AgentHost, tx: TransactionScope, state: PartitionState,
               hosted: HostedAgent | None, command: Command) -> Reply:
    if hosted is None:
        return unknown(command)
    cause = "killed" if command.type == "agent.kill" else str(
        command.payload.get("cause") or "declared_dead")
    judged = command.metadata.get(INCARNATION_META)
    if (command.type == "agent.declare_dead" and judged and judged.isdigit()
            and int(judged) != hosted.lifecycle.incarnation):
        # A verdict on an incarnation that is gone must not kill its successor.
        return reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                     f"stale verdict for incarnation {judged}")
    if hosted.incarnation_task is None or hosted.incarnation_task.done():
        if hosted.lifecycle.status is lc.Status.RUNNING and not hosted.running:
            # The log says running but nothing runs it here: record the death and let
            # the guard decide, as for any death.
            host.detach(supervision.death_of_unhosted(host, state, hosted, cause))
            return reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                         "not running here: death recorded")
        return reply(command, ReplyStatus.OK, hosted.lifecycle.version, "not running")
    hosted.kill_cause = cause  # before the cancel: the exit is read as this death
    hosted.incarnation_task.cancel()
    return reply(command, ReplyStatus.OK, hosted.lifecycle.version)


async def quarantine(host: AgentHost, tx: TransactionScope, state: PartitionState,
                     hosted: HostedAgent | None, command: Command) -> Reply:
    if hosted is None:
        return unknown(command)
    reason = str(command.payload.get("reason") or "requested")
    if hosted.lifecycle.status is lc.Status.QUARANTINED:
        return reply(command, ReplyStatus.OK, hosted.lifecycle.version,
                     "already quarantined")
    hosted.lifecycle = lc.mark_stop_requested(hosted.lifecycle)
    version = await tx.append(command.stream_id, [NewEvent(lc.AGENT_QUARANTINED, MODULE, {
        "reason": reason, "deaths": int(command.payload.get("deaths") or 0)})], ANY_VERSION)
    await tx.send(host.plan.name(ALERTS), alert_record(
        "agent_quarantined", command.stream_id, f"agent quarantined: {reason}",
        source=command.issuer), key=command.stream_id.encode())
    return reply(command, ReplyStatus.OK, version)


async def resume(host: AgentHost, tx: TransactionScope, state: PartitionState,
                 hosted: HostedAgent | None, command: Command) -> Reply:
    if hosted is None:
        return unknown(command)
    life = hosted.lifecycle
    if life.status not in (lc.Status.STOPPED, lc.Status.QUARANTINED):
        return reply(command, ReplyStatus.OK, life.version, f"agent is {life.status.value}")
    version = await tx.append(command.stream_id, [
        NewEvent(lc.AGENT_RESUMED, MODULE, {"reason": str(command.payload.get("reason")
                                                           or "operator")}),
        NewEvent(lc.AGENT_STARTED, MODULE, {
            "kind": life.kind, "config_json": life.config_json,
            "incarnation": life.incarnation + 1, "worker": host.worker_id}),
    ], ANY_VERSION)
    return reply(command, ReplyStatus.OK, version)


async def assign(host: AgentHost, tx: TransactionScope, state: PartitionState,
                 hosted: HostedAgent | None, command: Command) -> Reply:
    task_id = str(command.payload["task_id"])
    if hosted is None:
        if not state.started_in_this_transaction(command.stream_id):
            return unknown(command)
    else:
        life = hosted.lifecycle
        if task_id in life.finished_tasks or any(t.task_id == task_id
                                                 for t in life.pending_tasks):
            return reply(command, ReplyStatus.OK, life.version, "task already assigned")
    input_json = str(command.payload.get("input_json") or "null")
    try:
        json.loads(input_json)
    except ValueError as exc:
        raise InvalidCommandError("invalid_payload", f"task input is not JSON: {exc}") from exc
    events = [NewEvent(lc.TASK_ASSIGNED, MODULE, {"task_id": task_id,
                                                  "input_json": input_json})]
    delegated = delegations.delegated_event(task_id, command.metadata)
    if delegated is not None:  # the link back to the parent that delegated it
        events.append(delegated)
    version = await tx.append(command.stream_id, events, ANY_VERSION)
    return reply(command, ReplyStatus.OK, version)


async def snapshot(host: AgentHost, tx: TransactionScope, state: PartitionState,
                   hosted: HostedAgent | None, command: Command) -> Reply:
    if hosted is None:
        return unknown(command)
    version = await host.write_snapshot(tx, state.writer.partition, hosted)
    return reply(command, ReplyStatus.OK, version)




async def signal(host: AgentHost, tx: TransactionScope, state: PartitionState,
                 hosted: HostedAgent | None, command: Command) -> Reply:
    """``agent.signal``: ``signal.received`` once per signal id; the first wait for its name
    consumes it (now, if one waits; else whenever one does)."""
    name = str(command.payload.get("name") or "")
    signal_id = str(command.payload.get("signal_id") or "")
    payload_json = str(command.payload.get("payload_json") or "null")
    if not name or len(name) > MAX_SIGNAL_NAME or not name.isprintable():
        raise InvalidCommandError("invalid_payload", f"a signal needs a printable name of 1 "
                                  f"to {MAX_SIGNAL_NAME} characters (got {name[:40]!r})")
    if not signal_id:
        raise InvalidCommandError("invalid_payload", "a signal needs a signal_id (unique: a "
                                  "redelivery with the same id is applied once)")
    if len(payload_json.encode()) > MAX_SIGNAL_PAYLOAD_BYTES:
        raise InvalidCommandError("oversized", f"signal payload of "
                                  f"{len(payload_json.encode())} bytes, over the "
                                  f"{MAX_SIGNAL_PAYLOAD_BYTES} a signal may carry")
    try:
        json.loads(payload_json)
    except ValueError as exc:
        raise InvalidCommandError("invalid_payload", f"signal payload is not JSON: {exc}") \
            from exc
    if hosted is None:
        # Kept in the DLQ: a webhook that raced the agent's start can be re-sent from there.
        raise InvalidCommandError("unknown_agent", f"no agent {command.stream_id!r} to "
                                  f"signal {name!r} (start it with `ares agents start`)")
    life = hosted.lifecycle
    if life.knows_signal(signal_id):
        return reply(command, ReplyStatus.OK, life.version, "signal already received")
    version = await tx.append(command.stream_id, [signal_event(
        signal_id, name, canonical_json(json.loads(payload_json)), MODULE,
        issuer=command.issuer)], ANY_VERSION)
    return reply(command, ReplyStatus.OK, version)


def effect_key(command: Command) -> tuple[str, ...] | None:
    """What makes ``command``'s effect once-only (an agent started, a task id assigned, a
    signal id received...); None for commands that may act again (kill, snapshot)."""
    if command.type in ONCE_PER_STREAM:
        return (command.type, command.stream_id)
    if command.type == "task.assign":
        return (command.type, command.stream_id, str(command.payload.get("task_id")))
    if command.type == "agent.signal":
        return (command.type, command.stream_id, str(command.payload.get("signal_id")))
    return None


# Commands whose effect a stream takes once until a later event changes its state.
ONCE_PER_STREAM = frozenset({"agent.start", "agent.stop", "agent.quarantine", "agent.resume"})


def reply(command: Command, status: ReplyStatus, version: int = 0,
          message: str = "") -> Reply:
    return Reply(command.id, status, command.stream_id, version, message=message)


def unknown(command: Command) -> Reply:
    return reply(command, ReplyStatus.REJECTED,
                 message=f"no agent {command.stream_id!r} (start it with `ares agents start`)")


HANDLERS: dict[str, Handler] = {
    "agent.start": start,
    "agent.stop": stop,
    "agent.kill": kill,
    "agent.declare_dead": kill,
    "agent.quarantine": quarantine,
    "agent.resume": resume,
    "task.assign": assign,
    "snapshot.request": snapshot,
    "agent.signal": signal,
}
