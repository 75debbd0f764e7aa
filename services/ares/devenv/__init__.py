"""The local development environment (`ares dev up | down | status`).

A single-node Apache Kafka broker in KRaft mode (or, with ``ares dev up --brokers 3``, a
three-node cluster), resolved from Maven Central, and a PostgreSQL cluster from the
machine's Debian binaries, all on 127.0.0.1. The test harness starts them through the same
code.
"""

from ares.devenv.environment import DevEnvironment, ServiceStatus

__all__ = ["DevEnvironment", "ServiceStatus"]
