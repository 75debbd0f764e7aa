"""``ares topics apply`` and ``list`` as functions: describe, decide (diff.py), then write.

Nothing is written unless every topic's change is allowed: a refusal (a partition decrease,
a co-partitioned repartition without consent, a replication factor the cluster cannot hold)
raises ``RefusedChangeError`` before the first request that changes the cluster.
"""

from __future__ import annotations

import asyncio
import time

from ares.config import Settings
from ares.errors import AresError, TransientError
from ares.topics.admin import TopicAdmin
from ares.topics.diff import ChangeSet, compare, plan_changes
from ares.topics.spec import TopicPlan


class RefusedChangeError(AresError):
    """topics.yaml asks for a change apply must not make; nothing was changed (exit 1)."""

    def __init__(self, refusals: tuple[str, ...]) -> None:
        super().__init__("topics apply refused, nothing was changed:\n"
                         + "\n".join(f"  {line}" for line in refusals))
        self.refusals = refusals


async def inspect_topics(plan: TopicPlan, settings: Settings) -> ChangeSet:
    """Desired against actual for every topic of the plan; changes nothing."""
    async with TopicAdmin(settings) as admin:
        brokers = await admin.broker_count()
        states = await admin.describe([spec.name for spec in plan.topics])
    return plan_changes(plan, states, brokers=brokers, allow_repartition=True)


async def apply_topics(plan: TopicPlan, settings: Settings, *, dry_run: bool = False,
                       allow_repartition: bool = False, prune: bool = False) -> ChangeSet:
    """Create missing topics, fix config drift, add partitions where allowed.

    Returns the change set (what was done, or with ``dry_run`` what would be done). Creates
    go first, then config changes, then partitions, each as one request for all topics so
    that co-partitioned topics grow together. It returns once the cluster's metadata shows
    the result: a broker reports new topics and configs a moment after the controller
    accepted them, and whoever runs next (a service, a second apply) must see them.
    """
    async with TopicAdmin(settings) as admin:
        brokers = await admin.broker_count()
        states = await admin.describe([spec.name for spec in plan.topics])
        changes = plan_changes(plan, states, brokers=brokers,
                               allow_repartition=allow_repartition, prune=prune)
        if changes.refusals:
            raise RefusedChangeError(changes.refusals)
        if dry_run or all(c.unchanged for c in changes.changes):
            return changes
        await admin.create([c.spec for c in changes.changes if c.create])
        await admin.replace_overrides({c.spec.name: c.override_set()
                                       for c in changes.changes if c.config_changes})
        await admin.add_partitions({c.spec.name: c.new_partitions
                                    for c in changes.changes if c.new_partitions})
        await _until_converged(admin, plan, prune=prune, timeout_s=settings.request_timeout_s)
    return changes


async def delete_topics(plan: TopicPlan, settings: Settings) -> list[str]:
    """Delete the plan's topics, returning those that existed (test teardown; there is no CLI
    for it on purpose: deleting ares.events deletes every agent's history)."""
    async with TopicAdmin(settings) as admin:
        return await admin.delete([spec.name for spec in plan.topics])


async def _until_converged(admin: TopicAdmin, plan: TopicPlan, *, prune: bool,
                           timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        states = await admin.describe([spec.name for spec in plan.topics])
        pending = [spec.name for spec in plan.topics
                   if (state := states[spec.name]) is None or compare(spec, state)
                   or (prune and set(state.overrides) - set(spec.configs))]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TransientError(
                f"applied, but after {timeout_s:.0f}s the cluster does not yet report the "
                f"result for {', '.join(pending)}; check with `ares topics list`")
        await asyncio.sleep(0.1)
