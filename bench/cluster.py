"""A fresh Kafka cluster of the benchmarks' own: ``ares bench --cluster 3``.

Three KRaft nodes (broker and controller each) on free ports in a temporary directory,
started through the code of ``ares dev up --brokers 3`` and stopped at the end, on a failure
or Ctrl-C too. From three nodes on, the benchmarks' topics come from the ``cluster`` topic
environment of topics.yaml (replication factor 3, min ISR 2; ``ARES_TOPIC_ENVIRONMENT`` is
set for this process and the workers it starts), and every producer, ours and the
ceilings', acknowledges with ``acks=all``: each append waits for two replicas at least.
Nothing here touches the configured broker; PostgreSQL is the configured one when it
answers, else (``postgres=True``) one of the cluster's own in the same directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ares.config import Settings
from ares.devenv import kafka as dev_kafka
from ares.devenv import postgres as dev_postgres
from ares.devenv.environment import topic_environment
from ares.topics.loader import ENV_ENVIRONMENT

Progress = Callable[[str], None]


def _traversable_base() -> Path:
    """As root, a private PostgreSQL runs as ``postgres`` and must reach its directory."""
    return Path("/var/tmp") if os.geteuid() == 0 else Path(tempfile.gettempdir())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_answers(dsn: str) -> bool:
    try:
        asyncio.run(dev_postgres.probe(dsn))
    except Exception:  # any failure means "not usable": the run brings its own
        return False
    return True


@contextlib.contextmanager
def _environ(**values: str | None) -> Iterator[None]:
    """``os.environ`` with ``values`` (None: unset) for the block, as it was afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        _set_environ(values)
        yield
    finally:
        _set_environ(saved)


def _set_environ(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def private_cluster(settings: Settings, nodes: int, *, postgres: bool = False,
                    progress: Progress = print) -> Iterator[Settings]:
    """``settings`` bound to a fresh ``nodes``-node cluster, and the topic environment that
    goes with its size, for the block; the cluster (and its database) stopped and removed
    after it, whatever happens in it."""
    root = Path(tempfile.mkdtemp(prefix="ares-bench-cluster-", dir=_traversable_base()))
    cluster = dev_kafka.KafkaCluster.on_free_ports(root / "kafka", nodes)
    database: dev_postgres.PostgresLayout | None = None
    try:
        progress(f"starting a {nodes}-node Kafka cluster on {cluster.bootstrap} in {root}")
        dev_kafka.start_cluster(cluster, dev_kafka.kafka_version(), progress=progress)
        dsn = settings.postgres_dsn
        if postgres and not _postgres_answers(dsn):
            database = dev_postgres.PostgresLayout(root / "postgres", _free_port())
            progress(f"PostgreSQL at {dsn} does not answer: starting one on port "
                     f"{database.port}")
            dev_postgres.start(database)
            dsn = database.dsn
        environment = topic_environment(nodes)
        progress(f"cluster ready; topics from the {environment or 'default'} topic environment")
        with _environ(ARES_KAFKA_BOOTSTRAP=cluster.bootstrap, ARES_POSTGRES_DSN=dsn,
                      **{ENV_ENVIRONMENT: environment}):
            yield settings.with_overrides(kafka_bootstrap=cluster.bootstrap, postgres_dsn=dsn)
    finally:
        progress(f"stopping the {nodes}-node Kafka cluster")
        dev_kafka.stop_cluster(cluster)
        if database is not None:
            with contextlib.suppress(Exception):
                dev_postgres.stop(database)
        shutil.rmtree(root, ignore_errors=True)
