"""`ares dev up | down | status`: the broker and the database as one environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ares.devenv import kafka, postgres
from ares.devenv.paths import dev_home
from ares.devenv.readiness import Progress


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    name: str
    running: bool
    version: str
    address: str
    pid: int | None
    data_dir: Path
    log_file: Path


def _port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@dataclass(frozen=True, slots=True)
class DevEnvironment:
    """The local Kafka broker and PostgreSQL cluster, rooted at one directory."""

    root: Path
    kafka: kafka.KafkaLayout
    postgres: postgres.PostgresLayout

    @classmethod
    def default(cls) -> DevEnvironment:
        root = dev_home()
        return cls(
            root=root,
            kafka=kafka.KafkaLayout(
                root / "kafka",
                port=_port("ARES_DEV_KAFKA_PORT", 9092),
                controller_port=_port("ARES_DEV_KAFKA_CONTROLLER_PORT", 9093),
            ),
            postgres=postgres.PostgresLayout(
                root / "postgres", port=_port("ARES_DEV_POSTGRES_PORT", 5432)
            ),
        )

    def up(self, progress: Progress | None = None) -> list[ServiceStatus]:
        """Start what is not running, wait for readiness, return the status (idempotent).

        ``progress`` hears what is being waited for, one line a stage."""
        self.root.mkdir(parents=True, exist_ok=True)
        kafka.start(self.kafka, kafka.kafka_version(), progress=progress)
        if progress is not None:
            progress("waiting for PostgreSQL")
        postgres.start(self.postgres)
        return self.status()

    def up_kafka(self) -> str:
        kafka.start(self.kafka, kafka.kafka_version())
        return self.kafka.bootstrap

    def up_postgres(self) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        postgres.start(self.postgres)
        return self.postgres.dsn

    def down(self) -> list[str]:
        """Stop both; returns the names of what was running."""
        stopped = []
        if kafka.stop(self.kafka):
            stopped.append("kafka")
        if postgres.stop(self.postgres):
            stopped.append("postgres")
        return stopped

    def status(self) -> list[ServiceStatus]:
        kafka_pid = kafka.running_pid(self.kafka)
        version_file = self.kafka.version_file
        kafka_version = version_file.read_text().strip() if version_file.exists() else "-"
        pg_pid = postgres.running_pid(self.postgres)
        return [
            ServiceStatus("kafka", kafka_pid is not None, f"Apache Kafka {kafka_version}",
                          self.kafka.bootstrap, kafka_pid, self.kafka.data_dir,
                          self.kafka.log_file),
            ServiceStatus("postgres", pg_pid is not None,
                          f"PostgreSQL {_safe(postgres.server_version)}", self.postgres.dsn,
                          pg_pid, self.postgres.data_dir, self.postgres.log_file),
        ]


def _safe(fn: object) -> str:
    try:
        return str(fn())  # type: ignore[operator]
    except Exception:  # status must print even when the binaries are missing
        return "not installed"
