"""A chaos run: steady load, seeded faults, then every promise checked from outside.

1. an isolated broker (and PostgreSQL when the replay reader runs) in the run's work
   directory, toxiproxy in front of every runtime manager, topics under a fresh prefix;
2. runtime managers (and the health checker, compactor and replay reader when this
   installation has them) as real ``ares run`` processes, restarted when they die, as a
   supervisor (Kubernetes) would;
3. the load (``ares.chaos.load``) while the faults of the seeded schedule are injected and
   healed (``ares.chaos.faults``);
4. every fault healed, the load stopped, then the run settles: it waits (bounded) until the
   promises hold or the settle time is over, and checks them (``ares.chaos.invariants``)
   plus the integrity audit of the whole log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from ares.chaos import rebalances
from ares.chaos.brokers import busiest_coordinator, busiest_leader, until_in_sync
from ares.chaos.cluster import ChaosCluster, Service, ServiceSpec
from ares.chaos.faults import Fault, FaultKind, Targets, by_kind, schedule
from ares.chaos.hanging import HangingCheck, find_hanging, until_old_enough
from ares.chaos.invariants import Findings, check
from ares.chaos.load import Load, LoadShape
from ares.config import Settings
from ares.devenv.environment import topic_environment
from ares.devenv.process import tail
from ares.errors import AresError, UnavailableError
from ares.events.kafka.groups import runtime_group, until_group_settled
from ares.events.kafka.partition_writer import transactional_id
from ares.events.kafka.retry import connect
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event
from ares.examples import evidence
from ares.service import SUPPORTING_SERVICES
from ares.tasks import cancel_and_wait
from ares.topics import EVENTS, SNAPSHOTS, TopicPlan, apply_topics, load_topics
from ares.topics.loader import ENV_ENVIRONMENT

log = logging.getLogger(__name__)
RESTART_DELAY_S = 2.0  # the supervisor's pause before restarting a service that died
MAX_EXITS_LISTED = 100  # unexpected exits the report quotes
STUCK_SETTLE_S = 30.0  # settling after the load could not stop
Progress = Callable[[str], None]
# Violations that may still resolve while the fleet catches up after the last fault.
SETTLING = frozenset({"task_not_finished", "dead_without_verdict", "email_missing",
                      "acked_event_lost", "acked_task_lost", "agent_lost"})


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    faults: int = 50
    seed: int | None = None
    span_s: float | None = None  # default: 2.5 s per fault, at least 30 s
    runtime_managers: int = 3
    partitions: int = 6
    brokers: int = 1  # 3: a KRaft cluster, RF 3 / min ISR 2, and the cluster's faults
    without: frozenset[FaultKind] = frozenset()  # kinds left out of the schedule
    shape: LoadShape = field(default_factory=LoadShape)
    settle_timeout_s: float = 240.0
    optional_services: bool = True
    use_toxiproxy: bool = True
    workdir: Path | None = None
    keep_workdir: bool = False

    @property
    def span(self) -> float:
        return self.span_s if self.span_s is not None else max(30.0, 2.5 * self.faults)


@dataclass(slots=True)
class ChaosReport:
    seed: int
    faults_requested: int
    faults_injected: int = 0
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    # Kafka's find-hanging on every broker after the run: what it listed, how it was run.
    hanging: HangingCheck = field(default_factory=HangingCheck)
    # Per kind of worker fault: {"faults", "rebalances", "max"} (ares.chaos.rebalances).
    rebalances_per_worker_fault: dict[str, dict[str, int]] = field(default_factory=dict)
    rebalances: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    outcome: dict[str, Any] = field(default_factory=dict)
    services: dict[str, int] = field(default_factory=dict)  # name -> times started
    unexpected_exits: list[str] = field(default_factory=list)  # the first MAX_EXITS_LISTED
    unexpected_exit_count: int = 0
    proxy: str = ""
    settled_s: float | None = None  # from "all healed" to "every promise holds"
    duration_s: float = 0.0
    workdir: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "faults_requested": self.faults_requested,
                "faults_injected": self.faults_injected, "faults_by_kind": self.faults_by_kind,
                "violations": self.violations,
                "hanging_transactions": self.hanging.transactions,
                "hanging_transactions_check": self.hanging.to_json(),
                "rebalances_per_worker_fault": self.rebalances_per_worker_fault,
                "rebalances": self.rebalances,
                "load": self.load, "outcome": self.outcome,
                "services": self.services, "unexpected_exit_count": self.unexpected_exit_count,
                "unexpected_exits": self.unexpected_exits,
                "proxy": self.proxy, "settled_s": self.settled_s,
                "duration_s": round(self.duration_s, 1), "workdir": self.workdir,
                "faults": self.faults}


def available_services() -> list[str]:
    """The services chaos starts beside the runtime managers (``ares run <name>``)."""
    return list(SUPPORTING_SERVICES)


def _instance_id(spec: ServiceSpec) -> str:
    """A runtime manager's ``--instance-id`` (its static member id in the group)."""
    args = spec.args
    return args[args.index("--instance-id") + 1] if "--instance-id" in args else ""


def _specs(options: ChaosOptions, optional: list[str]) -> list[ServiceSpec]:
    # `ares run`'s own defaults (session, heartbeats, the health checker's lost-worker
    # removal): the run proves what users get, not a tuning of its own.
    specs = [ServiceSpec(f"runtime-manager-{i}", [
        "runtime-manager", "--instance-id", f"chaos-rm-{i}"], proxied=True)
        for i in range(1, options.runtime_managers + 1)]
    for name in optional:
        args = [name, "--http-port", "0"] if name == "replay-reader" else [name]
        specs.append(ServiceSpec(name, args, proxied=name == "health-checker",
                                 postgres=name == "replay-reader"))
    return specs


def _workdir(options: ChaosOptions, stamp: str) -> Path:
    if options.workdir is not None:
        path = options.workdir / stamp
    else:
        # As root the database runs as `postgres`, which must traverse the path: /var/tmp.
        base = Path("/var/tmp") if os.geteuid() == 0 else Path(tempfile.gettempdir())
        path = base / f"ares-chaos-{stamp}"
    path.mkdir(parents=True, exist_ok=True)
    return path


async def run_chaos(options: ChaosOptions, progress: Progress) -> ChaosReport:
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    report = ChaosReport(seed=seed, faults_requested=options.faults)
    progress(f"seed {seed} (replay this run with --seed {seed})")
    started = time.monotonic()
    stamp = f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{seed}"
    workdir = _workdir(options, stamp)
    report.workdir = str(workdir)
    optional = available_services() if options.optional_services else []
    specs = _specs(options, optional)
    cluster = ChaosCluster(workdir, specs, with_postgres="replay-reader" in optional,
                           use_toxiproxy=options.use_toxiproxy, brokers=options.brokers)
    failed = True
    try:
        await _run(cluster, options, report, progress)
        failed = bool(report.violations)
    finally:
        report.duration_s = time.monotonic() - started
        progress("stopping the services, the broker and the proxies")
        await cluster.close()
        report.services = {name: s.starts for name, s in cluster.services.items()}
        if not failed and not options.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return report


async def _start(cluster: ChaosCluster, options: ChaosOptions, report: ChaosReport,
                 progress: Progress) -> tuple[Settings, TopicPlan, Path]:
    """Proxies, brokers, database, topics and services up, the runtime group formed."""
    brokers = (f"a {cluster.brokers}-node KRaft cluster" if cluster.brokers > 1
               else "an isolated broker")
    progress(f"starting proxies, {brokers}{' and PostgreSQL' if cluster.postgres else ''}"
             f" in {cluster.workdir}")
    await cluster.start_proxies()
    report.proxy = cluster.proxy_note
    await cluster.start_broker()
    await cluster.start_postgres()
    prefix = f"chaos-{report.seed}."
    settings = Settings(kafka_bootstrap=cluster.bootstrap, topic_prefix=prefix,
                        request_timeout_s=10.0)
    topic_env = {"ARES_TOPIC_PARTITIONS": str(options.partitions)}
    if (environment := topic_environment(cluster.brokers)) is not None:
        topic_env[ENV_ENVIRONMENT] = environment  # RF 3, min.insync.replicas 2
    plan = load_topics(settings, env={**os.environ, **topic_env})
    await apply_topics(plan, settings)
    ledger = cluster.workdir / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    cluster.start_services({
        **os.environ, **topic_env, "ARES_TOPIC_PREFIX": prefix, "ARES_HTTP_PORT": "0",
        "ARES_LOG_LEVEL": "info", "PYTHONUNBUFFERED": "1",
        evidence.LEDGER_DIR_ENV: str(ledger)})
    progress(f"services: {', '.join(cluster.services)} ({cluster.proxy_note})")
    await _until_group(settings, options.runtime_managers, cluster)
    return settings, plan, ledger


async def _run(cluster: ChaosCluster, options: ChaosOptions, report: ChaosReport,
               progress: Progress) -> None:
    settings, plan, ledger = await _start(cluster, options, report, progress)
    prefix = settings.topic_prefix
    targets = Targets(services=list(cluster.services), proxied=cluster.proxied, broker=True,
                      postgres=cluster.postgres is not None, brokers=cluster.brokers,
                      without=options.without)
    faults = schedule(report.seed, options.faults, options.span, targets)
    load = Load(replace(settings, kafka_bootstrap=cluster.load_bootstrap), plan,
                options.shape, prefix=prefix.rstrip("."), seed=report.seed)
    supervisor = _Supervisor(cluster, report)
    injector = _Injector(cluster, progress, BrokerTargets(
        bootstrap=cluster.bootstrap, events_topic=plan.name(EVENTS),
        group=runtime_group(settings),
        transactional_ids=[transactional_id(plan.name(EVENTS), p)
                           for p in range(plan.partitions)]))
    load_task = asyncio.create_task(load.run(), name="chaos-load")
    watch = asyncio.create_task(supervisor.run(), name="chaos-supervisor")
    load_started = time.time()
    try:
        progress(f"load running; {len(faults)} faults over {options.span:.0f}s")
        await injector.run(faults)
        healed_at = time.monotonic()
        report.faults = [f.to_json() for f in injector.injected]
        report.faults_injected = len(injector.injected)
        report.faults_by_kind = by_kind(injector.injected)
        progress("every fault injected and healed: stopping the load")
        load.stop()
        await _heal_all(cluster)
        unanswered = await _stop_load(load, load_task, options.settle_timeout_s, progress)
        report.load = load.summary()
        progress("settling: waiting for every task and every agent")
        settle_start = time.monotonic()
        # Requests unanswered 240 s after the last fault healed mean a partition waits for
        # an operator (a hanging transaction): more settling cannot help, a short look will.
        settle_s = min(options.settle_timeout_s, STUCK_SETTLE_S) if unanswered else (
            options.settle_timeout_s)
        findings, streams = await _settle(settings, plan, load, ledger, settle_s)
        if not findings.violations:
            report.settled_s = round(time.monotonic() - settle_start, 1)
        progress(f"auditing {sum(len(e) for e in streams.values())} events")
        audit = await _audit(settings, plan)
        findings = check(streams, load.acks, evidence.read_lines(ledger / evidence.LLM_CALLS),
                         evidence.read_lines(ledger / evidence.SIDE_EFFECTS), audit)
        storms = await _judge(cluster, options, report, injector.strikes, load_started,
                              healed_at, runtime_group(settings), progress)
        report.violations = (findings.violations + unanswered + report.hanging.violations
                             + storms)
        report.outcome = findings.to_json()
    finally:
        load.stop()
        supervisor.stop()
        await cancel_and_wait(load_task, watch, ignore_errors=True)
        await load.close()


async def _judge(cluster: ChaosCluster, options: ChaosOptions, report: ChaosReport,
                 strikes: list[rebalances.Strike], load_started: float, healed_at: float,
                 group: str, progress: Progress) -> list[str]:
    """Beyond our invariants: Kafka's find-hanging on every broker, and the runtime
    group's rebalances charged to the worker faults; the storms, which are violations."""
    await until_old_enough(healed_at)
    progress(f"asking Kafka's find-hanging on broker(s) {cluster.node_ids}")
    report.hanging = await find_hanging(cluster.bootstrap, cluster.node_ids)
    events = await asyncio.to_thread(rebalances.read_group_log,
                                     [node.log_file for node in cluster.kafka.nodes], group)
    charges = rebalances.charge(strikes, events, options.runtime_managers,
                                {spec.name: instance for spec in cluster.specs
                                 if (instance := _instance_id(spec))})
    report.rebalances_per_worker_fault = rebalances.per_kind(charges)
    report.rebalances = rebalances.to_json(charges, events, load_started, time.time())
    return rebalances.storms(charges)


async def _stop_load(load: Load, task: asyncio.Task[None], timeout_s: float,
                     progress: Progress) -> list[str]:
    """Wait for the requests in flight; those still unanswered after ``timeout_s`` (with
    every fault healed) are violations of their own, and the run goes on to its checks
    and its report instead of ending without one."""
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if done:
        task.result()  # the load's own failure, if any, is the run's
        return []
    unanswered = [f"request_unanswered: {what}" for what in load.unanswered()]
    progress(f"{len(unanswered)} request(s) still unanswered {timeout_s:.0f}s after the "
             "last fault healed: stopping the load and checking what was acknowledged")
    await cancel_and_wait(task)
    return unanswered or ["request_unanswered: the load did not stop (no request in flight)"]


# -- faults ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerTargets:
    """What the cluster's faults aim at: found when each strikes."""

    bootstrap: str  # the brokers' direct listeners (the observer's)
    events_topic: str
    group: str
    transactional_ids: list[str]


class _Injector:
    def __init__(self, cluster: ChaosCluster, progress: Progress,
                 aims: BrokerTargets) -> None:
        self.cluster = cluster
        self.progress = progress
        self.aims = aims
        self.injected: list[Fault] = []
        self.strikes: list[rebalances.Strike] = []  # each fault's start and heal (wall)
        self._locks: dict[str, asyncio.Lock] = {}

    async def run(self, faults: list[Fault]) -> None:
        t0 = time.monotonic()

        async def one(fault: Fault) -> None:
            await asyncio.sleep(max(0.0, fault.at_s - (time.monotonic() - t0)))
            lock = self._locks.setdefault(fault.lock, asyncio.Lock())
            async with lock:  # one fault at a time per target
                started = time.time()
                await self._inject(fault, time.monotonic() - t0)
                self._struck(fault.index, started)

        await asyncio.gather(*(one(f) for f in faults))

    def _struck(self, index: int, started: float) -> None:
        hit = next((f for f in reversed(self.injected) if f.index == index), None)
        if hit is not None:  # as injected: a broker kill names the node it hit
            self.strikes.append(rebalances.Strike(hit.index, hit.kind, hit.target, started,
                                                  time.time()))

    async def _inject(self, fault: Fault, at: float) -> None:
        cluster, kind = self.cluster, fault.kind
        self.progress(f"fault {fault.describe()} (injected at {at:.1f}s)")
        if kind is FaultKind.SIGKILL:
            service = cluster.services[fault.target]
            await asyncio.to_thread(service.kill)
            self.injected.append(fault)
            await asyncio.sleep(fault.duration_s)
            service.start()
        elif kind is FaultKind.SIGSTOP:
            service = cluster.services[fault.target]
            service.signal(signal.SIGSTOP)
            self.injected.append(fault)
            await asyncio.sleep(fault.duration_s)
            service.signal(signal.SIGCONT)
        elif kind in (FaultKind.BROKER_KILL, FaultKind.LEADER_KILL, FaultKind.COORDINATOR_KILL):
            node = await self._aim(kind)
            await cluster.kill_broker(node)
            # The report names the broker that was hit (the schedule only said "kafka").
            self.injected.append(fault if node is None else replace(fault, target=f"node-{node}"))
            await asyncio.sleep(fault.duration_s)
            await cluster.start_broker()
        elif kind is FaultKind.ROLLING_RESTART:
            self.injected.append(fault)
            for node in cluster.node_ids:
                self.progress(f"rolling restart: broker {node}")
                await cluster.stop_broker(node)
                await cluster.start_broker()
                took = await until_in_sync(self.aims.bootstrap, cluster.brokers)
                self.progress(f"rolling restart: broker {node} back, in sync after {took:.1f}s")
        elif kind is FaultKind.POSTGRES_STOP:
            await cluster.stop_postgres()
            self.injected.append(fault)
            await asyncio.sleep(fault.duration_s)
            await cluster.start_postgres()
        else:
            await self._network(fault)

    async def _aim(self, kind: FaultKind) -> int | None:
        """The broker a kill strikes: the busiest leader or coordinator (on one broker,
        the broker); None (the first) if the cluster could not say."""
        if self.cluster.brokers == 1:
            return None
        aims = self.aims
        try:
            if kind is FaultKind.LEADER_KILL:
                node = await busiest_leader(aims.bootstrap, aims.events_topic)
            else:
                node = await busiest_coordinator(aims.bootstrap, aims.group,
                                                 aims.transactional_ids)
        except Exception as exc:  # the cluster mid-failover: strike the first broker
            log.info("%s: no target found (%r), the first broker is hit", kind, exc)
            node = None
        self.progress(f"{kind}: broker {node if node is not None else 'first (none found)'}")
        return node

    async def _network(self, fault: Fault) -> None:
        proxies = self.cluster.proxies
        routes = self.cluster.routes_of(fault.target)
        if fault.kind in (FaultKind.NET_LATENCY, FaultKind.BROKER_SLOW):
            await asyncio.gather(*(proxies.latency(r, fault.latency_ms) for r in routes))
        elif fault.kind is FaultKind.NET_RESET:
            await asyncio.gather(*(proxies.reset(r) for r in routes))
        else:  # NET_PARTITION, BROKER_PARTITION
            await asyncio.gather(*(proxies.partition(r) for r in routes))
        self.injected.append(fault)
        await asyncio.sleep(fault.duration_s)
        await asyncio.gather(*(proxies.heal(r) for r in routes))


class _Supervisor:
    """Restarts a service that died on its own (and records it), as Kubernetes would."""

    def __init__(self, cluster: ChaosCluster, report: ChaosReport) -> None:
        self.cluster = cluster
        self.report = report
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    async def run(self) -> None:
        while not self._stopped:
            for service in self.cluster.services.values():
                if not service.alive and not service.down_by_fault:
                    self._record(service)
                    await asyncio.sleep(RESTART_DELAY_S)
                    if not service.alive and not service.down_by_fault:
                        service.start()
            await asyncio.sleep(0.5)

    def _record(self, service: Service) -> None:
        code = None if service.proc is None else service.proc.returncode
        self.report.unexpected_exit_count += 1
        if len(self.report.unexpected_exits) >= MAX_EXITS_LISTED:
            return
        last = [line for line in tail(service.log, 8).splitlines() if line.strip()]
        self.report.unexpected_exits.append(
            f"{service.name} exited with {code} (start #{service.starts}): "
            f"{last[-1][:300] if last else 'no output'}")


async def _heal_all(cluster: ChaosCluster) -> None:
    if cluster.broker_pid() is None:
        await cluster.start_broker()  # every broker down is started again
    if cluster.postgres is not None:
        await cluster.start_postgres()
    for route in cluster.mesh.routes:
        await cluster.proxies.heal(route.name)
    for service in cluster.services.values():
        service.signal(signal.SIGCONT)
        if not service.alive:
            service.start()


async def _until_group(settings: Settings, members: int, cluster: ChaosCluster,
                       timeout_s: float = 180.0) -> None:
    def none_exited() -> None:
        dead = [n for n, s in cluster.services.items() if not s.alive]
        if dead:
            raise _group_failure(cluster, members, f"exited: {', '.join(dead)}", dead)

    admin = await connect(
        lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap,
                                    **settings.kafka_options()),
        what="waiting for the runtime managers", settings=settings,
        timeout_s=timeout_s)
    try:
        await until_group_settled(admin, runtime_group(settings), members, settings=settings,
                                  timeout_s=timeout_s, check=none_exited)
    except UnavailableError as exc:
        raise _group_failure(cluster, members, str(exc), list(cluster.services)) from exc
    finally:
        await admin.close()


def _group_failure(cluster: ChaosCluster, members: int, why: str,
                   names: list[str]) -> AresError:
    tails = cluster.log_tails()
    return AresError(f"the runtime managers did not form a group of {members} ({why}):\n"
                     + "\n".join(f"--- {n} ---\n{tails[n]}" for n in names if n in tails))



# -- after the faults --------------------------------------------------------------------


async def _read_streams(settings: Settings, plan: TopicPlan) -> dict[str, list[Event]]:
    store = await KafkaEventStore.open(settings, owned=[], topic=plan.name(EVENTS))
    try:
        streams: dict[str, list[Event]] = {}
        async for event in store.read_all():
            streams.setdefault(event.stream_id, []).append(event)
        return streams
    finally:
        await store.close()


async def _settle(settings: Settings, plan: TopicPlan, load: Load, ledger: Path,
                  timeout_s: float) -> tuple[Findings, dict[str, list[Event]]]:
    """Poll the log until every promise holds or ``timeout_s`` is over; the last view."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            streams = await _read_streams(settings, plan)
        except AresError as exc:
            log.info("settle: reading the log failed (%s), retrying", exc)
            await asyncio.sleep(2.0)
            continue
        findings = check(streams, load.acks,
                         evidence.read_lines(ledger / evidence.LLM_CALLS),
                         evidence.read_lines(ledger / evidence.SIDE_EFFECTS))
        waiting = [v for v in findings.violations if v.split(":", 1)[0] in SETTLING]
        if not waiting or time.monotonic() > deadline:
            # Nothing left that time could heal (a broken chain stays broken).
            return findings, streams
        await asyncio.sleep(3.0)


async def _audit(settings: Settings, plan: TopicPlan) -> list[str]:
    """``ares audit verify --all``, in process: every stream's chain, versions, truncation."""
    from ares.replay_reader.audit_run import AuditScope, run_audit

    report = await run_audit(settings, AuditScope(events_topic=plan.name(EVENTS),
                                                  snapshots_topic=plan.name(SNAPSHOTS)))
    return report.lines()[:-1] if not report.ok else []
