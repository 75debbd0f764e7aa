"""A ReAct agent on the real broker with SIGKILL: ``example.assistant`` hosted by real
``ares run runtime-manager`` processes talks to a local OpenAI-protocol server through the
official ``openai`` SDK; the model (the server) picks ``lookup_order`` (idempotent) then
``send_email`` (at most once). Its worker is killed while the e-mail is being sent: no turn
recorded before the kill is requested from the provider again (the server counts), and the
e-mail goes out once."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from ares.agents import records as r
from ares.client import Client
from ares.commands.model import ReplyStatus
from ares.config import Settings
from ares.events.model import Event
from ares.examples import evidence
from ares.lifecycle import events as ev
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.llm_servers import OpenAIProtocolServer
from tests.support.workers import (
    fleet_events,
    has,
    host_of,
    of_type,
    wait_fleet,
    wait_group,
    workers,
)

log = logging.getLogger(__name__)

PARTITIONS = 4
SESSION_TIMEOUT_MS = 4000


@pytest.fixture
async def plan(kafka_bootstrap: str) -> AsyncIterator[tuple[Settings, TopicPlan]]:
    settings = Settings(kafka_bootstrap=kafka_bootstrap,
                        topic_prefix=f"asst-{uuid.uuid4().hex[:8]}.", request_timeout_s=40.0)
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        yield settings, plan


def email_intents(events: Sequence[Event]) -> list[Event]:
    return [e for e in of_type(events, r.TOOL_INTENT) if e.payload["tool"] == "send_email"]


async def test_a_killed_react_loop_repays_no_turn_and_sends_one_email(
        plan: tuple[Settings, TopicPlan], tmp_path: Path) -> None:
    settings, topics = plan
    ledger = tmp_path / "ledger"
    task = {"question": "Where is my parcel?", "order_id": "A-7", "step_ms": 2000}
    async with OpenAIProtocolServer(delay_s=0.2) as server:
        with workers(settings, PARTITIONS, tmp_path / "logs", ("w-a", "w-b"),
                     session_timeout_ms=SESSION_TIMEOUT_MS, ARES_LLM_PROVIDER="openai",
                     ARES_LLM_BASE_URL=server.base_url, ARES_LLM_API_KEY="sk-local-test",
                     ARES_EXAMPLE_LEDGER_DIR=str(ledger)) as procs:
            await wait_group(settings, topics, members=2)
            async with Client(settings, topics, issuer="test-assistant") as client:
                assert (await client.start_agent("asst-1", "example.assistant")).status \
                    is ReplyStatus.OK
                assert (await client.assign_task("asst-1", "t1", task)).status \
                    is ReplyStatus.OK
                before = (await wait_fleet(settings, topics, ["asst-1"],
                                           lambda events: bool(email_intents(events)), 90,
                                           "sending the e-mail"))["asst-1"]
                victim = host_of(before)
                assert victim is not None
                # The fault hits work: alive, two turns recorded, the e-mail under way.
                assert procs[victim].proc.poll() is None
                recorded_before = [str(e.payload["output"]) for e in
                                   of_type(before, r.LLM_CALL)]
                assert len(recorded_before) == 2
                assert not of_type(before, ev.TASK_COMPLETED)
                requests_before = len(server.requests)
                procs[victim].kill()
                fleet = await wait_fleet(settings, topics, ["asst-1"],
                                         has(ev.TASK_COMPLETED), 120, "answered")
        fleet = await fleet_events(settings, topics)

    events = fleet["asst-1"]
    # The work moved: a second incarnation ran on the other worker.
    [back] = of_type(events, ev.AGENT_RESURRECTED)
    assert back.payload["worker"] != victim
    [done] = of_type(events, ev.TASK_COMPLETED)
    output = json.loads(str(done.payload["output_json"]))
    assert output["tools"] == ["lookup_order", "send_email"]
    assert output["turns"] == 3
    # Each conversation was sent to the provider once: the two turns recorded before the
    # kill were replayed from the log, only the third was requested after it.
    answered = [q for q in server.requests if q.status == 200]
    per_conversation = Counter(q.conversation_hash for q in answered)
    assert len(per_conversation) == 3
    assert set(per_conversation.values()) == {1}
    assert requests_before == 2
    assert len(of_type(events, r.LLM_CALL)) == 3
    # The at-most-once tool the model chose ran once, across both incarnations.
    emails = [line for line in evidence.read_lines(ledger / evidence.SIDE_EFFECTS)
              if line["agent_id"] == "asst-1"]
    assert len(emails) == 1
    log.warning("assistant: moved from %s to %s; %d provider requests for 3 turns", victim,
                back.payload["worker"], len(answered))
