"""Settings: read from ARES_* variables, overridden by flags, validated with a message that
names the setting (and never shows a secret)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ares.config import DEFAULT_BOOTSTRAP, DEFAULT_POSTGRES_DSN, Settings
from ares.errors import ConfigError


def test_defaults_when_nothing_is_set() -> None:
    settings = Settings.from_env({})
    assert settings.kafka_bootstrap == DEFAULT_BOOTSTRAP == "127.0.0.1:9092"
    assert settings.postgres_dsn == DEFAULT_POSTGRES_DSN
    assert settings.topic_prefix == ""
    assert settings.max_record_bytes == 1_048_576
    assert settings.request_timeout_s == 10.0
    assert settings.startup_timeout_s == 300.0
    assert settings.gc_threshold == 20_000


def test_reads_every_variable() -> None:
    settings = Settings.from_env({
        "ARES_KAFKA_BOOTSTRAP": "kafka-0:9092,kafka-1:9092",
        "ARES_POSTGRES_DSN": "postgres://u:p@db:5432/ares",
        "ARES_TOPIC_PREFIX": "staging.",
        "ARES_MAX_RECORD_BYTES": "2048",
        "ARES_REQUEST_TIMEOUT_S": "2.5",
        "ARES_STARTUP_TIMEOUT_S": "0",
        "ARES_GC_THRESHOLD": "0",
    })
    assert settings.kafka_bootstrap == "kafka-0:9092,kafka-1:9092"
    assert settings.postgres_dsn == "postgres://u:p@db:5432/ares"
    assert settings.topic("ares.events") == "staging.ares.events"
    assert settings.max_record_bytes == 2048
    assert settings.request_timeout_s == 2.5
    assert settings.startup_timeout_s == 0.0
    assert settings.gc_threshold == 0


def test_overrides_beat_the_environment_and_none_means_not_given() -> None:
    env = {"ARES_KAFKA_BOOTSTRAP": "from-env:9092", "ARES_TOPIC_PREFIX": "env."}
    settings = Settings.from_env(env, kafka_bootstrap="from-flag:9092", topic_prefix=None)
    assert settings.kafka_bootstrap == "from-flag:9092"
    assert settings.topic_prefix == "env."


@pytest.mark.parametrize("bootstrap", ["nonsense", "host:", ":9092", "host:port",
                                       "good:9092,bad", "", "   "])
def test_bad_bootstrap_names_the_setting(bootstrap: str) -> None:
    with pytest.raises(ConfigError, match="ARES_KAFKA_BOOTSTRAP"):
        Settings.from_env({"ARES_KAFKA_BOOTSTRAP": bootstrap})


def test_a_bad_override_is_rejected_too() -> None:
    with pytest.raises(ConfigError, match="ARES_KAFKA_BOOTSTRAP"):
        Settings.from_env({}, kafka_bootstrap="nonsense")


def test_bad_dsn_names_the_setting_and_hides_the_password() -> None:
    with pytest.raises(ConfigError, match="ARES_POSTGRES_DSN") as caught:
        Settings.from_env({"ARES_POSTGRES_DSN": "mysql://ares:s3cret-pw@db:3306/ares"})
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert "postgresql://user:password@host:port/db" in message


@pytest.mark.parametrize("dsn", ["ares:s3cret@db/ares", "host=db password=s3cret"])
def test_a_dsn_that_is_no_url_is_never_echoed(dsn: str) -> None:
    with pytest.raises(ConfigError, match="ARES_POSTGRES_DSN") as caught:
        Settings.from_env({"ARES_POSTGRES_DSN": dsn})
    assert "s3cret" not in str(caught.value)


def test_redaction_covers_a_password_containing_at_signs() -> None:
    settings = Settings.from_env({"ARES_POSTGRES_DSN": "postgresql://ares:p@ss@w0rd@db/ares"})
    assert settings.redacted_postgres_dsn == "postgresql://ares:***@db/ares"


def test_redacted_dsn_property_hides_the_password() -> None:
    settings = Settings.from_env({"ARES_POSTGRES_DSN": "postgresql://ares:hunter2@db/ares"})
    assert settings.redacted_postgres_dsn == "postgresql://ares:***@db/ares"
    assert "hunter2" not in repr(settings.redacted_postgres_dsn)


@pytest.mark.parametrize("prefix", ["has space.", "slash/", "colon:", "ünïcode."])
def test_bad_topic_prefix_names_the_setting(prefix: str) -> None:
    with pytest.raises(ConfigError, match="ARES_TOPIC_PREFIX"):
        Settings.from_env({"ARES_TOPIC_PREFIX": prefix})


@pytest.mark.parametrize(("name", "value"), [
    ("ARES_MAX_RECORD_BYTES", "lots"),
    ("ARES_MAX_RECORD_BYTES", "512"),
    ("ARES_REQUEST_TIMEOUT_S", "soon"),
    ("ARES_REQUEST_TIMEOUT_S", "0"),
    ("ARES_STARTUP_TIMEOUT_S", "-1"),
    ("ARES_GC_THRESHOLD", "often"),
    ("ARES_GC_THRESHOLD", "50"),
    ("ARES_GC_THRESHOLD", "-1"),
])
def test_bad_numbers_name_the_setting(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


def test_with_overrides_validates() -> None:
    settings = Settings.from_env({})
    assert settings.with_overrides(topic_prefix="dev.").topic("x") == "dev.x"
    with pytest.raises(ConfigError, match="ARES_TOPIC_PREFIX"):
        settings.with_overrides(topic_prefix="bad prefix")


def test_config_error_is_a_usage_error_for_the_cli() -> None:
    assert ConfigError("x").exit_code == 2


def test_settings_are_immutable() -> None:
    settings = Settings.from_env({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.topic_prefix = "x"  # type: ignore[misc]


def test_https_needs_both_files_and_they_must_exist(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="ARES_HTTP_TLS_KEY_FILE is not"):
        Settings.from_env({"ARES_HTTP_TLS_CERT_FILE": str(cert)})
    with pytest.raises(ConfigError, match="ARES_HTTP_TLS_KEY_FILE: no such file"):
        Settings.from_env({"ARES_HTTP_TLS_CERT_FILE": str(cert),
                           "ARES_HTTP_TLS_KEY_FILE": str(tmp_path / "missing.pem")})


def test_the_metrics_port_needs_a_port_of_its_own() -> None:
    assert Settings.from_env({"ARES_METRICS_PORT": "9100"}).metrics_port == 9100
    with pytest.raises(ConfigError, match="port of its own"):
        Settings.from_env({"ARES_METRICS_PORT": "9100", "ARES_HTTP_PORT": "9100"})
    with pytest.raises(ConfigError, match="ARES_METRICS_PORT must be a port number"):
        Settings.from_env({"ARES_METRICS_PORT": "0"})
