#!/usr/bin/env python
"""Record the golden histories of tests/golden/ from real runs of the example agents.

    .venv/bin/python scripts/record_golden_histories.py            # write missing files
    .venv/bin/python scripts/record_golden_histories.py --check    # re-record in memory, compare
    .venv/bin/python scripts/record_golden_histories.py --expected-only  # re-derive .expected.json

Each scenario runs ``ares.examples`` agents with the real SDK under ``LocalRuntime`` over
the in-memory event store (no broker), with the evidence ledger on
(``ARES_EXAMPLE_LEDGER_DIR`` in a temporary directory). The store is wrapped so that every
appended event gets a fixed id (uuid5 of stream and sequence number) and a fixed timestamp
(one second per append from 2025-01-01T00:00:00Z): the same code always records the same
bytes, so ``--check`` can tell whether today's writer still writes what was recorded.

The recorded bytes stand for logs already in Kafka: they are NEVER re-recorded over (the
script refuses to overwrite a ``.avro-records`` file unless ``--force``). When the meaning
of a history changes on purpose (a new fold rule, a new view field), ``--expected-only``
re-derives the expected files from the checked-in bytes with today's code; review the diff.
A new schema release gets new histories (new names), next to these.
See tests/golden/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.unit.test_golden_histories: the expected file's spec
sys.path.insert(0, str(ROOT / "services"))

from tests.unit import test_golden_histories as golden  # noqa: E402

from ares.agents import LocalRuntime  # noqa: E402
from ares.events.memory import MemoryEventStore  # noqa: E402
from ares.events.model import ANY_VERSION, Direction, Event, NewEvent  # noqa: E402
from ares.events.wire.codec import default_codec  # noqa: E402
from ares.events.wire.schemas import EVENT, registry  # noqa: E402
from ares.examples import ChatAgent, PipelineAgent, evidence  # noqa: E402
from ares.examples.pipeline import InjectedCrash  # noqa: E402
from ares.lifecycle import events as ev  # noqa: E402
from ares.lifecycle import state as lc  # noqa: E402

EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
NAMESPACE = uuid.UUID("6f1d2b8e-5a3c-4e47-9b0e-1c6a0f5d9e21")  # for the fixed event ids
SUPERVISOR = "local-runtime"  # the module of the death records the script writes


class FixedStore:
    """An EventStore over a ``MemoryEventStore`` that stamps every appended event with a
    fixed id and time before the real append path seals it."""

    def __init__(self) -> None:
        self.inner = MemoryEventStore()
        self.appends = 0
        self.sequence = 0

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int = ANY_VERSION) -> int:
        stamp = EPOCH + timedelta(seconds=self.appends)
        self.appends += 1
        fixed = []
        for event in events:
            self.sequence += 1
            fixed.append(replace(event, id=str(uuid.uuid5(NAMESPACE,
                                                          f"{stream_id}/{self.sequence}")),
                                 timestamp=stamp))
        return await self.inner.append(stream_id, fixed, expected_version)

    async def read(self, stream_id: str, from_version: int | None = None,
                   limit: int | None = None,
                   direction: Direction = Direction.FORWARD) -> list[Event]:
        return await self.inner.read(stream_id, from_version, limit, direction)

    async def stream_version(self, stream_id: str) -> int:
        return await self.inner.stream_version(stream_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- the scenarios -----------------------------------------------------------------------


async def pipeline_completed(store: FixedStore) -> str:
    """example.pipeline, three tasks without a crash: t1 runs 3 LLM steps and sends its
    e-mail (an at-most-once tool), t2 runs 2 steps and sends none, t3 has a bad input
    (``email: "yes"``) and fails before any step (``task.failed``, not retriable)."""
    rt = LocalRuntime(PipelineAgent, "golden-pipeline-1", store=store)
    await rt.submit({"steps": 3, "email": True, "to": "ops@example.com"}, "t1")
    await rt.submit({"steps": 2, "email": False}, "t2")
    failed = await rt.submit({"steps": 2, "email": "yes"}, "t3")
    if failed.status.value != "failed":
        raise RuntimeError(f"pipeline_completed: t3 did not fail: {failed}")
    return rt.agent_id


async def pipeline_resumed(store: FixedStore) -> str:
    """example.pipeline, one task interrupted mid-way and resumed by a second incarnation:
    4 LLM steps then an e-mail, ``fail_at: 2`` crashes incarnation 1 before step 2. The
    script plays the supervisor as the runtime manager does (``agent.dead`` and
    ``agent.resurrecting`` in one append), ``LocalRuntime.resurrect`` rebuilds the agent
    from the events (no snapshot) and appends ``agent.resurrected``; incarnation 2 replays
    steps 0-1 from the journal, executes 2-3 and sends the e-mail."""
    rt = LocalRuntime(PipelineAgent, "golden-pipeline-2", store=store)
    try:
        await rt.submit({"steps": 4, "email": True, "fail_at": 2, "to": "ops@example.com"},
                        "t1")
    except InjectedCrash as crash:
        life = lc.from_events(await rt.events())
        await rt.sink.append([
            NewEvent(ev.AGENT_DEAD, SUPERVISOR, lc.dead_payload(
                life, "crash", error_type=type(crash).__name__, error_message=str(crash))),
            # what runtime_manager.guard.resurrecting_payload writes for a first restart
            NewEvent(ev.AGENT_RESURRECTING, SUPERVISOR, {
                "incarnation": life.incarnation + 1, "parent_incarnation": life.incarnation,
                "attempt": 1, "backoff_ms": 0, "cause": "crash"}),
        ])
    else:
        raise RuntimeError("pipeline_resumed: fail_at did not crash the first incarnation")
    await rt.resurrect(from_snapshot=False)
    outcomes = await rt.run_open_tasks()
    if [o.status.value for o in outcomes] != ["completed"]:
        raise RuntimeError(f"pipeline_resumed: the resumed task did not complete: {outcomes}")
    return rt.agent_id


async def chat_three_turns(store: FixedStore) -> str:
    """example.chat, three turns: each answer is one LLM call whose prompt holds the
    history folded by ``apply`` from the earlier turns' task.assigned/task.completed."""
    rt = LocalRuntime(ChatAgent, "golden-chat-1", store=store)
    for i, message in enumerate(["hello", "what is ares?", "and kafka?"]):
        await rt.submit({"message": message}, f"turn-{i}")
    return rt.agent_id


Scenario = Callable[[FixedStore], Awaitable[str]]
SCENARIOS: dict[str, Scenario] = {
    "pipeline-completed": pipeline_completed,
    "pipeline-resumed": pipeline_resumed,
    "chat-three-turns": chat_three_turns,
}


# -- recording ---------------------------------------------------------------------------


async def record(scenario: Scenario) -> tuple[list[bytes], dict[str, Any]]:
    """Run ``scenario``; its stream's record values and the ledger of what really ran."""
    store = FixedStore()
    with tempfile.TemporaryDirectory() as tmp:
        previous = os.environ.get(evidence.LEDGER_DIR_ENV)
        os.environ[evidence.LEDGER_DIR_ENV] = tmp
        try:
            stream_id = await scenario(store)
        finally:
            if previous is None:
                os.environ.pop(evidence.LEDGER_DIR_ENV, None)
            else:
                os.environ[evidence.LEDGER_DIR_ENV] = previous
        calls, mails = golden.ledger(Path(tmp))
    events = await store.read(stream_id)
    codec = default_codec()
    values = [codec.encode_event(e) for e in events]
    # What the append path sealed is what goes on the topic: decode it back to be sure.
    if [codec.decode_event(v) for v in values] != events:
        raise RuntimeError(f"{stream_id}: the encoded events do not decode to themselves")
    return values, {"llm_calls": calls, "side_effects": mails}


def expected_file(name: str, scenario: Scenario, values: list[bytes],
                  recording: dict[str, Any]) -> dict[str, Any]:
    codec = default_codec()
    events = [codec.decode_event(v) for v in values]
    event_schema = registry().releases[golden.RELEASE][EVENT]
    return {
        "name": name,
        "description": " ".join((scenario.__doc__ or "").split()),
        "recorded_with": {"schema": EVENT, "release": golden.RELEASE,
                          "fingerprint": event_schema.fingerprint.hex(),
                          "script": "scripts/record_golden_histories.py"},
        **golden.expected_of(events),
        # Not derivable from the bytes: what the recording run executed for real.
        "recording": {"ledger": recording},
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=False, ensure_ascii=False) + "\n",
                    encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="re-record in memory; exit 1 if the bytes differ from the files")
    mode.add_argument("--expected-only", action="store_true",
                      help="re-derive the .expected.json files from the checked-in bytes")
    parser.add_argument("--force", action="store_true",
                        help="overwrite existing .avro-records files (breaks their purpose)")
    parser.add_argument("--out", type=Path, default=golden.GOLDEN)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for name, scenario in SCENARIOS.items():
        records_path = out / f"{name}{golden.RECORDS_SUFFIX}"
        expected_path = out / f"{name}{golden.EXPECTED_SUFFIX}"
        if args.expected_only:
            old = json.loads(expected_path.read_text(encoding="utf-8"))
            values = golden.read_records(records_path)
            write_json(expected_path, expected_file(name, scenario, values,
                                                    old["recording"]["ledger"]))
            print(f"{expected_path}: re-derived from {len(values)} recorded events")
            continue
        values, recording = asyncio.run(record(scenario))
        if args.check:
            same = records_path.exists() and golden.read_records(records_path) == values
            print(f"{name}: {'same bytes' if same else 'DIFFERENT bytes'} "
                  f"({len(values)} events)")
            status |= 0 if same else 1
            continue
        if records_path.exists() and not args.force:
            print(f"{records_path}: exists, kept (golden bytes are not re-recorded; "
                  "--force to overwrite)")
            continue
        expected = expected_file(name, scenario, values, recording)  # before writing either
        golden.write_records(records_path, values)
        write_json(expected_path, expected)
        print(f"{records_path}: {len(values)} events, {records_path.stat().st_size} bytes")
    return status


if __name__ == "__main__":
    sys.exit(main())
