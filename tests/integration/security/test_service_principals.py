"""Every service under a principal of its own, with exactly the ACLs of `ares acls plan`.

A broker of its own (never the shared one): SASL_SSL with SCRAM-SHA-512, the
StandardAuthorizer, no access without an ACL, one SCRAM user per service of
``ares.security.acls.SERVICES``. Then, with the real CLI and the real services:

* the super user sets the ACLs with `ares acls apply` (the broker then holds exactly the
  plan; a second run creates nothing);
* the topics principal creates the topics (`ares topics apply`, the chart's hook);
* the runtime manager, the health checker, the budget keeper and the replay reader run as
  processes under their principals (password files), the compactor and the operator's
  commands run through the CLI, an external system sends commands through ``ares.Client``:
  each does its job;
* each principal is refused writing what it must not (the event log, the snapshots, and
  commands for the services that send none), and nothing reaches the log: end offsets
  unchanged.

Nothing skips: without Java, openssl or keytool the fixture fails with the reason.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.request import urlopen

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.errors import KafkaError

from ares.chaos.toxiproxy import free_port
from ares.client import Client
from ares.config import Settings
from ares.devenv.kafka import KafkaLayout
from ares.devenv.process import tail
from ares.devenv.security import MECHANISM, ScramUser, SecureBroker, make_tls
from ares.errors import AresError
from ares.events.kafka.reader import new_consumer
from ares.events.model import NewEvent
from ares.health_checker.alerts import read_alerts
from ares.logs import quiet_aiokafka
from ares.security.acls import SERVICES, plan_acls, writers
from ares.security.admin import describe_acls
from ares.tasks import wait_for
from ares.topics import (
    ALERTS,
    COMMANDS,
    EVENTS,
    REPLIES,
    SNAPSHOTS,
    SUMMARIES,
    TopicPlan,
    inspect_topics,
    load_topics,
)
from tests.support.processes import ares_env
from tests.support.runtime import wait_for_events

PARTITIONS = 2
LONG_RUNNING = ("runtime-manager", "health-checker", "budget-keeper", "replay-reader")


@dataclass
class Mesh:
    broker: SecureBroker
    admin: ScramUser
    users: dict[str, ScramUser]  # service -> its principal's user
    prefix: str
    home: Path
    ports: dict[str, int] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def settings(self, user: ScramUser | None, **overrides: object) -> Settings:
        values: dict[str, object] = {"topic_prefix": self.prefix, "request_timeout_s": 20.0}
        return self.broker.settings(user, **{**values, **overrides})

    @property
    def admin_settings(self) -> Settings:
        return self.settings(self.admin)

    def plan(self) -> TopicPlan:
        return load_topics(self.admin_settings, env={"ARES_TOPIC_PARTITIONS": str(PARTITIONS)})

    def env(self, service: str | None, **extra: str) -> dict[str, str]:
        """The environment of an ares process running as ``service``'s principal (None: the
        super user), its password in a file."""
        user = self.admin if service is None else self.users[service]
        password_file = self.home / f"{user.name}.password"
        password_file.write_text(user.password)
        password_file.chmod(0o600)
        env = ares_env(self.settings(None), PARTITIONS,
                       ARES_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                       ARES_KAFKA_SASL_MECHANISM=MECHANISM,
                       ARES_KAFKA_SASL_USERNAME=user.name,
                       ARES_KAFKA_SASL_PASSWORD_FILE=str(password_file),
                       ARES_KAFKA_SSL_CA_FILE=str(self.broker.tls.ca_pem),
                       ARES_REQUEST_TIMEOUT_S="20", **extra)
        env.pop("ARES_KAFKA_SASL_PASSWORD", None)
        return env

    @property
    def secrets(self) -> list[str]:
        return [u.password for u in (self.admin, *self.users.values())] + [
            self.broker.tls.password]


def cli(mesh: Mesh, service: str | None, *args: str, timeout: float = 120,
        **extra: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "ares", *args], env=mesh.env(service, **extra),
                            capture_output=True, text=True, timeout=timeout, check=False)
    print(f"[{service or 'super user'}] ares {' '.join(args)}: exit {result.returncode}\n"
          f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    leaked = [s[:6] + "..." for s in mesh.secrets if s in result.stdout + result.stderr]
    assert not leaked, f"ares {args[0]} printed secrets: {leaked}"
    return result


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    home = tmp_path_factory.mktemp("principals")
    layout = KafkaLayout(home / "kafka", port=free_port(), controller_port=free_port())
    tls = make_tls(home / "tls", f"tls-{secrets.token_urlsafe(12)}")
    admin = ScramUser("broker", f"pw-{secrets.token_urlsafe(18)}")
    users = {s: ScramUser(spec.default_user, f"pw-{secrets.token_urlsafe(18)}")
             for s, spec in SERVICES.items()}
    broker = SecureBroker(layout, tls, admin, list(users.values()))
    try:
        broker.start()
    except AresError as exc:
        pytest.fail(f"the secured broker did not start: {exc}", pytrace=False)
    try:
        mesh = Mesh(broker, admin, users, f"svc-{uuid.uuid4().hex[:6]}.", home)
        applied = cli(mesh, None, "acls", "apply")
        assert applied.returncode == 0, applied.stderr
        # Before any topic exists, as the chart's hook: only the topics principal creates.
        topics = cli(mesh, "topics", "topics", "apply")
        assert topics.returncode == 0, topics.stderr
        yield mesh
    finally:
        broker.stop()


@contextmanager
def _process(mesh: Mesh, service: str, *args: str, **extra: str
             ) -> Iterator[subprocess.Popen[bytes]]:
    log = mesh.home / f"{service}.log"
    port = free_port()
    mesh.ports[service], mesh.logs[service] = port, log
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ares", "run", service, *args],
                                env=mesh.env(service, ARES_HTTP_PORT=str(port), **extra),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def running(mesh: Mesh) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """The long-running services, each under its own principal."""
    with ExitStack() as stack:
        procs = {
            "runtime-manager": stack.enter_context(_process(
                mesh, "runtime-manager", "--session-timeout-ms", "6000",
                "--heartbeat-interval", "1")),
            "health-checker": stack.enter_context(_process(mesh, "health-checker")),
            "budget-keeper": stack.enter_context(_process(mesh, "budget-keeper")),
            "replay-reader": stack.enter_context(_process(mesh, "replay-reader",
                                                          "--no-projector")),
        }
        yield procs


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urlopen(url, timeout=5) as response:
            return int(response.status), bytes(response.read())
    except URLError as exc:
        code = getattr(exc, "code", None)
        return (int(code) if code is not None else 0), b""


async def _until_ok(mesh: Mesh, service: str, path: str, proc: subprocess.Popen[bytes],
                    timeout_s: float = 120) -> bytes:
    deadline = time.monotonic() + timeout_s
    status, body = 0, b""
    while time.monotonic() < deadline:
        assert proc.poll() is None, (f"{service} exited {proc.returncode}:\n"
                                     f"{tail(mesh.logs[service], 60)}")
        status, body = await asyncio.to_thread(
            _get, f"http://127.0.0.1:{mesh.ports[service]}{path}")
        if status == 200:
            return body
        await asyncio.sleep(1)
    pytest.fail(f"{service}: GET {path} answered {status} for {timeout_s:.0f}s:\n"
                f"{tail(mesh.logs[service], 60)}")


@pytest.fixture
async def producer_client(mesh: Mesh, running: dict[str, subprocess.Popen[bytes]]
                          ) -> AsyncIterator[Client]:
    settings = mesh.settings(mesh.users["producer"])
    async with Client(settings, mesh.plan(), issuer="external") as client:
        yield client


async def _until_served(client: Client, mesh: Mesh) -> None:
    for _ in range(120):
        try:
            await client.append("svc-ping", [NewEvent("svc.ping", "test", {})], timeout_s=5)
            return
        except AresError:
            await asyncio.sleep(1)
    pytest.fail(f"the runtime manager never answered:\n{tail(mesh.logs['runtime-manager'], 60)}")


async def _end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                **settings.kafka_options())
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        assert tps, f"{topic} has no partitions"
        return {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


# -- the plan on the broker -----------------------------------------------------------------

async def test_the_broker_holds_exactly_the_plan(mesh: Mesh) -> None:
    expected = set(plan_acls(mesh.plan()).acls)
    held = await describe_acls(mesh.admin_settings, {a.principal for a in expected})
    assert held == expected, (sorted(held - expected)[:5], sorted(expected - held)[:5])
    again = cli(mesh, None, "acls", "apply")
    assert again.returncode == 0
    assert f"0 created, {len(expected)} present" in again.stdout


async def test_apply_prunes_what_the_plan_does_not_hold(mesh: Mesh) -> None:
    expected = set(plan_acls(mesh.plan()).acls)
    wider = cli(mesh, None, "acls", "apply", "--service", "replay-reader", "--with",
                "api-writes")
    assert wider.returncode == 0
    assert "2 created" in wider.stdout
    shown = cli(mesh, None, "acls", "apply", "--service", "replay-reader", "--dry-run")
    assert shown.stdout.count("not planned") == 2
    pruned = cli(mesh, None, "acls", "apply", "--service", "replay-reader", "--prune")
    assert pruned.returncode == 0
    assert ", 2 deleted," in pruned.stdout
    held = await describe_acls(mesh.admin_settings, {a.principal for a in expected})
    assert held == expected


def test_only_a_super_user_may_change_acls(mesh: Mesh) -> None:
    refused = cli(mesh, "operator", "acls", "apply")
    assert refused.returncode == 1
    assert "ClusterAuthorizationFailedError" in refused.stderr
    assert "ALTER and DESCRIBE on the cluster" in refused.stderr


async def test_the_topics_principal_created_every_topic(mesh: Mesh) -> None:
    plan = mesh.plan()
    changes = await inspect_topics(plan, mesh.admin_settings)
    assert [c.spec.name for c in changes.changes if not c.unchanged] == []
    listed = cli(mesh, "topics", "topics", "list")
    assert listed.returncode == 0


def test_only_the_runtime_manager_writes_the_log_and_producers_only_commands(
        mesh: Mesh) -> None:
    acl_plan = plan_acls(mesh.plan())
    plan = mesh.plan()
    assert writers(acl_plan, plan.name(EVENTS)) == {"runtime-manager"}
    assert writers(acl_plan, plan.name(SNAPSHOTS)) == {"runtime-manager"}
    assert {a.name for a in acl_plan.of("producer") if a.operation == "WRITE"} == {
        plan.name(COMMANDS)}


# -- each service does its job under its own principal --------------------------------------

async def test_the_runtime_manager_serves_an_external_producer(
        mesh: Mesh, producer_client: Client) -> None:
    await _until_served(producer_client, mesh)
    stream = f"svc-agent-{uuid.uuid4().hex[:6]}"
    await producer_client.start_agent(stream, "example.pipeline")
    await producer_client.assign_task(stream, "t1", {"steps": 2, "step_ms": 1, "email": False})
    events = await wait_for_events(mesh.admin_settings, mesh.plan(), stream,
                                   lambda es: any(e.type == "task.completed" for e in es))
    assert [e.version for e in events] == list(range(1, len(events) + 1))
    assert events[0].metadata.get("ares.command.issuer") == "external"


async def test_the_operator_drives_and_reads_through_the_cli(
        mesh: Mesh, producer_client: Client) -> None:
    await _until_served(producer_client, mesh)
    stream = f"svc-op-{uuid.uuid4().hex[:6]}"
    started = cli(mesh, "operator", "agents", "start", stream, "--kind", "example.pipeline")
    assert started.returncode == 0
    read = cli(mesh, "operator", "events", "read", stream, "--json")
    assert read.returncode == 0
    assert stream in read.stdout, read.stdout
    alerts = cli(mesh, "operator", "alerts", "tail", "--since", "1h", "--json", "--timeout", "2")
    assert alerts.returncode == 0


async def test_the_budget_keeper_publishes_the_limits_the_operator_sets(
        mesh: Mesh, running: dict[str, subprocess.Popen[bytes]]) -> None:
    await _until_ok(mesh, "budget-keeper", "/readyz", running["budget-keeper"])
    tenant = f"tenant-{uuid.uuid4().hex[:6]}"
    assert cli(mesh, "operator", "budgets", "set", tenant,
               "--tokens-per-minute", "1000").returncode == 0
    deadline = time.monotonic() + 60
    while True:
        status = cli(mesh, "operator", "budgets", "status", tenant, "--json")
        assert status.returncode == 0
        rows = json.loads(status.stdout)
        rows = rows if isinstance(rows, list) else [rows]
        mine = [r for r in rows if r.get("tenant") == tenant]
        if mine and mine[0].get("updated_at") is not None:
            break  # the keeper's state for the tenant reached ares.budgets
        assert time.monotonic() < deadline, f"no state from the keeper: {rows}\n" \
                                            f"{tail(mesh.logs['budget-keeper'], 40)}"
        await asyncio.sleep(1)


async def test_the_health_checker_follows_the_fleet(
        mesh: Mesh, running: dict[str, subprocess.Popen[bytes]]) -> None:
    # Ready: its group joined, the lookback of heartbeats, events and its alerts rebuilt.
    await _until_ok(mesh, "health-checker", "/readyz", running["health-checker"])


async def test_the_replay_reader_serves_a_stream(
        mesh: Mesh, producer_client: Client, running: dict[str, subprocess.Popen[bytes]]
) -> None:
    await _until_served(producer_client, mesh)
    stream = f"svc-read-{uuid.uuid4().hex[:6]}"
    await producer_client.append(stream, [NewEvent("svc.read", "test", {"n": 1})])
    await _until_ok(mesh, "replay-reader", "/readyz", running["replay-reader"])
    body = await _until_ok(mesh, "replay-reader", f"/streams/{stream}/events",
                           running["replay-reader"])
    assert "svc.read" in body.decode()


async def test_the_compactor_summarises_and_trims(
        mesh: Mesh, producer_client: Client) -> None:
    await _until_served(producer_client, mesh)
    stream = f"svc-long-{uuid.uuid4().hex[:6]}"
    for n in range(6):
        await producer_client.append(stream, [NewEvent("svc.step", "test", {"n": n})])
    summaries = mesh.plan().name(SUMMARIES)
    before = await _end_offsets(mesh.admin_settings, summaries)
    ran = cli(mesh, "compactor", "compaction", "run", "--once", "--threshold", "2",
              "--keep-recent", "1", "--trim", "--json")
    assert ran.returncode == 0, ran.stderr
    after = await _end_offsets(mesh.admin_settings, summaries)
    assert sum(after.values()) > sum(before.values()), (before, after)


# -- what each must not do ----------------------------------------------------------------

FORBIDDEN = sorted(
    [(service, topic) for service in SERVICES if service != "runtime-manager"
     for topic in (EVENTS, SNAPSHOTS)]
    + [(service, COMMANDS) for service in ("replay-reader", "budget-keeper", "topics")]
    + [("producer", ALERTS), ("producer", REPLIES), ("health-checker", REPLIES)])


@pytest.mark.parametrize(("service", "logical"), FORBIDDEN)
async def test_a_forbidden_write_is_refused_and_writes_nothing(
        mesh: Mesh, service: str, logical: str) -> None:
    topic = mesh.plan().name(logical)
    assert service not in writers(plan_acls(mesh.plan()), topic)
    before = await _end_offsets(mesh.admin_settings, topic)
    settings = mesh.settings(mesh.users[service], request_timeout_s=8.0)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all",
                                enable_idempotence=True, request_timeout_ms=8000,
                                **settings.kafka_options())
    refused: BaseException | None = None
    with quiet_aiokafka():
        try:
            await wait_for(producer.start(), 20)
            await wait_for(producer.send_and_wait(topic, b"forged", key=b"victim"), 20)
        except (KafkaError, TimeoutError) as exc:
            refused = exc
        finally:
            await producer.stop()
    assert refused is not None, f"{service} wrote to {topic}"
    print(f"{service} -> {topic}: {type(refused).__name__}: {refused}")
    assert isinstance(refused, KafkaError), refused
    assert "authoriz" in f"{type(refused).__name__} {refused}".lower(), refused
    assert await _end_offsets(mesh.admin_settings, topic) == before


@pytest.mark.parametrize("service", ["compactor", "replay-reader", "health-checker",
                                     "operator", "runtime-manager"])
async def test_only_the_compactor_may_trim_the_log(mesh: Mesh, service: str) -> None:
    """DeleteRecords up to the log start: a no-op, but authorised like any trim."""
    tp = TopicPartition(mesh.plan().name(EVENTS), 0)
    reader = new_consumer(mesh.admin_settings)
    await reader.start()
    try:
        start = (await reader.beginning_offsets([tp]))[tp]
    finally:
        await reader.stop()
    settings = mesh.settings(mesh.users[service], request_timeout_s=8.0)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap,
                                **settings.kafka_options())
    await admin.start()
    try:
        if service == "compactor":
            assert await admin.delete_records({tp: RecordsToDelete(start)}) == {tp: start}
        else:
            with pytest.raises(KafkaError, match=r"(?i)authoriz"):
                await admin.delete_records({tp: RecordsToDelete(start)})
    finally:
        await admin.close()


async def test_no_one_but_the_owners_writes_as_an_owner(mesh: Mesh) -> None:
    """A transactional id of the event log's writers is refused to every other principal."""
    tid = f"{mesh.plan().name(EVENTS)}.writer-0"
    for service in ("health-checker", "compactor", "operator", "producer"):
        settings = mesh.settings(mesh.users[service], request_timeout_s=8.0)
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap,
                                    transactional_id=tid, **settings.kafka_options())
        with quiet_aiokafka():
            try:
                with pytest.raises(KafkaError, match=r"(?i)authoriz"):
                    await wait_for(producer.start(), 20)
            finally:
                await producer.stop()


async def test_no_service_was_refused_anything_and_no_log_holds_a_secret(
        mesh: Mesh, running: dict[str, subprocess.Popen[bytes]]) -> None:
    """What the services did above, they did with their ACLs: no authorisation failure
    anywhere in their logs (dead letters, for one, only log theirs)."""
    for service in LONG_RUNNING:
        assert running[service].poll() is None, f"{service} exited:\n" \
                                                 f"{tail(mesh.logs[service], 60)}"
        text = tail(mesh.logs[service], 100_000)
        leaked = [s[:6] + "..." for s in mesh.secrets if s in text]
        assert not leaked, f"{service}'s log contains secrets: {leaked}"
        refused = [line for line in text.splitlines() if "authoriz" in line.lower()]
        assert refused == [], f"{service} was refused: {refused[:5]}"


async def test_the_health_checker_reports_a_lost_worker(
        mesh: Mesh, running: dict[str, subprocess.Popen[bytes]]) -> None:
    """Last: it kills the runtime manager. The health checker, under its own principal,
    reads the owners' group and the heartbeats and writes the alert."""
    await _until_ok(mesh, "health-checker", "/readyz", running["health-checker"])
    await asyncio.sleep(3)  # heartbeats of the hosted agents reach the checker
    running["runtime-manager"].kill()
    plan = mesh.plan()
    deadline = time.monotonic() + 90
    lost: list[dict[str, Any]] = []
    while not lost:
        assert time.monotonic() < deadline, "no worker_lost alert in 90s:\n" + tail(
            mesh.logs["health-checker"], 40)
        await asyncio.sleep(1)
        reader = new_consumer(mesh.admin_settings)
        await reader.start()
        try:
            lost = [alert async for alert in read_alerts(
                reader, plan.name(ALERTS), plan.topic(ALERTS).partitions, time.time() - 600)
                    if alert.get("kind") == "worker_lost"]
        finally:
            await reader.stop()
    assert lost[0]["source"] == "health-checker", lost

