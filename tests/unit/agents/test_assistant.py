"""``example.assistant`` against local servers that speak the OpenAI and the Anthropic wire
protocols, through the official SDKs: the tool loop, a 429 honoured and retried, a 400
recorded as a failed step, a malformed body a clear error. No Kafka: the agent runs in a
``LocalRuntime`` (the runtime's own journal and replay over the memory store)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ares.agents import AgentServices, LocalRuntime, OutcomeStatus
from ares.agents import records as r
from ares.examples import evidence
from ares.examples.assistant import AssistantAgent
from ares.llm import provider_from_env
from tests.support.llm_servers import (
    AnthropicProtocolServer,
    OpenAIProtocolServer,
    ProtocolServer,
)
from tests.unit.agents.support import FakeClock

TASK = {"question": "Where is my parcel?", "order_id": "A-7"}


@pytest.fixture(params=["openai", "anthropic"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[ProtocolServer]:
    kind = OpenAIProtocolServer if request.param == "openai" else AnthropicProtocolServer
    async with kind() as running:
        yield running


def runtime(server: ProtocolServer, clock: FakeClock) -> LocalRuntime:
    provider = provider_from_env({"ARES_LLM_PROVIDER": server.protocol,
                                  "ARES_LLM_BASE_URL": server.base_url,
                                  "ARES_LLM_API_KEY": "sk-local-test"})
    return LocalRuntime(AssistantAgent, "asst-1",
                        services=AgentServices(llm=provider, clock=clock))


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(evidence.LEDGER_DIR_ENV, str(tmp_path))
    return tmp_path


async def test_the_model_picks_both_tools_then_answers(server: ProtocolServer,
                                                       ledger: Path) -> None:
    outcome = await runtime(server, FakeClock()).submit(TASK)
    assert outcome.status is OutcomeStatus.COMPLETED
    assert outcome.output["tools"] == ["lookup_order", "send_email"]
    assert outcome.output["answer"]
    assert len(server.requests) == 3
    assert len(list(evidence.read_lines(ledger / evidence.SIDE_EFFECTS))) == 1


async def test_a_429_is_retried_after_the_servers_retry_after(server: ProtocolServer) -> None:
    clock = FakeClock()
    server.fail_next(429, headers={"Retry-After": "7"})
    outcome = await runtime(server, clock).submit(TASK)
    assert outcome.status is OutcomeStatus.COMPLETED
    assert [q.status for q in server.requests] == [429, 200, 200, 200]
    assert clock.sleeps
    assert clock.sleeps[0] >= 7


async def test_a_400_is_a_failed_step_on_record(server: ProtocolServer) -> None:
    server.fail_next(400)
    rt = runtime(server, FakeClock())
    outcome = await rt.submit(TASK)
    assert outcome.status is OutcomeStatus.FAILED
    [failed] = [e.payload for e in await rt.events() if e.type == r.STEP_FAILED]
    assert failed["error_type"] == "ares.llm.base.LlmRequestError"
    assert "400" in str(failed["error"])
    assert len(server.requests) == 1  # not retried


async def test_a_malformed_body_is_a_clear_error(server: ProtocolServer) -> None:
    server.malformed_next()
    rt = runtime(server, FakeClock())
    outcome = await rt.submit(TASK)
    assert outcome.status is OutcomeStatus.FAILED
    [failed] = [e.payload for e in await rt.events() if e.type == r.STEP_FAILED]
    error: Any = failed["error"]
    assert "answered something that is not a" in error  # names what went wrong
    assert server.base_url in error  # and where
    assert "sk-local-test" not in error
    assert failed["error_type"] == "ares.llm.base.LlmRequestError"
