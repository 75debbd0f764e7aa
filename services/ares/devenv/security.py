"""Opt-in: a local broker with a SASL_SSL listener, SCRAM users and ACLs (for the security
tests and for trying a secured setup by hand). The default dev broker is unchanged.

* TLS: a self-signed CA and a broker certificate for 127.0.0.1/localhost (openssl), the
  broker's PKCS12 keystore and truststore (openssl, keytool); clients get the CA as PEM.
* Authentication: SCRAM-SHA-512 on the client listener; users are created at format time
  (``StorageTool format --add-scram``), so the broker starts with them. The controller
  listener uses SASL PLAIN with the broker's own static user (KRaft controllers cannot
  read SCRAM credentials from the metadata they serve).
* Authorisation: ``StandardAuthorizer``, the broker's user as the only super user, no
  access without an ACL (``allow.everyone.if.no.acl.found=false``). ACLs are created
  through Kafka's Admin API (``templates/AclTool.java``, run by the JDK's source launcher
  against the broker's own jars).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ares.config import Settings
from ares.devenv import kafka, process, readiness
from ares.errors import InfrastructureError
from ares.security.acls import Acl, plan_acls
from ares.topics import load_topics

MECHANISM = "SCRAM-SHA-512"
__all__ = ["MECHANISM", "Acl", "ScramUser", "SecureBroker", "TlsFiles", "client_acls",
           "make_tls", "runtime_acls", "service_acls"]


@dataclass(frozen=True, slots=True)
class ScramUser:
    name: str
    password: str = field(repr=False)

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


def service_acls(principal: str, prefix: str, service: str,
                 features: Sequence[str] = ()) -> list[Acl]:
    """The ACLs of one service of ``ares.security.acls`` (``ares acls plan``) for the
    topics of the checkout's topics.yaml under ``prefix``."""
    plan = load_topics(Settings(topic_prefix=prefix), env={})
    return plan_acls(plan, services=[service], principals={service: principal},
                     features=features).acls


def runtime_acls(principal: str, prefix: str) -> list[Acl]:
    """Least privilege of a runtime manager (docs/operations.md, "Security")."""
    return service_acls(principal, prefix, "runtime-manager")


def client_acls(principal: str, prefix: str) -> list[Acl]:
    """An external system using ``ares.Client``: send commands, read its replies."""
    return service_acls(principal, prefix, "producer")


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca_pem: Path
    keystore: Path  # PKCS12: the broker's key and certificate chain
    truststore: Path  # PKCS12: the CA
    password: str = field(repr=False)


def make_tls(directory: Path, password: str, days: int = 2) -> TlsFiles:
    """A throw-away CA and a broker certificate for 127.0.0.1 and localhost."""
    openssl, keytool = shutil.which("openssl"), shutil.which("keytool")
    if openssl is None or keytool is None:
        raise InfrastructureError("the TLS setup needs openssl and keytool (Java 17+) on PATH")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_pem = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "broker.key", directory / "broker.csr", directory / "broker.pem"
    ext = directory / "broker.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                   "extendedKeyUsage=serverAuth,clientAuth\n")
    keystore, truststore = directory / "broker.p12", directory / "truststore.p12"
    steps = [
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
         "-out", str(ca_pem), "-days", str(days), "-subj", "/CN=ares-test-ca"],
        [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
         str(csr), "-subj", "/CN=localhost"],
        [openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(cert), "-days", str(days), "-extfile", str(ext)],
        [openssl, "pkcs12", "-export", "-in", str(cert), "-inkey", str(key), "-certfile",
         str(ca_pem), "-name", "broker", "-out", str(keystore), "-passout",
         f"pass:{password}"],
        [keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
         "-keystore", str(truststore), "-storetype", "PKCS12", "-storepass", password],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise InfrastructureError(f"{Path(step[0]).name} {step[1]} failed: "
                                      f"{(result.stdout + result.stderr)[-1500:]}")
    return TlsFiles(ca_pem, keystore, truststore, password)


class SecureBroker:
    """A single-node broker whose only client listener is SASL_SSL with SCRAM-SHA-512."""

    def __init__(self, layout: kafka.KafkaLayout, tls: TlsFiles, admin: ScramUser,
                 users: Sequence[ScramUser]) -> None:
        self.layout = layout
        self.tls = tls
        self.admin = admin  # the broker's own user and the only super user
        self.users = list(users)

    def overrides(self) -> dict[str, str]:
        port, controller, admin = self.layout.port, self.layout.controller_port, self.admin
        scram = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                 f'username="{admin.name}" password="{admin.password}";')
        plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                 f'username="{admin.name}" password="{admin.password}" '
                 f'user_{admin.name}="{admin.password}";')
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": admin.principal,
            "allow.everyone.if.no.acl.found": "false",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.tls.keystore),
            "ssl.keystore.password": self.tls.password,
            "ssl.key.password": self.tls.password,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(self.tls.truststore),
            "ssl.truststore.password": self.tls.password,
        }

    def settings(self, user: ScramUser | None, **overrides: object) -> Settings:
        """Client settings for ``user`` (None: TLS without credentials)."""
        values: dict[str, object] = {
            "kafka_bootstrap": self.layout.bootstrap, "kafka_ssl_ca_file": str(self.tls.ca_pem),
            "kafka_security_protocol": "SSL" if user is None else "SASL_SSL"}
        if user is not None:
            values.update(kafka_sasl_mechanism=MECHANISM, kafka_sasl_username=user.name,
                          kafka_sasl_password=user.password)
        values.update(overrides)
        settings = Settings(**values)  # type: ignore[arg-type]
        settings.validate()
        return settings

    def start(self, version: str | None = None, timeout_s: float = 180.0) -> int:
        version = version or kafka.kafka_version()
        libs = kafka.resolve_classpath(version)
        kafka.write_config(self.layout, self.overrides())
        self._format(libs)
        with (self.layout.root / "broker.out").open("ab") as out:
            proc = subprocess.Popen(
                kafka._java_command(libs, self.layout, "kafka.Kafka", str(self.layout.config_file)),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.layout.root)
        self.layout.pid_file.write_text(f"{proc.pid}\n")
        self._wait_ready(proc.pid, timeout_s)
        return proc.pid

    def _format(self, libs: Path) -> None:
        if (self.layout.data_dir / "meta.properties").exists():
            return
        scram = [arg for user in [self.admin, *self.users]
                 for arg in ("--add-scram",
                             f"{MECHANISM}=[name={user.name},password={user.password}]")]
        result = subprocess.run(
            kafka._java_command(libs, self.layout, "kafka.tools.StorageTool", "format", "-t",
                                kafka._cluster_id(), "-c", str(self.layout.config_file),
                                *scram),
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise InfrastructureError("formatting the secured broker's storage failed:\n"
                                      f"{(result.stdout + result.stderr)[-3000:]}")

    def _wait_ready(self, pid: int, timeout_s: float) -> None:
        try:
            asyncio.run(readiness.wait_until_serving(
                self.layout.bootstrap, timeout_s=timeout_s,
                options=self.settings(self.admin).kafka_options(),
                alive=lambda: process.pid_alive(pid)))
        except InfrastructureError as exc:
            raise InfrastructureError(
                f"the secured broker: {exc}; see {self.layout.log_file}:\n"
                f"{process.tail(self.layout.log_file)}"
                f"{process.tail(self.layout.root / 'broker.out', 20)}") from None

    def admin_properties(self) -> Path:
        """The super user's client properties for Kafka's Java tools."""
        path = self.layout.root / "admin.properties"
        path.write_text("\n".join([
            f"bootstrap.servers={self.layout.bootstrap}",
            "security.protocol=SASL_SSL", f"sasl.mechanism={MECHANISM}",
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="{self.admin.name}" password="{self.admin.password}";',
            f"ssl.truststore.location={self.tls.truststore}", "ssl.truststore.type=PKCS12",
            f"ssl.truststore.password={self.tls.password}", ""]))
        path.chmod(0o600)
        return path

    def create_acls(self, acls: Sequence[Acl]) -> None:
        java = shutil.which("java")
        if java is None:
            raise InfrastructureError("creating ACLs needs `java` (JDK 17+) on PATH")
        libs = kafka.resolve_classpath(kafka.kafka_version())
        tool = resources.files("ares.devenv") / "templates" / "AclTool.java"
        with resources.as_file(tool) as source:
            result = subprocess.run(
                [java, "-cp", f"{libs}/*", str(source), str(self.admin_properties()),
                 *(acl.arg() for acl in acls)],
                capture_output=True, text=True, check=False, timeout=180)
        if result.returncode != 0:
            raise InfrastructureError(f"creating ACLs failed:\n{result.stderr[-3000:]}")

    def stop(self) -> None:
        kafka.stop(self.layout, grace_s=20)
