"""``ares run health-checker``: the service around the pure core.

Three background tasks (``background``, owned by the ``Service`` base): the feed (records
into the core), the ticker (``HealthState.due`` every ``tick_s``; carries out the actions)
and, with ``ARES_ALERT_WEBHOOK_URL``, the webhook forwarder. Actions run as tasks of their
own so a slow owner never holds up the detection of the next death; on stop, once the
loops have ended, those in flight get ``request_timeout_s`` to finish.

* verdicts and quarantines are commands (``agent.declare_dead``, ``agent.quarantine``)
  sent through ``ares.Client`` to the agent's owner, who records the death and lets its
  resurrection guard decide; the verdict names the incarnation it was reached for in the
  command metadata (``ares.incarnation``);
* alerts are Avro ``ares.v1.Alert`` records on ``ares.alerts`` (idempotent producer,
  acks=all), keyed by agent id (worker id for ``worker_lost``);
* with ``remove_lost_workers`` (``ARES_HEALTH_REMOVE_LOST_WORKERS``), a ``worker_lost``
  verdict also removes the worker's member from the runtime managers' consumer group
  (KIP-345 LeaveGroup by ``group.instance.id``, ``groups.remove_member``), beside the
  alert and without waiting for it: its partitions move at once instead of after the
  session timeout, and their new owners fence its writers. A worker that was only slow
  rejoins as a new member: expelled, its warm state is dropped (``owner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from prometheus_client import REGISTRY, CollectorRegistry

from ares.client import Client
from ares.commands.model import Command, ReplyStatus
from ares.config import Settings
from ares.errors import AresError
from ares.events.kafka.dlq import HEALTH_CHECKER, DeadLetters
from ares.events.kafka.groups import describe_group, remove_member, runtime_group
from ares.health_checker.alerts import alert_record
from ares.health_checker.config import HealthConfig
from ares.health_checker.detector import HealthState
from ares.health_checker.feed import Feed
from ares.health_checker.metrics import HealthMetrics
from ares.health_checker.model import (
    WORKER_LOST,
    Action,
    DeclareDead,
    GroupState,
    QuarantineAgent,
    RaiseAlert,
)
from ares.health_checker.webhook import WebhookForwarder, WebhookSink
from ares.service import Service
from ares.tasks import cancel_and_wait, wait_for
from ares.topics import ALERTS, TopicPlan

log = logging.getLogger(__name__)
ISSUER = "health-checker"
STABLE_GROUP_STATES = frozenset({"Stable", "Empty"})
GROUP_REFRESH_S = 1.0
MAX_ACTIONS_IN_FLIGHT = 64


class HealthChecker(Service):
    name = "health-checker"

    def __init__(self, settings: Settings, plan: TopicPlan, config: HealthConfig | None = None,
                 *, registry: CollectorRegistry = REGISTRY) -> None:
        super().__init__()
        self.settings = settings
        self.plan = plan
        self.config = config or HealthConfig()
        self.metrics = HealthMetrics(registry)
        self.state = HealthState(self.config, self.metrics)
        self.letters = DeadLetters(settings, plan.name, HEALTH_CHECKER)
        self.feed = Feed(settings, plan, self.state, self.config.rebuild_lookback_s,
                         self.letters)
        self.runtime_group = runtime_group(settings)
        self.webhook: WebhookForwarder | None = None
        if self.config.webhook_url is not None:
            self.webhook = WebhookForwarder(
                settings, plan.name(ALERTS),
                WebhookSink(self.config.webhook_url, attempts=self.config.webhook_attempts,
                            timeout_s=self.config.webhook_timeout_s), self.metrics)
        self.client = Client(settings, plan, issuer=ISSUER)
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._actions: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_ACTIONS_IN_FLIGHT)
        self._group_checked = 0.0
        self._member_ids: dict[str, str] = {}  # client id -> member id, last described
        self._removals: set[str] = set()  # worker_lost verdicts whose removal was started
        self.sent: list[Action] = []  # delivered actions, oldest first (tests, debugging)
        # lost workers taken out of the runtime's group: (worker, how, when), oldest first
        self.removed: list[tuple[str, str, float]] = []

    @property
    def ready(self) -> bool:
        return self.feed.live

    async def on_start(self) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap, enable_idempotence=True,
            acks="all", linger_ms=5, **self.settings.kafka_options())
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka_bootstrap,
                                          **self.settings.kafka_options())
        try:
            await self._producer.start()
            await self._admin.start()
            await self.client.start()
            await self.letters.start()  # what ares.dlq holds, before the first record
            await self.feed.start()
            if self.webhook is not None:
                await self.webhook.start()
        except BaseException:
            await self.stop()
            raise

    def background(self) -> dict[str, Coroutine[Any, Any, None]]:
        tasks = {"health-feed": self._consume(), "health-ticker": self._tick()}
        if self.webhook is not None:
            tasks["alert-webhook"] = self.webhook.run()
        return tasks

    async def on_shutdown(self) -> None:
        if self._actions:  # in-flight actions: a verdict already sent is not lost
            await asyncio.wait(self._actions, timeout=self.settings.request_timeout_s)
            await cancel_and_wait(*self._actions, ignore_errors=True)
        if self.webhook is not None:
            await self.webhook.stop()
        await self.feed.stop()
        await self.letters.stop()
        await self.client.close()
        if self._admin is not None:
            await self._admin.close()
            self._admin = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    # -- background tasks ----------------------------------------------------------------

    async def _consume(self) -> None:
        while True:
            try:
                await self.feed.poll()
            except KafkaError as exc:  # the broker went away: aiokafka reconnects
                log.warning("reading the heartbeats and events failed: %s", exc)
                await asyncio.sleep(1.0)

    async def _tick(self) -> None:
        last_gauges = 0.0
        while True:
            await asyncio.sleep(self.config.tick_s)
            now = time.time()
            if self.state.overdue_workers(now) and now - self._group_checked > GROUP_REFRESH_S:
                await self._describe_group(now)
            for action in self.state.due(now):
                if (self.config.remove_lost_workers and isinstance(action, RaiseAlert)
                        and action.kind == WORKER_LOST and action.id not in self._removals):
                    self._removals.add(action.id)  # once per verdict, not per alert retry
                    self._start(self._remove_member(action.details.get("worker", "")))
                await self._slots.acquire()
                task = asyncio.create_task(self._carry_out(action))
                self._actions.add(task)
                task.add_done_callback(self._actions.discard)
            if now - last_gauges >= 1.0:
                last_gauges = now
                live = sum(1 for p in self.feed.assigned if self.state.is_live(p))
                self.metrics.set_counts(self.state.counts(now), live)
                self.state.prune(now)

    async def _describe_group(self, now: float) -> None:
        """Whether the runtime managers' group is rebalancing, and who is in it."""
        self._group_checked = now
        assert self._admin is not None
        try:
            view = await describe_group(self._admin, self.runtime_group, settings=self.settings,
                                        timeout_s=self.settings.request_timeout_s)
        except (AresError, KafkaError) as exc:
            log.warning("cannot describe group %s (%s): judging workers on heartbeats alone",
                        self.runtime_group, exc)
            return
        self._member_ids = {m.client_id: m.member_id for m in view.members}
        self.state.observe_group(GroupState(view.state in STABLE_GROUP_STATES,
                                            view.client_ids, time.time()))

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._actions.add(task)
        task.add_done_callback(self._actions.discard)

    async def _remove_member(self, worker: str) -> None:
        """Take a lost worker out of the runtime's group now: the rebalance starts at once
        instead of after its session timeout. Best effort: if it fails, the session
        timeout still moves the partitions."""
        view = self.state.workers.get(worker)
        if not worker or view is None or not view.lost:
            return  # it beat again meanwhile: a member now is a live one
        assert self._admin is not None
        try:
            how = await wait_for(
                remove_member(self._admin, self.runtime_group, worker,
                              member_id=self._member_ids.get(worker)),
                self.settings.request_timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.metrics.removals.labels("failed").inc()
            log.warning("lost worker %s not removed from group %s (its session timeout "
                        "will): %r", worker, self.runtime_group, exc)
            return
        self.metrics.removals.labels(how).inc()
        self.removed.append((worker, how, time.time()))
        log.warning("lost worker %s: %s", worker,
                    f"removed from group {self.runtime_group} ({how} member)"
                    if how != "absent" else f"no longer in group {self.runtime_group}")

    # -- actions -------------------------------------------------------------------------

    async def _carry_out(self, action: Action) -> None:
        ok, reply = False, ""
        try:
            if isinstance(action, RaiseAlert):
                ok = await self._emit(action)
            else:
                ok, reply = await self._command(action)
        except (AresError, KafkaError) as exc:
            log.warning("%s not done (retried in %gs): %s", action.key,
                        self.config.retry_s, exc)
        finally:
            self._slots.release()
            self.state.completed(action, ok, time.time(), reply)
        if ok:
            self.sent.append(action)
            self._log_done(action, reply)

    async def _emit(self, alert: RaiseAlert) -> bool:
        assert self._producer is not None
        key = (alert.stream_id or alert.details.get("worker", "")).encode()
        await self._producer.send_and_wait(self.plan.name(ALERTS), alert_record(alert),
                                           key=key)
        return True

    async def _command(self, action: DeclareDead | QuarantineAgent) -> tuple[bool, str]:
        if isinstance(action, DeclareDead):
            last_seen = (None if action.last_seen is None
                         else datetime.fromtimestamp(action.last_seen, UTC))
            command = Command(
                type="agent.declare_dead", stream_id=action.agent_id, issuer=ISSUER,
                payload={"cause": action.cause, "detail": action.detail,
                         "last_seen": last_seen, "worker": action.worker},
                metadata={"ares.incarnation": str(action.incarnation),
                          "ares.health.evidence_at": f"{action.evidence_at:.6f}"})
        else:
            command = Command(type="agent.quarantine", stream_id=action.agent_id,
                              issuer=ISSUER, payload={"reason": action.reason,
                                                      "deaths": action.deaths})
        reply = await self.client.send(command)
        if reply.status is not ReplyStatus.OK:
            log.warning("%s refused by the owner: %s", action.key, reply.message)
            return False, reply.message
        return True, reply.message

    def _log_done(self, action: Action, reply: str) -> None:
        if isinstance(action, DeclareDead):
            log.warning("agent %s declared dead (%s, incarnation %d): %s; latency %.2fs%s",
                        action.agent_id, action.cause, action.incarnation, action.detail,
                        action.decided_at - action.evidence_at,
                        f"; owner: {reply}" if reply else "")
        elif isinstance(action, QuarantineAgent):
            log.warning("agent %s: quarantine requested (%s)", action.agent_id, action.reason)
        else:
            log.warning("alert %s %s: %s", action.kind, action.id, action.message)


async def wait_ready(checker: HealthChecker, timeout_s: float = 60.0) -> None:
    """Until every assigned partition is rebuilt (tests and ``ares run``'s readiness)."""
    deadline = time.monotonic() + timeout_s
    while not checker.ready:
        if time.monotonic() > deadline:
            raise AresError(f"the health checker did not become ready in {timeout_s:g}s")
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(checker.wait_stopped(), 0.1)
        if checker.ended:
            raise AresError("the health checker stopped before it was ready")
