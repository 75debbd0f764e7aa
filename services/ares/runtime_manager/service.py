"""``ares run runtime-manager``: the partition owner, the agent host and their heartbeats."""

from __future__ import annotations

import os
import socket
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from ares.agents.host_api import AgentServices
from ares.agents.registry import build_registry
from ares.budgets.view import KafkaBudgetView
from ares.config import Settings
from ares.events.kafka.dlq import RUNTIME_MANAGER, DeadLetters
from ares.events.kafka.errors import translate
from ares.llm.kafka_telemetry import KafkaTelemetry
from ares.llm.telemetry import NullTelemetry, OpenBudget
from ares.runtime_manager.guard import ResurrectionGuard
from ares.runtime_manager.heartbeats import HeartbeatEmitter
from ares.runtime_manager.host import AgentHost, HostConfig
from ares.runtime_manager.owner import HEARTBEAT_INTERVAL_MS, PartitionOwner
from ares.runtime_manager.shutdown import ShutdownBudget
from ares.service import Service
from ares.topics import HEARTBEATS, TopicPlan


def default_worker_id(instance_id: str | None) -> str:
    return instance_id or f"{socket.gethostname()}-{os.getpid()}"


class RuntimeManager(Service):
    """One worker: owns partitions, hosts their agents, says it is alive."""

    name = "runtime-manager"

    def __init__(self, settings: Settings, plan: TopicPlan, *, agents: Sequence[str] = (),
                 instance_id: str | None = None, session_timeout_ms: int = 10_000,
                 heartbeat_interval_s: float = 1.0, host_config: HostConfig | None = None,
                 services: AgentServices | None = None,
                 guard: ResurrectionGuard | None = None,
                 shutdown: ShutdownBudget | None = None,
                 group_heartbeat_ms: int = HEARTBEAT_INTERVAL_MS,
                 leave_group_on_stop: bool = False) -> None:
        super().__init__()
        self.settings = settings
        self.worker_id = default_worker_id(instance_id)
        services = services or AgentServices.from_env()
        # LLM usage and token deltas go to ares.usage / ares.tokens, unless the caller
        # plugged in a telemetry of its own.
        self.telemetry: KafkaTelemetry | None = None
        if isinstance(services.telemetry, NullTelemetry):
            self.telemetry = KafkaTelemetry(settings, plan)
            services = replace(services, telemetry=self.telemetry)
        # Fleet budgets: the keeper's states on ares.budgets, unless the caller plugged in
        # a gate of its own.
        # Unreadable snapshots, schedules and budget states go to ares.dlq, once (commands
        # are dead-lettered in their own transactions: command_handler).
        self.letters = DeadLetters(settings, plan.name, RUNTIME_MANAGER)
        self.budget_view: KafkaBudgetView | None = None
        if isinstance(services.budget, OpenBudget):
            self.budget_view = KafkaBudgetView(settings, plan, letters=self.letters)
            services = replace(services, budget=self.budget_view)
        self.host = AgentHost(settings, plan, build_registry(agents), self.worker_id,
                              services=services, guard=guard, config=host_config)
        self.owner = PartitionOwner(settings, plan, self.host, instance_id=instance_id,
                                    session_timeout_ms=session_timeout_ms,
                                    client_id=self.worker_id, shutdown=shutdown,
                                    group_heartbeat_ms=group_heartbeat_ms,
                                    leave_group_on_stop=leave_group_on_stop)
        self.host.letters = self.owner.schedules.letters = self.letters
        self._heartbeat_topic = plan.name(HEARTBEATS)
        self._heartbeat_interval_s = heartbeat_interval_s
        self._producer: AIOKafkaProducer | None = None
        self.heartbeats: HeartbeatEmitter | None = None

    @property
    def ready(self) -> bool:
        # Not ready while an assigned partition waits (for an operator's abort, say).
        return self.owner.ready.is_set() and not self.owner.waiting_partitions

    async def on_start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap,
                                          **self.settings.kafka_options(),
                                          linger_ms=5, acks=1)
        try:
            await self._producer.start()
        except KafkaError as exc:  # one clear message (exit 4), not a traceback
            await self._producer.stop()
            self._producer = None
            raise translate(exc, "starting the runtime manager") from exc
        self.heartbeats = HeartbeatEmitter(
            self._producer, self._heartbeat_topic, self.worker_id, self._heartbeat_interval_s,
            partitions=lambda: list(self.owner.writers), beats=self.host.beats)
        try:
            await self.letters.start()
            if self.telemetry is not None:  # before the owner resumes any agent
                await self.telemetry.start()
            if self.budget_view is not None:
                await self.budget_view.start()
            await self.owner.start()
        except BaseException:  # exit 4 with a message, and no client left unclosed
            await self._producer.stop()
            self._producer = None
            if self.telemetry is not None:
                await self.telemetry.stop()
            if self.budget_view is not None:
                await self.budget_view.stop()
            await self.letters.stop()
            raise
        self.heartbeats.start()

    def background(self) -> dict[str, Coroutine[Any, Any, None]]:
        # The owner runs its consume loop itself (its stop cancels it under its lock, never
        # mid-batch); watched here, so its crash ends the service with its error.
        return {"partition-owner": self.owner.wait_stopped()}

    async def on_stop(self) -> None:
        # Heartbeats go on through the drain ("stopping"): silence would read as a loss.
        await self.owner.stop()

    async def on_shutdown(self) -> None:
        if self.heartbeats is not None:
            await self.heartbeats.stop()
        if self._producer is not None:
            await self._producer.stop()
        if self.telemetry is not None:  # after the owner stopped: no agent calls an LLM
            await self.telemetry.stop()
        if self.budget_view is not None:
            await self.budget_view.stop()
        await self.letters.stop()
