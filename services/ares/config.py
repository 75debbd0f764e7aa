"""Settings in one place.

Every setting is an environment variable with the ``ARES_`` prefix; CLI flags override them
and the Helm chart sets the same names. ``Settings.from_env`` validates at start-up and
fails with a message naming the setting.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ares.errors import ConfigError
from ares.gc_policy import DEFAULT_GEN0_THRESHOLD, check_gc_threshold

# ares.events.writer.DEFAULT_ID_WINDOW (not imported: config stays free of the event modules).
DEFAULT_DEDUPE_WINDOW = 200_000

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_POSTGRES_DSN = "postgresql://ares:ares@127.0.0.1:5432/ares"
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]*$")
# ARES_API_TOKEN: long enough not to be guessed, and sendable in an HTTP header as is.
MIN_API_TOKEN = 16
MAX_API_TOKEN = 4096
_TOKEN_RE = re.compile(rf"[\x21-\x7e]{{{MIN_API_TOKEN},{MAX_API_TOKEN}}}")
# The roles of ARES_API_TOKENS (ares.replay_reader.auth.Role): an operator may do what a
# viewer may, and write.
API_ROLES = ("viewer", "operator")
# ARES_API_READS: "open" (reads need no token) or "token" (a viewer's or operator's).
API_READS = ("open", "token")
_ROLE_SHOWN_RE = re.compile(r"[A-Za-z_-]{1,20}")


@dataclass(frozen=True, slots=True)
class Settings:
    """Resolved settings of one ares process."""

    kafka_bootstrap: str = DEFAULT_BOOTSTRAP
    postgres_dsn: str = DEFAULT_POSTGRES_DSN
    # Prepended to every topic name, so several environments can share one Kafka cluster.
    topic_prefix: str = ""
    # Largest record the services accept (and the topics allow); larger input is dead-lettered.
    max_record_bytes: int = 1_048_576
    request_timeout_s: float = 10.0
    # How long `ares run <service>` waits for an unreachable broker at start (0: not at all).
    startup_timeout_s: float = 300.0
    # How long a command waits out a broker that answers "not yet" (starting, electing a
    # leader, moving a coordinator) before it exits 4 (0: not at all).
    retry_timeout_s: float = 15.0
    # /healthz /readyz /metrics of `ares run <service>`; 0 turns them off; None: the
    # service's own default port (ares.probes.DEFAULT_PORTS), so that they run side by side.
    http_port: int | None = None
    # Kafka security: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (SCRAM-SHA-512, ...).
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = field(default=None, repr=False)  # never printed
    kafka_ssl_ca_file: str | None = None
    kafka_ssl_cert_file: str | None = None
    kafka_ssl_key_file: str | None = None
    # Who may send which command to which agents (ares.commands.policy); "" lets anyone.
    command_issuers: str = ""
    # Young-generation threshold of the garbage collector of `ares run <service>`
    # (ares.gc_policy); 0 keeps Python's default (700).
    gc_threshold: int = DEFAULT_GEN0_THRESHOLD
    # The bearer token the HTTP API's writes need (POST ..., `Authorization: Bearer <token>`);
    # None: writes are disabled (403). Never printed, logged or echoed in an error.
    api_token: str | None = field(default=None, repr=False)
    # ARES_API_TOKENS: comma-separated role:token pairs (roles viewer, operator), for the
    # HTTP API and its dashboard; ARES_API_TOKEN is one more operator token (the older
    # form). Never printed, logged or echoed in an error; ``api_credentials()`` parses.
    api_tokens: str | None = field(default=None, repr=False)
    # ARES_API_READS: "open" (default) or "token" (every read needs a viewer's token).
    api_reads: str = "open"
    # ARES_API_SESSION_KEY: the key signing the dashboard's session cookies (shared by the
    # replicas behind one address); None: a random key per process.
    api_session_key: str | None = field(default=None, repr=False)
    # ARES_ARENA / --arena: the arena's destructive demo commands (worker.crash: a runtime
    # manager exits abruptly; the dashboard's Crash worker button). Off by default; the Helm
    # chart's production values refuse it.
    arena: bool = False
    # ARES_DEDUPE_WINDOW: how many recently appended event ids each partition writer
    # remembers to recognise a re-sent append (ares.events.writer); 0 remembers none, so
    # tests can prove exactly-once from the transactions alone.
    dedupe_window: int = DEFAULT_DEDUPE_WINDOW
    # ARES_HTTP_TLS_CERT_FILE / ARES_HTTP_TLS_KEY_FILE (PEM, both or neither): the replay
    # reader's API and dashboard over HTTPS.
    http_tls_cert_file: str | None = None
    http_tls_key_file: str | None = None
    # ARES_METRICS_PORT: the replay reader's /healthz, /readyz and /metrics on a listener of
    # their own (plain HTTP, for the kubelet and the scraper), off the API's port.
    metrics_port: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read ``ARES_*`` variables, apply non-None ``overrides`` (CLI flags), validate."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {
            "kafka_bootstrap": env.get("ARES_KAFKA_BOOTSTRAP", DEFAULT_BOOTSTRAP),
            "postgres_dsn": env.get("ARES_POSTGRES_DSN", DEFAULT_POSTGRES_DSN),
            "topic_prefix": env.get("ARES_TOPIC_PREFIX", ""),
            "max_record_bytes": _int_setting(env, "ARES_MAX_RECORD_BYTES", 1_048_576),
            "request_timeout_s": _float_setting(env, "ARES_REQUEST_TIMEOUT_S", 10.0),
            "startup_timeout_s": _float_setting(env, "ARES_STARTUP_TIMEOUT_S", 300.0),
            "retry_timeout_s": _float_setting(env, "ARES_RETRY_TIMEOUT_S", 15.0),
            "http_port": _optional_int_setting(env, "ARES_HTTP_PORT"),
            "kafka_security_protocol": env.get("ARES_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
            "kafka_sasl_mechanism": env.get("ARES_KAFKA_SASL_MECHANISM") or None,
            "kafka_sasl_username": env.get("ARES_KAFKA_SASL_USERNAME") or None,
            "kafka_sasl_password": _secret(env, "ARES_KAFKA_SASL_PASSWORD"),
            "kafka_ssl_ca_file": env.get("ARES_KAFKA_SSL_CA_FILE") or None,
            "kafka_ssl_cert_file": env.get("ARES_KAFKA_SSL_CERT_FILE") or None,
            "kafka_ssl_key_file": env.get("ARES_KAFKA_SSL_KEY_FILE") or None,
            "command_issuers": env.get("ARES_COMMAND_ISSUERS", ""),
            "gc_threshold": _int_setting(env, "ARES_GC_THRESHOLD", DEFAULT_GEN0_THRESHOLD),
            "api_token": _secret(env, "ARES_API_TOKEN"),
            "api_tokens": _secret(env, "ARES_API_TOKENS"),
            "api_reads": env.get("ARES_API_READS") or "open",
            "api_session_key": _secret(env, "ARES_API_SESSION_KEY"),
            "arena": bool_setting(env, "ARES_ARENA"),
            "dedupe_window": _int_setting(env, "ARES_DEDUPE_WINDOW", DEFAULT_DEDUPE_WINDOW),
            "http_tls_cert_file": env.get("ARES_HTTP_TLS_CERT_FILE") or None,
            "http_tls_key_file": env.get("ARES_HTTP_TLS_KEY_FILE") or None,
            "metrics_port": _optional_int_setting(env, "ARES_METRICS_PORT"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        settings.validate()
        return settings

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the non-None ``overrides`` applied and validated."""
        settings = replace(self, **{k: v for k, v in overrides.items() if v is not None})
        settings.validate()
        return settings

    def validate(self) -> None:
        if not self.kafka_bootstrap.strip():
            raise ConfigError("ARES_KAFKA_BOOTSTRAP is empty: give host:port[,host:port]")
        for server in self.kafka_bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(
                    f"ARES_KAFKA_BOOTSTRAP: {server.strip()!r} is not host:port "
                    f"(got {self.kafka_bootstrap!r})"
                )
        if not self.postgres_dsn.startswith(("postgresql://", "postgres://")):
            # Not echoed: a malformed DSN may still hold a password.
            raise ConfigError(
                "ARES_POSTGRES_DSN must be a URL: postgresql://user:password@host:port/db"
            )
        if not _PREFIX_RE.match(self.topic_prefix):
            raise ConfigError(
                f"ARES_TOPIC_PREFIX {self.topic_prefix!r} may only hold letters, digits, . _ -"
            )
        if self.max_record_bytes < 1024:
            raise ConfigError("ARES_MAX_RECORD_BYTES must be at least 1024")
        if self.request_timeout_s <= 0:
            raise ConfigError("ARES_REQUEST_TIMEOUT_S must be positive")
        if self.startup_timeout_s < 0:
            raise ConfigError("ARES_STARTUP_TIMEOUT_S must be 0 (do not wait) or more")
        if self.retry_timeout_s < 0:
            raise ConfigError("ARES_RETRY_TIMEOUT_S must be 0 (do not wait) or more")
        if self.dedupe_window < 0:
            raise ConfigError("ARES_DEDUPE_WINDOW must be 0 (no event-id dedupe) or more")
        self._validate_kafka_security()
        from ares.commands.policy import IssuerPolicy

        IssuerPolicy.parse(self.command_issuers)  # a bad rule fails at start-up, named
        try:
            check_gc_threshold(self.gc_threshold)
        except ValueError as exc:
            raise ConfigError(f"ARES_GC_THRESHOLD: {exc}") from None
        if self.http_port is not None and not 0 <= self.http_port <= 65535:
            raise ConfigError(f"ARES_HTTP_PORT must be a port number 0-65535 "
                              f"(got {self.http_port})")
        self._validate_http_listeners()
        if self.api_token is not None and not _TOKEN_RE.fullmatch(self.api_token):
            # Not echoed: it is a secret, even when malformed.
            raise ConfigError(f"ARES_API_TOKEN must be {MIN_API_TOKEN}-{MAX_API_TOKEN} "
                              "visible ASCII characters (no spaces), e.g. the output of "
                              "`openssl rand -hex 32`")
        credentials = self.api_credentials()
        if self.api_reads not in API_READS:
            raise ConfigError(f"ARES_API_READS must be one of {', '.join(API_READS)} "
                              f"(got {self.api_reads[:40]!r})")
        if self.api_reads == "token" and not credentials:
            raise ConfigError("ARES_API_READS=token needs ARES_API_TOKENS (e.g. "
                              "viewer:<token>,operator:<token>): else nobody could read")
        if self.api_session_key is not None and not _TOKEN_RE.fullmatch(self.api_session_key):
            raise ConfigError(f"ARES_API_SESSION_KEY must be {MIN_API_TOKEN}-{MAX_API_TOKEN} "
                              "visible ASCII characters (no spaces), e.g. the output of "
                              "`openssl rand -hex 32`")

    def _validate_http_listeners(self) -> None:
        if self.metrics_port is not None:
            if not 1 <= self.metrics_port <= 65535:
                raise ConfigError(f"ARES_METRICS_PORT must be a port number 1-65535 "
                                  f"(got {self.metrics_port})")
            if self.metrics_port == self.http_port:
                raise ConfigError(f"ARES_METRICS_PORT and ARES_HTTP_PORT are both "
                                  f"{self.metrics_port}: the metrics listener needs a port of "
                                  "its own (unset ARES_METRICS_PORT to serve both on one)")
        tls = {"ARES_HTTP_TLS_CERT_FILE": self.http_tls_cert_file,
               "ARES_HTTP_TLS_KEY_FILE": self.http_tls_key_file}
        given = [name for name, path in tls.items() if path]
        if len(given) == 1:
            missing = next(name for name in tls if name not in given)
            raise ConfigError(f"{given[0]} is set but {missing} is not: HTTPS needs both the "
                              "certificate and its private key")
        for name in given:
            if not os.path.isfile(str(tls[name])):
                raise ConfigError(f"{name}: no such file: {tls[name]}")

    def api_credentials(self) -> tuple[tuple[str, str], ...]:
        """The API's tokens as (role, token) pairs: ARES_API_TOKENS's, then ARES_API_TOKEN
        as an operator's. ``ConfigError`` names a bad pair by its position (and its role
        when it is a word), never by its token."""
        pairs: list[tuple[str, str]] = []
        if self.api_tokens is not None:
            pairs.extend(parse_api_tokens(self.api_tokens))
        if self.api_token is not None:
            pairs.append(("operator", self.api_token))
        seen: dict[str, str] = {}
        for role, token in pairs:
            if token in seen:
                raise ConfigError(f"ARES_API_TOKENS: one token is given twice (as "
                                  f"{seen[token]} and as {role}; ARES_API_TOKEN counts as an "
                                  "operator's): give each role its own token")
            seen[token] = role
        return tuple(pairs)

    def _validate_kafka_security(self) -> None:
        protocol = self.kafka_security_protocol.upper()
        if protocol not in _PROTOCOLS:
            raise ConfigError(f"ARES_KAFKA_SECURITY_PROTOCOL must be one of {sorted(_PROTOCOLS)} "
                              f"(got {self.kafka_security_protocol!r})")
        if protocol.startswith("SASL"):
            if self.kafka_sasl_mechanism not in _MECHANISMS:
                raise ConfigError(f"ARES_KAFKA_SASL_MECHANISM must be one of "
                                  f"{sorted(_MECHANISMS)} with {protocol} "
                                  f"(got {self.kafka_sasl_mechanism!r})")
            if not self.kafka_sasl_username or not self.kafka_sasl_password:
                raise ConfigError(f"{protocol} needs ARES_KAFKA_SASL_USERNAME and "
                                  "ARES_KAFKA_SASL_PASSWORD (or ARES_KAFKA_SASL_PASSWORD_FILE)")
        for name, path in (("ARES_KAFKA_SSL_CA_FILE", self.kafka_ssl_ca_file),
                           ("ARES_KAFKA_SSL_CERT_FILE", self.kafka_ssl_cert_file),
                           ("ARES_KAFKA_SSL_KEY_FILE", self.kafka_ssl_key_file)):
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"{name}: no file at {path}")

    def kafka_options(self) -> dict[str, Any]:
        """Security keyword arguments for every aiokafka client (producer, consumer, admin)."""
        protocol = self.kafka_security_protocol.upper()
        options: dict[str, Any] = {"security_protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(
                cafile=self.kafka_ssl_ca_file, certfile=self.kafka_ssl_cert_file,
                keyfile=self.kafka_ssl_key_file)
        if protocol.startswith("SASL"):
            options.update(sasl_mechanism=self.kafka_sasl_mechanism,
                           sasl_plain_username=self.kafka_sasl_username,
                           sasl_plain_password=self.kafka_sasl_password)
        return options

    def topic(self, name: str) -> str:
        """The environment's name of a logical topic (``ares.events`` → ``<prefix>ares.events``)."""
        return f"{self.topic_prefix}{name}"

    @property
    def redacted_postgres_dsn(self) -> str:
        return _redact_dsn(self.postgres_dsn)


_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """``NAME`` or the content of the file ``NAME_FILE`` (Kubernetes secrets as files)."""
    if value := env.get(name):
        return value
    if path := env.get(f"{name}_FILE"):
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip() or None
        except OSError as exc:
            raise ConfigError(f"{name}_FILE: cannot read {path}: {exc.strerror}") from None
    return None


def parse_api_tokens(raw: str, name: str = "ARES_API_TOKENS") -> list[tuple[str, str]]:
    """``role:token`` pairs separated by commas (or newlines, for ARES_API_TOKENS_FILE);
    blank entries are skipped. A pair is named by its position, never echoed."""
    pairs: list[tuple[str, str]] = []
    entries = [e.strip() for e in re.split(r"[,\n]", raw)]
    for position, entry in enumerate(entries, start=1):
        if not entry:
            continue
        role, colon, token = entry.partition(":")
        role = role.strip()
        token = token.strip()
        shown = repr(role) if _ROLE_SHOWN_RE.fullmatch(role) else "(not shown)"
        where = f"{name}: pair {position}"
        if not colon:
            raise ConfigError(f"{where} is not role:token (roles: {', '.join(API_ROLES)})")
        if role.lower() not in API_ROLES:
            raise ConfigError(f"{where}: the role {shown} is not one of "
                              f"{', '.join(API_ROLES)}")
        if not _TOKEN_RE.fullmatch(token):
            raise ConfigError(f"{where} ({role.lower()}): the token must be "
                              f"{MIN_API_TOKEN}-{MAX_API_TOKEN} visible ASCII characters "
                              "without spaces or commas, e.g. the output of "
                              "`openssl rand -hex 32`")
        pairs.append((role.lower(), token))
    if not pairs:
        raise ConfigError(f"{name} holds no role:token pair (roles: {', '.join(API_ROLES)})")
    return pairs


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def bool_setting(env: Mapping[str, str], name: str) -> bool:
    """A yes/no variable (1/0, true/false, yes/no, on/off); unset or empty: no."""
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0 (true/false, yes/no, on/off; got {raw!r})")


def _int_setting(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer (got {raw!r})") from None


def _optional_int_setting(env: Mapping[str, str], name: str) -> int | None:
    if not env.get(name):
        return None
    return _int_setting(env, name, 0)


def _float_setting(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number (got {raw!r})") from None


def _redact_dsn(dsn: str) -> str:
    """Hide the password of a DSN: secrets never appear in messages or logs."""
    # Up to the LAST '@' of the authority: a password may itself contain '@'.
    return re.sub(r"(://[^:/@]+:)[^/]*@", r"\1***@", dsn)
