"""A runtime manager whose start fails after its broker check (the broker went away in
between, a network partition) exits with a clear error and leaves no client open: a chaos
run saw `Unclosed AIOKafkaProducer` logged by every such exit."""

from __future__ import annotations

import gc
import logging
import uuid
from typing import Any

import pytest

from ares.config import Settings
from ares.errors import UnavailableError
from ares.events.kafka import reader as kafka_reader
from ares.runtime_manager import owner as owner_module
from ares.runtime_manager.service import RuntimeManager
from tests.support.kafka import applied_topics


async def test_a_failed_start_closes_every_client(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, request_timeout_s=3.0,
                        topic_prefix=f"startfail-{uuid.uuid4().hex[:8]}.")

    def unreachable_group(settings: Settings, **options: Any) -> Any:
        # The group's consumer cannot reach its broker: the last client the start opens.
        return kafka_reader.new_consumer(settings.with_overrides(
            kafka_bootstrap="127.0.0.1:1"), **options)

    monkeypatch.setattr(owner_module, "new_consumer", unreachable_group)
    async with applied_topics(settings, partitions=1) as plan:
        manager = RuntimeManager(settings, plan, session_timeout_ms=6000)
        with pytest.raises(UnavailableError, match="joining the runtime group"):
            await manager.start()
        owner = manager.owner
        assert (owner._consumer, owner._scanner, owner._admin) == (None, None, None)
        assert manager._producer is None
        del manager, owner
        with caplog.at_level(logging.ERROR):
            gc.collect()
        assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]
