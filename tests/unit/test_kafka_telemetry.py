"""KafkaTelemetry without a broker: a record it cannot publish is logged and counted, never
raised into the agent; and the runtime manager plugs it in only in place of NullTelemetry.
(Publishing on the real broker: tests/integration/replay/test_token_streams.py.)"""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY

from ares.agents.host_api import AgentServices
from ares.config import Settings
from ares.llm.kafka_telemetry import KafkaTelemetry
from ares.llm.telemetry import MemoryTelemetry, StreamId, UsageRecord
from ares.runtime_manager.service import RuntimeManager
from ares.topics import load_topics


def failures(record: str) -> float:
    value = REGISTRY.get_sample_value("ares_llm_telemetry_failures_total", {"record": record})
    return value or 0.0


@pytest.fixture
def telemetry() -> KafkaTelemetry:
    settings = Settings(kafka_bootstrap="127.0.0.1:1")
    return KafkaTelemetry(settings, load_topics(settings))  # never started


async def test_an_unpublished_usage_record_is_logged_in_full_and_counted(
        telemetry: KafkaTelemetry, caplog: pytest.LogCaptureFixture) -> None:
    before = failures("usage")
    record = UsageRecord(tenant="acme", agent_id="a-1", kind="k", task_id="t-1",
                         name="answer", provider="p", model="m", prompt_tokens=5,
                         completion_tokens=7, cost_usd=0.5)
    with caplog.at_level(logging.ERROR, logger="ares.llm.kafka_telemetry"):
        await telemetry.usage(record)  # does not raise
    assert failures("usage") == before + 1
    assert record.usage_id in caplog.text
    assert '"cost_usd": 0.5' in caplog.text


async def test_an_unpublished_stream_is_counted_once_and_never_raises(
        telemetry: KafkaTelemetry, caplog: pytest.LogCaptureFixture) -> None:
    before = failures("tokens")
    with caplog.at_level(logging.ERROR, logger="ares.llm.kafka_telemetry"):
        stream = await telemetry.open_stream(StreamId("a-1", "t-1", "answer", 0),
                                             incarnation=0, restarted=True)
        for text in ("a", "b", "c"):
            await stream.delta(text)
        await stream.end()
    assert failures("tokens") == before + 1
    assert len([r for r in caplog.records if "t-1/answer/0" in r.getMessage()]) == 1


async def test_stop_without_start_is_harmless(telemetry: KafkaTelemetry) -> None:
    await telemetry.stop()
    await telemetry.stop()


def test_the_runtime_manager_plugs_kafka_telemetry_in_place_of_the_null_one() -> None:
    settings = Settings()
    plan = load_topics(settings)
    default = RuntimeManager(settings, plan, services=AgentServices())
    assert isinstance(default.telemetry, KafkaTelemetry)
    assert default.host.services.telemetry is default.telemetry

    memory = MemoryTelemetry()
    own = RuntimeManager(settings, plan, services=AgentServices(telemetry=memory))
    assert own.telemetry is None
    assert own.host.services.telemetry is memory
