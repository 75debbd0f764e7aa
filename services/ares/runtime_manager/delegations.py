"""Teams on the runtime's side: the commands a delegation causes, and what is owed after it.

Three moments, each one transaction of the owner that knows:

* **Dispatch** (the parent's owner): the SDK appends ``delegation.dispatched``; the sink adds
  the child's ``agent.start`` and ``task.assign`` to the same transaction
  (``dispatch_commands``). The assignment carries the parent link as command metadata; the
  child's owner records it as ``task.delegated`` after ``task.assigned``
  (``delegated_event``).
* **Report** (the child's owner): a delegated task that ended, or whose agent was stopped or
  quarantined, leaves a ``Report`` in the folded lifecycle; ``settle`` sends it to the
  parent as an ``agent.signal`` and appends ``delegation.reported`` in one transaction.
* **Stop** (the parent's owner): a stopped or quarantined parent owes its ``stop``-policy
  children an ``agent.stop`` (``AgentLifecycle.stops_owed``); ``settle`` sends them with
  ``delegation.stopped``.

What is owed is derived from the log, not remembered: ``settle`` runs after every commit that
leaves something owed and after a partition's recovery, so a worker that died between the
outcome and the report sends it on the next owner (the parent applies a signal id once).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ares.agents.host_api import outcome_payload
from ares.commands.model import MAX_SIGNAL_PAYLOAD_BYTES, Command
from ares.errors import AresError, FencedError
from ares.events.kafka.partition_writer import TransactionScope
from ares.events.kafka.routing import partition_for
from ares.events.model import ANY_VERSION, Event, NewEvent
from ares.lifecycle import events as ev
from ares.lifecycle.state import (
    STOP_CHILDREN,
    AgentLifecycle,
    ChildLink,
    ParentLink,
    Report,
)
from ares.topics import COMMANDS

if TYPE_CHECKING:
    from ares.runtime_manager.host import AgentHost, PartitionState
    from ares.runtime_manager.hosted import HostedAgent

log = logging.getLogger("ares.runtime_manager.host")

MODULE = "runtime-manager"
ISSUER = "runtime-manager"
# task.assign metadata: the parent link of a delegated task.
PARENT = "ares.parent"
PARENT_TASK = "ares.parent.task"
PARENT_SIGNAL = "ares.parent.signal"
PARENT_ON_STOP = "ares.parent.on_stop"
RETRY_S = 1.0
_NAMESPACE = uuid.UUID("6f1d2f0c-7a0e-4f3e-9b7e-2a51c0de7e26")


def dispatch_commands(parent_id: str, events: Sequence[NewEvent]) -> list[Command]:
    """The child's start and assignment for each ``delegation.dispatched`` in ``events``.
    Command ids derive from the event's: a retried append sends the same commands, which
    the child's owner applies once (a start of a live agent and a known task id are no-ops).
    """
    commands = []
    for event in events:
        if event.type != ev.DELEGATION_DISPATCHED:
            continue
        p = event.payload
        child = str(p["child_id"])
        commands.append(Command(
            "agent.start", child, {"kind": str(p["child_kind"]),
                                   "config_json": str(p.get("config_json") or "{}")},
            issuer=ISSUER, id=str(uuid.uuid5(_NAMESPACE, f"{event.id}/start"))))
        commands.append(Command(
            "task.assign", child, {"task_id": str(p["child_task_id"]),
                                   "input_json": str(p.get("input_json") or "null")},
            issuer=ISSUER, id=str(uuid.uuid5(_NAMESPACE, f"{event.id}/assign")),
            metadata={PARENT: parent_id, PARENT_TASK: str(p["task_id"]),
                      PARENT_SIGNAL: str(p["signal"]),
                      PARENT_ON_STOP: str(p.get("on_parent_stop") or "stop")}))
    return commands


def has_dispatch(events: Sequence[NewEvent]) -> bool:
    return any(e.type == ev.DELEGATION_DISPATCHED for e in events)


def delegated_event(task_id: str, metadata: Mapping[str, str]) -> NewEvent | None:
    """``task.delegated`` for an assignment whose command carries a parent link."""
    parent = metadata.get(PARENT)
    if not parent:
        return None
    return NewEvent(ev.TASK_DELEGATED, MODULE, {
        "task_id": task_id, "parent_id": parent,
        "parent_task_id": metadata.get(PARENT_TASK, ""),
        "signal": metadata.get(PARENT_SIGNAL, ""),
        "on_parent_stop": metadata.get(PARENT_ON_STOP, "stop")})


def report_command(child_id: str, report: Report) -> Command:
    """The ``agent.signal`` that carries ``report`` to the parent (its id, and the signal's,
    derive from the child's task: a re-sent report is applied once)."""
    link: ParentLink = report.parent
    payload = outcome_payload(child_id, report.task_id, report.status, report.output_json,
                              report.error_type, report.error)
    if len(payload.encode()) > MAX_SIGNAL_PAYLOAD_BYTES:
        payload = outcome_payload(
            child_id, report.task_id, "failed", "null", "output_too_large",
            f"the child's output is {len(report.output_json.encode())} bytes, over the "
            f"{MAX_SIGNAL_PAYLOAD_BYTES} an outcome may carry: return a reference (a key, "
            "a URL) instead of the document")
    signal_id = f"{child_id}/{report.task_id}"
    return Command("agent.signal", link.agent_id, {
        "name": link.signal, "signal_id": signal_id, "payload_json": payload},
        issuer=ISSUER, id=str(uuid.uuid5(_NAMESPACE, f"report/{signal_id}")))


def stop_command(parent_id: str, child: ChildLink) -> Command:
    return Command("agent.stop", child.child_id,
                   {"reason": f"its parent {parent_id} stopped"}, issuer=ISSUER,
                   id=str(uuid.uuid5(_NAMESPACE, f"stop/{parent_id}/{child.child_task_id}")))


def stop_summary(life: AgentLifecycle) -> str:
    """What a stop does to the agent's children, for the stop's reply (the operator sees
    which children it stops and which it leaves to finish: the seeds' stop order)."""
    stopping = [c.child_id for c in life.children if c.on_parent_stop == STOP_CHILDREN]
    going_on = [c.child_id for c in life.children if c.on_parent_stop != STOP_CHILDREN]
    parts = []
    if stopping:
        parts.append(f"stopping {len(stopping)} child(ren): {', '.join(stopping)}")
    if going_on:
        parts.append(f"{len(going_on)} detached child(ren) left to finish: "
                     f"{', '.join(going_on)}")
    return "; ".join(parts)


def owes(hosted: HostedAgent) -> bool:
    life = hosted.lifecycle
    return bool(life.reports) or bool(life.stops_owed)


async def settle(host: AgentHost, state: PartitionState, hosted: HostedAgent) -> None:
    """Send what ``hosted`` owes (reports to parents, stops to children) with the events
    that record it, one transaction per round, until nothing is owed. One loop per agent
    at a time; the commit folds the recording events in before ``submit`` returns, so each
    round sees only what is still owed."""
    if hosted.settling:
        return
    hosted.settling = True
    try:
        while owes(hosted) and host.partitions.get(hosted.partition) is state:
            try:
                await state.writer.submit(_owed_work(host, hosted))
            except FencedError:
                return  # the next owner sends it after its recovery
            except AresError as exc:
                log.warning("agent %s: delegation outcomes not sent (%s); retrying",
                            hosted.agent_id, exc)
                await asyncio.sleep(RETRY_S)
    finally:
        hosted.settling = False


def _owed_work(host: AgentHost,
               hosted: HostedAgent) -> Callable[[TransactionScope], Awaitable[None]]:
    life = hosted.lifecycle
    reports, stops = life.reports, life.stops_owed
    topic = host.plan.name(COMMANDS)
    partitions = host.plan.partitions

    async def work(tx: TransactionScope) -> None:
        events = [_reported_event(report, hosted.agent_id) for report in reports]
        if stops:
            events.append(NewEvent(ev.DELEGATION_STOPPED, MODULE, {
                "children": [c.child_id for c in stops], "reason": "parent stopped"}))
        await tx.append(hosted.agent_id, events, ANY_VERSION)
        commands = [report_command(hosted.agent_id, report) for report in reports]
        commands += [stop_command(hosted.agent_id, child) for child in stops]
        for command in commands:
            await tx.send(topic, command.encode(), key=command.stream_id.encode(),
                          partition=partition_for(command.stream_id, partitions))

    return work


def _reported_event(report: Report, child_id: str) -> NewEvent:
    return NewEvent(ev.DELEGATION_REPORTED, MODULE, {
        "task_id": report.task_id, "parent_id": report.parent.agent_id,
        "parent_task_id": report.parent.task_id, "signal": report.parent.signal,
        "signal_id": f"{child_id}/{report.task_id}", "status": report.status,
        "error": report.error})


def dispatched_children(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The ``delegation.dispatched`` payloads of ``events``, in order (the team's members
    as a parent's stream records them)."""
    return [dict(e.payload) for e in events if e.type == ev.DELEGATION_DISPATCHED]
