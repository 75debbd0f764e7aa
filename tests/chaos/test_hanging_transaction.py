"""The smallest reproduction of the integrity violation the chaos run found (seed 20261130).

A broker SIGKILLed while a writer's transaction was in PREPARE_COMMIT restarted and its
transaction coordinator skipped the COMMIT markers ("Couldn't find leader endpoint for
partitions ... likely deleted already"): the transaction's record on ares.events/1
(agent-06 v2 ``task.assigned``) was left undecided — a *hanging transaction*, the partition's
last stable offset (LSO) stuck below its high watermark. The next owner fenced the writer
(epoch 0 -> 1), scanned up to the LSO (missing v2), appended its own v2 ``agent.dead``, and
its COMMIT marker for the same producer id completed the hanging batch too: two version 2s
in the log, the chain broken, the agent quarantined.

The owner must not take over a partition whose LSO stays below its high watermark after
``init_transactions``: once the previous owner is fenced, nothing but a hanging transaction
can hold the LSO back, and writing then makes the hidden records visible behind the
writer's back. Here a foreign open transaction stands in for the hanging one (the broker
bug itself is a race we cannot trigger on demand); the effect on the writer is the same.
"""

from __future__ import annotations

import uuid

from ares.config import Settings
from ares.errors import AresError
from ares.events.chain import verify_chain
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import NewEvent
from ares.topics import EVENTS
from tests.support.kafka import applied_topics, undecided_record


async def test_a_writer_refuses_a_partition_with_a_hanging_transaction(
    kafka_bootstrap: str,
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"hang-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=1) as plan:
        topic = plan.name(EVENTS)
        stream = "agent-hanging"
        async with undecided_record(kafka_bootstrap, topic, stream, 0) as intruder:
            # The open transaction holds the LSO at its first offset, as a hanging one does.
            refused = False
            try:
                store = await KafkaEventStore.open(settings, owned=[0], topic=topic)
            except AresError:
                refused = True
            else:
                try:
                    await store.append(stream, [NewEvent("agent.dead", "chaos-test",
                                                         {"cause": "worker_lost"})])
                finally:
                    await store.close()
            await intruder.commit_transaction()  # the hidden record becomes visible
        reader = await KafkaEventStore.open(settings, owned=[], topic=topic)
        try:
            events = await reader.read(stream)
        finally:
            await reader.close()
        assert refused, "the writer took over and wrote behind a hanging transaction"
        verify_chain(events)
