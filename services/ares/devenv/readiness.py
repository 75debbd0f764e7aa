"""When a broker can serve what the services need, not merely when its port opens.

A KRaft broker formatted a moment ago answers metadata requests before it can coordinate
anything: ``__consumer_offsets`` and ``__transaction_state`` do not exist until the first
FindCoordinator asks for them, and until their partitions have leaders every group join
and every ``init_transactions`` answers "coordinator not available". Every ares service
needs both, so the local environment is ready only when

1. the cluster answers a metadata request,
2. a group coordinator answers FindCoordinator and every ``__consumer_offsets`` partition
   has a leader,
3. a transaction coordinator hands out a producer id (``InitProducerId``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaProducer, TopicPartition
from aiokafka.client import CoordinationType

from ares.errors import InfrastructureError
from ares.logs import quiet_aiokafka
from ares.tasks import wait_for

PROBE_ID = "ares-readiness-probe"  # the group and transactional id of the probes
POLL_S = 0.25
OFFSETS_TOPIC = "__consumer_offsets"

Progress = Callable[[str], None]
Check = Callable[[str, dict[str, Any]], Awaitable[None]]


class NotServing(Exception):
    """One stage of readiness does not hold yet; the message says what is missing."""


async def wait_until_serving(bootstrap: str, *, timeout_s: float,
                             options: Mapping[str, Any] | None = None,
                             progress: Progress | None = None,
                             alive: Callable[[], bool] | None = None,
                             brokers: int = 1) -> None:
    """Return once the broker at ``bootstrap`` passes every stage (module docstring).

    ``brokers``: how many brokers the metadata answer must name (a local cluster's).

    ``progress`` hears each stage once, as it begins; ``alive`` (the broker's process) is
    checked between attempts so that a crashed broker fails at once, not at the deadline.
    Raises ``InfrastructureError`` naming the stage that did not pass in ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    opts = dict(options or {})
    stages: list[tuple[str, Check]] = list(_STAGES)
    if brokers > 1:
        stages[0] = (f"a metadata answer naming {brokers} brokers", _brokers(brokers))
    for stage, check in stages:
        if progress is not None:
            progress(f"waiting for the Kafka broker at {bootstrap}: {stage}")
        last = "no answer yet"
        while True:
            if alive is not None and not alive():
                raise InfrastructureError(f"the Kafka broker at {bootstrap} exited while "
                                          f"waiting for {stage}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise InfrastructureError(f"the Kafka broker at {bootstrap} did not serve "
                                          f"{stage} within {timeout_s:.0f}s ({last})")
            try:
                with quiet_aiokafka():
                    await wait_for(check(bootstrap, opts), min(left, 10.0))
                break
            except Exception as exc:  # any failure is "not yet"
                last = str(exc) or type(exc).__name__
            await asyncio.sleep(POLL_S)


async def _metadata(bootstrap: str, options: dict[str, Any]) -> None:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **options)
    try:
        await client.bootstrap()
    finally:
        await client.close()


def _brokers(expected: int) -> Check:
    async def check(bootstrap: str, options: dict[str, Any]) -> None:
        client = AIOKafkaClient(bootstrap_servers=bootstrap, **options)
        try:
            await client.bootstrap()
            cluster = await client.fetch_all_metadata()
            registered = len(cluster.brokers())
            if registered < expected:
                raise NotServing(f"{registered} of {expected} brokers registered")
        finally:
            await client.close()
    return check


async def _group_coordinator(bootstrap: str, options: dict[str, Any]) -> None:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **options)
    try:
        await client.bootstrap()
        await client.coordinator_lookup(CoordinationType.GROUP, PROBE_ID)
        cluster = await client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(OFFSETS_TOPIC) or set()
        if not partitions:
            raise NotServing(f"{OFFSETS_TOPIC} does not exist yet")
        leaderless = [p for p in partitions if cluster.leader_for_partition(
            TopicPartition(OFFSETS_TOPIC, p)) in (None, -1)]
        if leaderless:
            raise NotServing(f"{len(leaderless)} partitions of {OFFSETS_TOPIC} have no leader")
    finally:
        await client.close()


async def _transaction_coordinator(bootstrap: str, options: dict[str, Any]) -> None:
    # A transactional producer's start() is FindCoordinator + InitProducerId.
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=PROBE_ID,
                                **options)
    try:
        await producer.start()
    finally:
        await producer.stop()


_STAGES: tuple[tuple[str, Check], ...] = (
    ("a metadata answer", _metadata),
    (f"a group coordinator ({OFFSETS_TOPIC} with leaders)", _group_coordinator),
    ("a transaction coordinator (InitProducerId)", _transaction_coordinator),
)
