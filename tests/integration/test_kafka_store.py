"""The Kafka adapter passes the EventStore contract on the real broker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiokafka.admin import NewTopic

from ares.config import Settings
from ares.events.kafka.store import KafkaEventStore
from ares.events.ports import EventStore
from tests.contract.event_store import EventStoreContract, OpenStore
from tests.support.kafka import admin_client

PARTITIONS = 4


@pytest.fixture(scope="module")
async def events_topic(settings: Settings) -> AsyncIterator[str]:
    """One events topic for the module: the contract uses a fresh stream id per test."""
    topic = settings.topic(f"ares.events.contract-{id(settings) % 10_000}")
    async with admin_client(settings.kafka_bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    yield topic
    async with admin_client(settings.kafka_bootstrap) as admin:
        await admin.delete_topics([topic])


class TestKafkaEventStore(EventStoreContract):
    @pytest.fixture
    async def open_store(self, settings: Settings,
                         events_topic: str) -> AsyncIterator[OpenStore]:
        opened: list[KafkaEventStore] = []

        async def open_() -> EventStore:
            store = await KafkaEventStore.open(settings, topic=events_topic)
            opened.append(store)
            return store

        yield open_
        for store in opened:
            await store.close()
