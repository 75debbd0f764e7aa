"""SASL_SSL (SCRAM-SHA-512) and ACLs on an isolated broker, with the real services.

The test starts its own broker (never the shared one): a self-signed CA and a broker
certificate made with openssl/keytool, SCRAM users created at format time, the
StandardAuthorizer with the broker's user as the only super user, and the least-privilege
ACLs of docs/operations.md ("Security") for a runtime principal and a client principal.
Then:

* ``ares run runtime-manager`` connects as its principal (password from a file) and a
  client principal's append, agent start and task complete (a full round trip);
* a client without credentials, a principal without ACLs and a wrong password are refused
  with a clear error, and nothing is written;
* no password appears in any log, error message or CLI output.

Nothing skips: without Java, openssl or keytool the fixture fails with the reason.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from ares.chaos.toxiproxy import free_port
from ares.client import Client
from ares.config import Settings
from ares.devenv.kafka import KafkaLayout
from ares.devenv.process import tail
from ares.devenv.security import (
    ScramUser,
    SecureBroker,
    client_acls,
    make_tls,
    runtime_acls,
)
from ares.errors import AresError
from ares.events.model import NewEvent
from ares.logs import quiet_aiokafka
from ares.tasks import wait_for
from ares.topics import COMMANDS, EVENTS, TopicPlan, apply_topics, load_topics
from tests.support.processes import ares_env
from tests.support.runtime import read_stream, wait_for_events

PARTITIONS = 2


@dataclass(frozen=True)
class Secured:
    broker: SecureBroker
    admin: ScramUser
    runtime: ScramUser
    client: ScramUser
    stranger: ScramUser  # authenticated, no ACL at all
    prefix: str
    home: Path

    def settings(self, user: ScramUser | None, **overrides: object) -> Settings:
        values: dict[str, object] = {"topic_prefix": self.prefix, "request_timeout_s": 20.0}
        return self.broker.settings(user, **{**values, **overrides})

    @property
    def secrets(self) -> list[str]:
        return [u.password for u in (self.admin, self.runtime, self.client, self.stranger)] + [
            self.broker.tls.password]


def _user(name: str) -> ScramUser:
    return ScramUser(name, f"pw-{secrets.token_urlsafe(18)}")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("secured")
    layout = KafkaLayout(home / "kafka", port=free_port(), controller_port=free_port())
    tls = make_tls(home / "tls", f"tls-{secrets.token_urlsafe(12)}")
    admin, runtime, client, stranger = (_user(n) for n in (
        "broker", "ares-runtime", "ares-client", "ares-stranger"))
    broker = SecureBroker(layout, tls, admin, [runtime, client, stranger])
    try:
        broker.start()
    except AresError as exc:
        pytest.fail(f"the secured broker did not start: {exc}", pytrace=False)
    try:
        prefix = f"sec-{uuid.uuid4().hex[:6]}."
        secured = Secured(broker, admin, runtime, client, stranger, prefix, home)
        with quiet_aiokafka():
            asyncio.run(_apply(secured.settings(admin)))
        broker.create_acls([*runtime_acls(runtime.principal, prefix),
                            *client_acls(client.principal, prefix)])
        yield secured
    finally:
        broker.stop()
        if "failed" in str(getattr(sys, "last_value", "")):
            print(tail(layout.log_file, 80))


async def _apply(settings: Settings) -> None:
    await apply_topics(_plan(settings), settings)


def _plan(settings: Settings) -> TopicPlan:
    return load_topics(settings, env={"ARES_TOPIC_PARTITIONS": str(PARTITIONS)})


@pytest.fixture(scope="module")
def runtime_manager(secured: Secured, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[Path]:
    """`ares run runtime-manager` as the runtime principal, its password in a file."""
    logs = tmp_path_factory.mktemp("secured-logs")
    password_file = secured.home / "runtime.password"
    password_file.write_text(secured.runtime.password)
    password_file.chmod(0o600)
    settings = secured.settings(None)
    env = ares_env(settings, PARTITIONS,
                   ARES_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                   ARES_KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
                   ARES_KAFKA_SASL_USERNAME=secured.runtime.name,
                   ARES_KAFKA_SASL_PASSWORD_FILE=str(password_file),
                   ARES_KAFKA_SSL_CA_FILE=str(secured.broker.tls.ca_pem),
                   ARES_LOG_LEVEL="debug")
    log = logs / "runtime-manager.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ares", "run", "runtime-manager",
                                 "--session-timeout-ms", "6000"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
async def client(secured: Secured, runtime_manager: Path) -> AsyncIterator[Client]:
    settings = secured.settings(secured.client)
    async with Client(settings, _plan(settings), issuer="ares-client") as client:
        yield client


async def _until_served(client: Client, log: Path) -> int:
    for _ in range(90):
        try:
            return await client.append("sec-ping", [NewEvent("sec.ping", "test", {})],
                                       timeout_s=5)
        except AresError:
            await asyncio.sleep(1)
    pytest.fail(f"the runtime manager never answered:\n{tail(log, 60)}")


async def test_the_runtime_manager_works_with_its_least_privilege_principal(
    secured: Secured, runtime_manager: Path, client: Client
) -> None:
    assert await _until_served(client, runtime_manager) >= 1
    stream = f"sec-agent-{uuid.uuid4().hex[:6]}"
    await client.start_agent(stream, "example.pipeline")
    await client.assign_task(stream, "t1", {"steps": 2, "step_ms": 1, "email": False})
    admin = secured.settings(secured.admin)
    plan = _plan(admin)
    events = await wait_for_events(admin, plan, stream,
                                   lambda es: any(e.type == "task.completed" for e in es))
    assert [e.version for e in events] == list(range(1, len(events) + 1))
    assert (await read_stream(admin, plan, "sec-ping"))[0].type == "sec.ping"
    _no_secret_in(secured, tail(runtime_manager, 100_000), "the runtime log")


async def test_every_command_is_recorded_with_its_issuer(
    secured: Secured, runtime_manager: Path, client: Client
) -> None:
    await _until_served(client, runtime_manager)
    stream = f"sec-audit-{uuid.uuid4().hex[:6]}"
    await client.append(stream, [NewEvent("sec.noted", "test", {})])
    await client.start_agent(f"{stream}-agent", "example.pipeline")
    admin = secured.settings(secured.admin)
    plan = _plan(admin)
    for stream_id in (stream, f"{stream}-agent"):
        first = (await read_stream(admin, plan, stream_id))[0]
        assert first.metadata.get("ares.command.issuer") == "ares-client", first.metadata


async def _end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                **settings.kafka_options())
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


def _intruder(secured: Secured, who: str) -> ScramUser | None:
    return {"no_credentials": None, "no_acls": secured.stranger,
            "wrong_password": ScramUser(secured.client.name, "pw-wrong-" + secrets.token_hex(8))
            }[who]


async def _attempt(secured: Secured, who: str, commands: str) -> list[str]:
    """What an intruder is told, through ares.Client and through a raw producer."""
    settings = secured.settings(_intruder(secured, who), request_timeout_s=8.0)
    messages: list[str] = []
    with quiet_aiokafka():
        try:
            async with Client(settings, _plan(settings), issuer=who) as intruder:
                await intruder.append("sec-victim", [NewEvent("sec.forged", "intruder", {})],
                                      timeout_s=8)
        except AresError as exc:
            messages.append(str(exc))
        else:
            pytest.fail(f"{who}: the append was accepted")
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap,
                                    request_timeout_ms=8000, **settings.kafka_options())
        try:
            await wait_for(producer.start(), 15)
            await wait_for(producer.send_and_wait(commands, b"forged", key=b"x"), 15)
        except (KafkaError, TimeoutError) as exc:
            messages.append(f"{type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{who}: a raw record reached {commands}")
        finally:
            await producer.stop()
    print(f"{who}: {messages[0]}")
    return messages


@pytest.mark.parametrize("who", ["no_credentials", "no_acls", "wrong_password"])
async def test_unauthenticated_and_unauthorised_clients_are_refused_and_write_nothing(
    secured: Secured, who: str
) -> None:
    admin = secured.settings(secured.admin)
    commands, events = _plan(admin).name(COMMANDS), _plan(admin).name(EVENTS)
    before = (await _end_offsets(admin, commands), await _end_offsets(admin, events))
    messages = await _attempt(secured, who, commands)
    _no_secret_in(secured, "\n".join(messages), f"the {who} errors")
    after = (await _end_offsets(admin, commands), await _end_offsets(admin, events))
    assert after == before, f"{who} wrote something: {before} -> {after}"


async def test_a_principal_without_acls_is_told_it_is_not_authorised(secured: Secured) -> None:
    [message, *_] = await _attempt(secured, "no_acls", _plan(secured.settings(None)).name(
        COMMANDS))
    assert "authorization" in message.lower()


@pytest.mark.parametrize("who", ["no_credentials", "wrong_password"])
async def test_a_refused_login_says_authentication_failed(secured: Secured, who: str) -> None:
    [message, *_] = await _attempt(secured, who, _plan(secured.settings(None)).name(COMMANDS))
    assert "authenticat" in message.lower(), message
    assert "unreachable" not in message


def test_the_cli_never_prints_a_password(secured: Secured, runtime_manager: Path) -> None:
    """A wrong password and a user without ACLs through the real CLI: clear, secret-free."""
    for user, password in ((secured.client.name, "pw-cli-wrong-" + secrets.token_hex(8)),
                           (secured.stranger.name, secured.stranger.password)):
        env = ares_env(secured.settings(None), PARTITIONS,
                       ARES_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                       ARES_KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
                       ARES_KAFKA_SASL_USERNAME=user, ARES_KAFKA_SASL_PASSWORD=password,
                       ARES_KAFKA_SSL_CA_FILE=str(secured.broker.tls.ca_pem),
                       ARES_REQUEST_TIMEOUT_S="8")
        result = subprocess.run(
            [sys.executable, "-m", "ares", "events", "append", "sec-cli", "--type", "sec.cli",
             "--module", "test", "--payload", "{}"],
            env=env, capture_output=True, text=True, timeout=120, check=False)
        out = result.stdout + result.stderr
        print(f"{user}: exit {result.returncode}: {out.strip()[-400:]}")
        assert result.returncode != 0
        assert password not in out
        _no_secret_in(secured, out, "the CLI output")


def _no_secret_in(secured: Secured, text: str, where: str) -> None:
    leaked = [s[:6] + "..." for s in secured.secrets if s in text]
    assert not leaked, f"{where} contains secrets: {leaked}"
