"""Steady load for a chaos run, and a record of everything the runtime acknowledged.

* a fleet of ``example.pipeline`` agents, each given a new task (LLM steps, then one
  at-most-once e-mail) at a steady pace for as long as the faults go on;
* probe appends: one event at a time to a few plain streams through ``ares.Client``.

An append or a task counts as *acknowledged* only when its owner's OK reply reached us; the
invariants then demand it in the log. A request that fails or times out is retried with the
same identity (the same event ids, the same task id) until acknowledged, so a retry of
something already applied must be recognised as such, never applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from ares.client import Client, CommandRejectedError
from ares.commands.model import Reply
from ares.config import Settings
from ares.errors import AresError
from ares.events.model import NewEvent
from ares.tasks import wait_for
from ares.topics import TopicPlan

log = logging.getLogger(__name__)
T = TypeVar("T")
AGENT_KIND = "example.pipeline"
PROBE_EVENT = "chaos.probe"
MODULE = "ares-chaos"
EXPIRED = "expired: the sender's deadline passed"


@dataclass(frozen=True, slots=True)
class AckedAppend:
    stream_id: str
    event_id: str
    version: int


@dataclass(slots=True)
class Acks:
    """What the runtime told us it did."""

    agents: list[str] = field(default_factory=list)  # agent.start answered OK
    tasks: dict[str, list[str]] = field(default_factory=dict)  # agent -> acked task ids
    appends: list[AckedAppend] = field(default_factory=list)
    retries: int = 0  # requests sent again after a failure or a timeout
    rejected: list[str] = field(default_factory=list)  # refused outright (should not happen)

    @property
    def task_count(self) -> int:
        return sum(len(t) for t in self.tasks.values())


@dataclass(frozen=True, slots=True)
class LoadShape:
    agents: int = 8
    steps: int = 3
    step_ms: int = 150
    task_every_s: float = 4.0  # per agent
    probes: int = 4  # plain streams for the probe appends
    probe_pause_s: float = 0.05


class Load:
    def __init__(self, settings: Settings, plan: TopicPlan, shape: LoadShape,
                 prefix: str = "chaos", seed: int = 0) -> None:
        self.settings = settings
        self.plan = plan
        self.shape = shape
        self.acks = Acks()
        self.agent_ids = [f"{prefix}-agent-{i:02d}" for i in range(1, shape.agents + 1)]
        self.probe_ids = [f"{prefix}-probe-{i}" for i in range(1, shape.probes + 1)]
        self._rng = random.Random(seed)
        self._client: Client | None = None
        self._client_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        # Requests sent and not answered yet, with their failed attempts so far.
        self._in_flight: dict[str, int] = {}

    def stop(self) -> None:
        """Stop issuing new work (requests in flight still finish: they get acknowledged)."""
        self._stop.set()

    async def run(self) -> None:
        await self._ensure_client()
        await asyncio.gather(*(self._start_agent(agent) for agent in self.agent_ids))
        await asyncio.gather(self._probe_appends(),
                             *(self._agent_tasks(agent) for agent in self.agent_ids))

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    # -- one client, replaced when it breaks ---------------------------------------------

    async def _ensure_client(self) -> Client:
        async with self._client_lock:
            while self._client is None:
                client = Client(self.settings, self.plan, issuer="ares-chaos")
                try:
                    await client.start()
                    self._client = client
                except AresError as exc:
                    log.info("load: client not connected yet (%s)", exc)
                    await asyncio.sleep(1.0)
            return self._client

    async def _reset_client(self, broken: Client) -> None:
        async with self._client_lock:
            if self._client is broken:
                self._client = None
                with contextlib.suppress(Exception):
                    await broken.close()

    async def _until_acked(self, what: str, call: Callable[[Client], Awaitable[T]]) -> T:
        """Send until the owner answers; every failure is retried with the same identity."""
        self._in_flight[what] = 0
        try:
            return await self._retried(what, call)
        finally:
            self._in_flight.pop(what, None)

    def unanswered(self) -> list[str]:
        """The requests still waiting for an answer, each with its failed attempts."""
        return [f"{what} (unanswered after {failures} failed attempts)"
                for what, failures in sorted(self._in_flight.items())]

    async def _retried(self, what: str, call: Callable[[Client], Awaitable[T]]) -> T:
        failures = 0
        while True:
            self._in_flight[what] = failures
            client = await self._ensure_client()
            try:
                return await call(client)
            except CommandRejectedError as exc:
                if EXPIRED not in str(exc):
                    raise
                # Not done (the owner refused it unrun): as good as a timeout, send again.
                failures += 1
                self.acks.retries += 1
                continue
            except AresError as exc:
                failures += 1
                self.acks.retries += 1
                log.info("load: %s failed (%s), retrying", what, exc)
                if failures % 5 == 0:  # a client that keeps failing may be broken: renew it
                    await self._reset_client(client)
                await asyncio.sleep(min(0.2 * failures, 2.0))

    # -- agents and their tasks ----------------------------------------------------------

    async def _start_agent(self, agent_id: str) -> None:
        try:
            await self._until_acked(f"start {agent_id}",
                                    lambda c: c.start_agent(agent_id, AGENT_KIND))
            self.acks.agents.append(agent_id)
        except CommandRejectedError as exc:
            self.acks.rejected.append(f"agent.start {agent_id}: {exc}")

    async def _agent_tasks(self, agent_id: str) -> None:
        if agent_id not in self.acks.agents:
            return
        # Spread the agents over the period so the load is steady, not in waves.
        await self._pause(self._rng.uniform(0, self.shape.task_every_s))
        n = 0
        while not self._stop.is_set():
            n += 1
            task_id = f"task-{n:04d}"
            task = {"steps": self.shape.steps, "step_ms": self.shape.step_ms, "email": True}
            started = time.monotonic()
            try:
                await self._until_acked(f"assign {agent_id}/{task_id}",
                                        partial(_assign, agent_id=agent_id, task_id=task_id,
                                                task=task))
                self.acks.tasks.setdefault(agent_id, []).append(task_id)
            except CommandRejectedError as exc:
                self.acks.rejected.append(f"task.assign {agent_id}/{task_id}: {exc}")
            await self._pause(max(0.0, self.shape.task_every_s - (time.monotonic() - started)))

    # -- probe appends -------------------------------------------------------------------

    async def _probe_appends(self) -> None:
        n = 0
        while not self._stop.is_set():
            stream = self.probe_ids[n % len(self.probe_ids)]
            n += 1
            event = NewEvent(PROBE_EVENT, MODULE, {"n": n})  # one id for every retry
            try:
                version = await self._until_acked(
                    f"append to {stream}", partial(_append, stream_id=stream, event=event))
                self.acks.appends.append(AckedAppend(stream, event.id, version))
            except CommandRejectedError as exc:
                self.acks.rejected.append(f"events.append {stream}: {exc}")
            await self._pause(self.shape.probe_pause_s)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await wait_for(self._stop.wait(), seconds)

    def summary(self) -> dict[str, Any]:
        return {"agents": len(self.acks.agents), "tasks_acknowledged": self.acks.task_count,
                "appends_acknowledged": len(self.acks.appends), "retries": self.acks.retries,
                "rejected": list(self.acks.rejected)}


async def _assign(client: Client, *, agent_id: str, task_id: str, task: object) -> Reply:
    return await client.assign_task(agent_id, task_id, task)


async def _append(client: Client, *, stream_id: str, event: NewEvent) -> int:
    return await client.append(stream_id, [event])
