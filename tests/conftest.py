"""Session fixtures for the real broker and database.

They use the infrastructure named by ARES_KAFKA_BOOTSTRAP / ARES_POSTGRES_DSN, or start the
local one through the same code as `ares dev up`. When it cannot be reached or started, the
tests that need it FAIL with the reason: an integration test is never skipped.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ares import native
from ares.config import Settings
from ares.devenv import DevEnvironment
from ares.devenv import kafka as dev_kafka
from ares.devenv import postgres as dev_postgres
from ares.devenv.process import tail
from ares.errors import InfrastructureError
from ares.logs import quiet_aiokafka


def pytest_configure(config: pytest.Config) -> None:
    """The suite tests the code in the tree: never a compiled module older than its source,
    and the compiled append path whenever the build makes one (``make`` sets
    ARES_EXPECT_NATIVE unless ARES_PURE_PYTHON is set)."""
    problem = native.problem(expect_compiled=bool(os.environ.get("ARES_EXPECT_NATIVE")))
    if problem is not None:
        raise pytest.UsageError(problem)


def _reachable_kafka(bootstrap: str) -> bool:
    try:
        with quiet_aiokafka():
            asyncio.run(dev_kafka.probe(bootstrap))
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    configured = os.environ.get("ARES_KAFKA_BOOTSTRAP")
    if configured:
        if not _reachable_kafka(configured):
            pytest.fail(f"ARES_KAFKA_BOOTSTRAP={configured} does not answer a metadata request",
                        pytrace=False)
        return configured
    try:
        return DevEnvironment.default().up_kafka()
    except InfrastructureError as exc:
        pytest.fail(f"could not start the local Kafka broker: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    configured = os.environ.get("ARES_POSTGRES_DSN")
    if configured:
        try:
            asyncio.run(dev_postgres.probe(configured))
        except Exception as exc:
            pytest.fail(f"ARES_POSTGRES_DSN does not answer SELECT 1: {exc}", pytrace=False)
        return configured
    try:
        return DevEnvironment.default().up_postgres()
    except InfrastructureError as exc:
        pytest.fail(f"could not start the local PostgreSQL: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def settings(kafka_bootstrap: str) -> Settings:
    """Settings with a topic prefix of this test session's own, so runs never interfere."""
    return Settings(kafka_bootstrap=kafka_bootstrap,
                    topic_prefix=f"test-{uuid.uuid4().hex[:8]}.")


@pytest.fixture
def unique() -> str:
    """A short unique token for names (topics, groups, transactional ids) of one test."""
    return uuid.uuid4().hex[:10]


def _broker_log() -> Path:
    return DevEnvironment.default().kafka.log_file


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the tail of the broker log to every failed test that used the broker."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and "kafka_bootstrap" in getattr(item, "fixturenames", ()):
        log = _broker_log()
        if log.exists():
            report.sections.append((f"broker log tail ({log})", tail(log, 60)))
