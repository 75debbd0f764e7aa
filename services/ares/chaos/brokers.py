"""Which broker of a cluster a fault should hit, and when the cluster is whole again.

Asked at the moment of the fault, through the brokers' direct listeners (the run's
observer): the leader of the most event partitions, the coordinator of the runtime group
and of the writers' transactions, the in-sync state after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence

from aiokafka.admin import AIOKafkaAdminClient

from ares.devenv.quorum import describe
from ares.errors import InfrastructureError
from ares.logs import quiet_aiokafka
from ares.tasks import wait_for

log = logging.getLogger(__name__)
GROUP, TRANSACTION = 0, 1  # FindCoordinator key types


async def _admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await wait_for(admin.start(), 10.0)
    return admin


async def busiest_leader(bootstrap: str, topic: str) -> int | None:
    """The node leading the most partitions of ``topic`` (None when it cannot be told)."""
    admin = await _admin(bootstrap)
    try:
        with quiet_aiokafka():
            [described] = await wait_for(admin.describe_topics([topic]), 10.0)
        leaders = Counter(p["leader"] for p in described["partitions"] if p["leader"] >= 0)
        return leaders.most_common(1)[0][0] if leaders else None
    finally:
        await admin.close()


async def busiest_coordinator(bootstrap: str, group: str | None,
                              transactional_ids: Sequence[str]) -> int | None:
    """The node coordinating ``group`` (if any) and the most of ``transactional_ids``: the
    one whose loss moves the most coordinator state at once (None when none was found)."""
    admin = await _admin(bootstrap)
    votes: Counter[int] = Counter()
    try:
        with quiet_aiokafka():
            keys = [*(((group, GROUP),) if group else ()),
                    *((tid, TRANSACTION) for tid in transactional_ids)]
            for key, kind in keys:
                try:
                    node = await wait_for(admin.find_coordinator(key, kind), 10.0)
                except Exception as exc:  # a coordinator moving: count the others
                    log.info("find_coordinator %s: %r", key, exc)
                    continue
                votes[node] += len(transactional_ids) + 1 if kind == GROUP else 1
    finally:
        await admin.close()
    return votes.most_common(1)[0][0] if votes else None


async def until_in_sync(bootstrap: str, brokers: int, timeout_s: float = 180.0) -> float:
    """Until every broker is registered and no partition is under-replicated; the seconds
    it took. Raises ``InfrastructureError`` with the last state when the time is over."""
    started = time.monotonic()
    while True:
        health = await describe(bootstrap)
        if (health.error is None and len(health.brokers) >= brokers
                and not health.under_replicated):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            state = health.error or (f"{len(health.brokers)} broker(s), "
                                     f"{len(health.under_replicated)} under-replicated")
            raise InfrastructureError(f"the cluster did not return to {brokers} in-sync "
                                      f"brokers within {timeout_s:.0f}s: {state}")
        await asyncio.sleep(1.0)
