"""The local development environment (`ares dev up | down | status`).

A single-node Apache Kafka broker in KRaft mode, resolved from Maven Central, and a
PostgreSQL cluster from the machine's Debian binaries, both on 127.0.0.1. The test harness
starts them through the same code.
"""

from ares.devenv.environment import DevEnvironment, ServiceStatus

__all__ = ["DevEnvironment", "ServiceStatus"]
