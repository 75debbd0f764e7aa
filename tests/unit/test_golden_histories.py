"""Golden histories: event logs recorded from real runs of the example agents, replayed.

``tests/golden/<name>.avro-records`` holds the exact Kafka record values (Avro single-object
encoding, schema ares.v1.Event as released in v1) of one agent's stream, as written by a
real run of ``ares.examples`` under ``LocalRuntime`` (``scripts/record_golden_histories.py``);
``<name>.expected.json`` holds what that run's events must replay to. The bytes are never
re-recorded: they stand for logs already in Kafka. A change that can no longer read them,
verify their hash chain, fold them to the same lifecycle, or replay their tasks from the
journal without executing anything (or with a ``NonDeterminismError``) fails here.
See tests/golden/README.md for the file formats and when to update what.

``expected_of`` is the one definition of what the expected file records; the generator
script imports it, so recording and checking cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ares.agents import AgentServices, LocalRuntime, OutcomeStatus
from ares.agents import records as r
from ares.agents.agent import Agent
from ares.agents.host_api import run_task
from ares.agents.journal import RecordedCall, TaskJournal, open_tasks, task_journals
from ares.agents.registry import AgentFactory
from ares.events.chain import ChainError, event_hash, verify_chain
from ares.events.memory import MemoryEventStore, MemoryLog
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.wire.canonical import canonical_json, parse_json
from ares.events.wire.codec import HEADER_SIZE, MAGIC, Codec, default_codec
from ares.events.wire.schemas import EVENT, registry
from ares.examples import REGISTRY, evidence
from ares.lifecycle import events as ev
from ares.lifecycle import state as lc
from ares.lifecycle.recovery import state_hash
from ares.lifecycle.verification import StreamVerifier
from ares.llm.base import LlmResult
from ares.views.agents import agent_view

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
RECORDS_SUFFIX = ".avro-records"
EXPECTED_SUFFIX = ".expected.json"
# The histories checked in; a missing (or an unexpected) file fails test_the_golden_set.
HISTORIES = ("chat-three-turns", "pipeline-completed", "pipeline-resumed")
RESURRECTED = ("pipeline-resumed",)  # the histories with a death and a resurrection
RELEASE = "v1"  # the Event schema release the recorded bytes were written with
_LENGTH = struct.Struct(">I")


# -- the files ---------------------------------------------------------------------------


def read_records(path: Path) -> list[bytes]:
    """The record values of a ``.avro-records`` file: each a 4-byte big-endian length and
    that many bytes, back to back, nothing else."""
    data = path.read_bytes()
    values: list[bytes] = []
    offset = 0
    while offset < len(data):
        if offset + _LENGTH.size > len(data):
            raise ValueError(f"{path.name}: torn length prefix at byte {offset}")
        (size,) = _LENGTH.unpack_from(data, offset)
        offset += _LENGTH.size
        if offset + size > len(data):
            raise ValueError(f"{path.name}: record at byte {offset} wants {size} bytes, "
                             f"{len(data) - offset} left")
        values.append(data[offset:offset + size])
        offset += size
    return values


def write_records(path: Path, values: Iterable[bytes]) -> None:
    path.write_bytes(b"".join(_LENGTH.pack(len(v)) + v for v in values))


def read_expected(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / f"{name}{EXPECTED_SUFFIX}").read_text())
    return data


def decode_history(name: str, codec: Codec | None = None) -> list[Event]:
    codec = codec or default_codec()
    return [codec.decode_event(v) for v in read_records(GOLDEN / f"{name}{RECORDS_SUFFIX}")]


# -- what a history replays to (the expected file's derived sections) --------------------


def factory_of(events: Sequence[Event]) -> tuple[AgentFactory, str, dict[str, Any]]:
    """The agent factory, kind and config the stream's first ``agent.started`` names (the
    runtime's way: the kind is looked up in the registry of built-in examples)."""
    started = next(e for e in events if e.type == ev.AGENT_STARTED)
    kind = str(started.payload["kind"])
    config = parse_json(str(started.payload["config_json"]))
    return REGISTRY.factory(kind), kind, config


def rebuilt_agent(events: Sequence[Event]) -> Agent:
    """A fresh agent ``apply``-ed every event: what a resurrection without snapshot builds."""
    factory, _, config = factory_of(events)
    agent = factory(events[0].stream_id, config)
    for event in events:
        agent.apply(event)
    return agent


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def _call_summary(call: RecordedCall) -> dict[str, Any]:
    out: dict[str, Any] = {"position": call.position, "kind": call.kind, "name": call.name,
                           "occurrence": call.occurrence}
    if call.kind == r.TOOL:
        out["attempts"] = [{"call_id": a.call_id, "effect": a.effect,
                            "idempotency_key": a.idempotency_key, "outcome": a.outcome,
                            "result": a.result} for a in call.attempts]
        settled = [a for a in call.attempts if a.outcome == "completed"]
        result = settled[-1].result if settled else None
    else:
        out["completed"] = call.completed
        result = call.result
        if call.llm is not None:
            out["prompt_hash"] = call.llm.get("prompt_hash")
            out["model"] = call.llm.get("model")
    out["result"] = result
    out["result_sha256"] = _digest(result)
    return out


def journal_summary(events: Sequence[Event]) -> list[dict[str, Any]]:
    tasks = []
    for task_id, journal in task_journals(events).items():
        outcome = journal.outcome
        tasks.append({
            "task_id": task_id,
            "input": None if journal.task is None else journal.task.input,
            "outcome": None if outcome is None else outcome.type,
            "output": (None if outcome is None or outcome.type != ev.TASK_COMPLETED
                       else parse_json(str(outcome.payload["output_json"]))),
            "resumed": len(journal.resumed),
            "calls": [_call_summary(journal.calls[p]) for p in sorted(journal.calls)],
        })
    return tasks


VIEW_KEYS = ("agent_id", "kind", "status", "incarnation", "restarts", "deaths",
             "recent_deaths", "version", "last_event_type", "current_task", "tasks", "tokens",
             "in_doubt")


def expected_of(events: Sequence[Event]) -> dict[str, Any]:
    """Everything the expected file derives from the events (the sections a test compares)."""
    _, kind, config = factory_of(events)
    codec = default_codec()
    agent = rebuilt_agent(events)
    snapshot = agent.snapshot()
    view = agent_view(events).to_json()
    return {
        "stream_id": events[0].stream_id,
        "kind": kind,
        "config": config,
        "event_count": len(events),
        "last_version": events[-1].version,
        "last_hash": events[-1].hash,
        "events": [{"version": e.version, "type": e.type, "module": e.module,
                    "payload_record": codec.prepare_payload(e.type, e.payload).record,
                    "hash": e.hash} for e in events],
        "lifecycle": lc.from_events(events).to_json(),
        "view": {k: view[k] for k in VIEW_KEYS},
        "journals": journal_summary(events),
        "agent_state": {"snapshot": snapshot, "sha256": state_hash(snapshot)},
    }


# -- test doubles ------------------------------------------------------------------------


class NoLlm:
    """The service LLM of a replay: any call is a step paid twice."""

    default_model = "must-not-be-called"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        self.calls += 1
        raise AssertionError(f"replay called the LLM (prompt {prompt[:60]!r})")


class CollectingSink:
    """An ``AgentSink`` that keeps what a re-run appends (nothing goes to a store)."""

    def __init__(self) -> None:
        self.batches: list[list[NewEvent]] = []

    async def append(self, events: Sequence[NewEvent], alerts: Sequence[Any] = ()) -> int:
        self.batches.append(list(events))
        return len(self.batches)

    def heartbeat(self, progress: str | None = None) -> None:
        return None


def seeded_store(events: Sequence[Event]) -> MemoryEventStore:
    """A memory store whose stream holds ``events`` as they were decoded (not re-sealed):
    the log a runtime finds after a restart."""
    log = MemoryLog(events=list(events), streams={events[0].stream_id: list(events)})
    for event in events:
        log.table.observe(event)
    return MemoryEventStore(log)


def ledger(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return (list(evidence.read_lines(directory / evidence.LLM_CALLS)),
            list(evidence.read_lines(directory / evidence.SIDE_EFFECTS)))


def _calls(journal: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    return [c for c in journal["calls"] if c["kind"] == kind]


def _ledger_env(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv(evidence.LEDGER_DIR_ENV, str(directory))
    return directory


# -- the tests ---------------------------------------------------------------------------


def test_the_golden_set_is_complete() -> None:
    def names(suffix: str) -> list[str]:
        return sorted(p.name.removesuffix(suffix) for p in GOLDEN.glob(f"*{suffix}"))

    records, expected = names(RECORDS_SUFFIX), names(EXPECTED_SUFFIX)
    assert records == expected == sorted(HISTORIES)
    assert sum((GOLDEN / f"{n}{RECORDS_SUFFIX}").stat().st_size for n in HISTORIES) < 64_000


@pytest.mark.parametrize("name", HISTORIES)
def test_every_record_decodes_with_todays_codec(name: str) -> None:
    expected = read_expected(name)
    values = read_records(GOLDEN / f"{name}{RECORDS_SUFFIX}")
    schemas = registry()
    v1 = schemas.releases[RELEASE][EVENT].fingerprint
    assert len(values) == expected["event_count"]
    for value in values:
        # Single-object encoding: C3 01, then the writer's fingerprint: released Event v1.
        assert value[:2] == MAGIC
        assert value[2:HEADER_SIZE] == v1
        assert value[2:HEADER_SIZE].hex() == expected["recorded_with"]["fingerprint"]
    events = decode_history(name)
    assert {e.stream_id for e in events} == {expected["stream_id"]}
    assert [(e.version, e.type, e.module, e.hash) for e in events] == [
        (e["version"], e["type"], e["module"], e["hash"]) for e in expected["events"]]
    # The compiled reader and fastavro's (the reference) read the same events.
    assert decode_history(name, Codec(compiled=False)) == events
    # The generic decode agrees with decode_event field by field.
    for value, event in zip(values, events, strict=True):
        record_name, record = default_codec().decode(value)
        assert record_name == EVENT
        assert record["payload"] == dict(event.payload)
        assert (record["id"], record["version"], record["timestamp"], record["hash"]) == (
            event.id, event.version, event.timestamp, event.hash)


@pytest.mark.parametrize("name", HISTORIES)
def test_reencoding_gives_the_recorded_bytes(name: str) -> None:
    codec = default_codec()
    written_with = registry().releases[RELEASE][EVENT]
    values = read_records(GOLDEN / f"{name}{RECORDS_SUFFIX}")
    for value in values:
        event = codec.decode_event(value)
        # Re-encoded from its fields alone with the schema it was written with (no wire
        # body to lean on): the recorded bytes. Its hash (the v1 canonical encoding) holds.
        again = MAGIC + written_with.fingerprint + codec.event_body(
            replace(event), hash_=event.hash, schema=written_with)
        assert again == value, f"{event.type} v{event.version}"
        assert hashlib.sha256(codec.event_body(event, schema=written_with)).hexdigest() \
            == event.hash
        # With today's schema (signature fields after the hash) it reads back the same,
        # through the event path and the generic record path the CLI's `events write` uses.
        assert codec.decode_event(codec.encode_event(replace(event))) == event
        _, record = codec.decode(value)
        assert codec.decode_event(codec.encode(EVENT, record)) == event
        assert (event.signature, event.key_id) == (None, None)  # legacy: unsigned
    assert [p.record for p in (codec.prepare_payload(e.type, e.payload)
                               for e in map(codec.decode_event, values))] == [
        e["payload_record"] for e in read_expected(name)["events"]]


@pytest.mark.parametrize("name", HISTORIES)
def test_hash_chain_and_versions(name: str) -> None:
    expected = read_expected(name)
    events = decode_history(name)
    assert [e.version for e in events] == list(range(1, len(events) + 1))
    head = StreamHead(expected["last_version"], expected["last_hash"])
    assert verify_chain(events) == head
    # The slow path too: hashes recomputed from the decoded fields, not the wire body.
    stripped = [replace(e) for e in events]
    assert all(e.wire_body is None for e in stripped)
    assert verify_chain(stripped) == head
    # Today's canonical encoding has the (null) signature fields: not what v1 hashed.
    assert all(event_hash(e) != e.hash for e in events)
    # Recovery's verifier accepts the stream up to the writer's head.
    verifier = StreamVerifier(expected["stream_id"])
    verifier.feed_many(events)
    assert verifier.finish(head) is None
    assert verifier.applied == len(events)
    # ...and the check is real: one changed payload field breaks it at that version.
    middle = len(events) // 2
    forged = events[middle]
    payload = {**forged.payload, "task_id": "forged"}
    tampered = [*stripped[:middle], replace(forged, payload=payload), *stripped[middle + 1:]]
    with pytest.raises(ChainError) as broken:
        verify_chain(tampered)
    assert (broken.value.version, broken.value.kind) == (forged.version, "hash_mismatch")


@pytest.mark.parametrize("name", HISTORIES)
def test_lifecycle_fold_rebuilds_the_recorded_state(name: str) -> None:
    expected = read_expected(name)
    events = decode_history(name)
    life = lc.from_events(events)
    got = life.to_json()
    # Compared field by field over the recorded fields: a new field is not a break.
    assert {k: got.get(k) for k in expected["lifecycle"]} == expected["lifecycle"]
    assert lc.AgentLifecycle.from_json(got) == life
    # fold one event at a time (the host's live path) agrees with fold_all (recovery's).
    state = lc.AgentLifecycle(expected["stream_id"])
    for event in events:
        state = lc.fold(state, event)
    assert state == life
    assert state_hash(got) == state_hash(lc.fold_all(lc.AgentLifecycle(life.agent_id),
                                                     events).to_json())
    view = agent_view(events).to_json()
    assert {k: view.get(k) for k in expected["view"]} == expected["view"]


@pytest.mark.parametrize("name", HISTORIES)
def test_journals_and_agent_state(name: str) -> None:
    expected = read_expected(name)
    events = decode_history(name)
    assert journal_summary(events) == expected["journals"]
    assert open_tasks(events) == []  # every recorded task has its outcome
    agent = rebuilt_agent(events)
    assert agent.snapshot() == expected["agent_state"]["snapshot"]
    assert state_hash(agent.snapshot()) == expected["agent_state"]["sha256"]
    # Whatever ``expected_of`` derives today is what was recorded (nothing left unchecked).
    derived = expected_of(events)
    assert {k: expected[k] for k in derived if k not in ("lifecycle", "view")} == {
        k: v for k, v in derived.items() if k not in ("lifecycle", "view")}


@pytest.mark.parametrize("name", HISTORIES)
async def test_every_task_replays_from_its_journal_without_executing(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each task run again over the events before its outcome (a resurrection that died
    just before ``task.completed``/``task.failed``): every recorded call returns its
    recorded result, the LLM and the tools are not called, and the outcome record is the
    recorded one, byte for byte."""
    expected = read_expected(name)
    events = decode_history(name)
    factory, kind, config = factory_of(events)
    directory = _ledger_env(monkeypatch, tmp_path / "ledger")
    incarnation = lc.from_events(events).incarnation + 1
    replayed = 0
    for summary in expected["journals"]:
        task_id = summary["task_id"]
        [end] = [i for i, e in enumerate(events) if e.type in (ev.TASK_COMPLETED,
                 ev.TASK_FAILED) and e.payload["task_id"] == task_id]
        recorded = events[end]
        assert recorded.type == summary["outcome"]
        prefix = events[:end]
        agent = factory(expected["stream_id"], config)
        for event in prefix:
            agent.apply(event)
        journal = TaskJournal.from_events(task_id, prefix)
        assert journal.task is not None
        assert journal.outcome is None
        assert sorted(journal.calls) == [c["position"] for c in summary["calls"]]
        llm = NoLlm()
        sink = CollectingSink()
        outcome = await run_task(agent, journal.task, journal, sink, AgentServices(llm=llm),
                                 incarnation, f"agent.{kind}")

        assert not outcome.from_journal  # the handler really ran again
        if recorded.type == ev.TASK_COMPLETED:
            assert outcome.status is OutcomeStatus.COMPLETED, outcome.to_json()
            assert outcome.output == summary["output"]
        else:
            assert outcome.status is OutcomeStatus.FAILED, outcome.to_json()
            assert outcome.error_type == recorded.payload["error_type"]
        stats = outcome.stats
        assert (stats.llm_calls, stats.executed_steps, stats.tool_calls) == (0, 0, 0)
        assert stats.reused_llm_calls == len(_calls(summary, r.LLM))
        assert stats.reused_steps == len(_calls(summary, r.STEP))
        assert stats.reused_tool_calls == len(_calls(summary, r.TOOL))
        assert llm.calls == 0
        assert getattr(getattr(agent, "provider", None), "calls", 0) == 0
        # One append: the resume record (when something was recorded) and the outcome,
        # with the recorded payload.
        [batch] = sink.batches
        resumed = [r.TASK_RESUMED] if summary["calls"] else []
        assert [e.type for e in batch] == [*resumed, recorded.type]
        if resumed:
            assert batch[0].payload["recorded_calls"] == len(summary["calls"])
        assert dict(batch[-1].payload) == dict(recorded.payload)
        # A task whose journal holds its outcome does not run at all.
        done = TaskJournal.from_events(task_id, events)
        again = await run_task(agent, journal.task, done, CollectingSink(),
                               AgentServices(llm=llm), incarnation, f"agent.{kind}")
        assert again.from_journal
        assert (again.status, again.output) == (outcome.status, outcome.output)
        replayed += 1
    assert replayed == len(expected["journals"]) >= 1
    assert ledger(directory) == ([], [])  # no real LLM execution, no e-mail


def _open_task_cuts(events: Sequence[Event]) -> list[int]:
    """Prefix lengths that end while a task is open and has recorded a call: where a crash
    leaves something to resume."""
    cuts = []
    for n in range(1, len(events)):
        open_ = open_tasks(events[:n])
        if open_ and not open_[0][1].is_empty:
            cuts.append(n)
    return cuts


@pytest.mark.parametrize("name", HISTORIES)
async def test_a_crash_at_any_recorded_call_resumes_to_the_recorded_output(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log cut after every record of an open task, then resurrected with
    ``LocalRuntime`` over the decoded events: the recorded calls are not executed again,
    the rest is, and the task ends with the output the history recorded."""
    expected = read_expected(name)
    events = decode_history(name)
    factory, _, config = factory_of(events)
    outputs = {j["task_id"]: j for j in expected["journals"]}
    cuts = _open_task_cuts(events)
    assert cuts
    for n in cuts:
        prefix = events[:n]
        [(task, journal)] = open_tasks(prefix)
        directory = _ledger_env(monkeypatch, tmp_path / f"cut-{n}")
        rt = LocalRuntime(factory, expected["stream_id"], config, store=seeded_store(prefix))
        rt.incarnation = max(lc.from_events(prefix).incarnation, 1)
        await rt.resurrect(from_snapshot=False)
        [outcome] = await rt.run_open_tasks()

        summary = outputs[task.task_id]
        assert outcome.status is OutcomeStatus.COMPLETED, (n, outcome.to_json())
        assert outcome.output == summary["output"], n
        recorded_llm = sum(1 for c in journal.calls.values() if c.kind == r.LLM)
        assert outcome.stats.reused_llm_calls == recorded_llm, n
        assert outcome.stats.llm_calls == len(_calls(summary, r.LLM)) - recorded_llm, n
        calls, mails = ledger(directory)
        assert len(calls) == outcome.stats.llm_calls, n
        # The e-mail is sent once over the two runs; in this run, unless its outcome was
        # already recorded in the prefix.
        email_recorded = any(c.kind == r.TOOL and any(a.outcome == "completed"
                                                      for a in c.attempts)
                             for c in journal.calls.values())
        sends = len(_calls(summary, r.TOOL))
        assert len(mails) == (0 if email_recorded else sends), n
        after = await rt.events()
        verify_chain(after)
        assert after[:n] == list(prefix)
        assert lc.from_events(after).tasks_completed == (
            lc.from_events(prefix).tasks_completed + 1)


@pytest.mark.parametrize("name", RESURRECTED)
async def test_the_recorded_resurrection_reproduces_the_recorded_tail(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut just before the recorded ``agent.resurrected`` and resurrect: the new incarnation
    appends the very records the recording did (ids and times aside), executing exactly
    what the recording's second incarnation executed."""
    expected = read_expected(name)
    events = decode_history(name)
    factory, _, config = factory_of(events)
    [cut] = [i for i, e in enumerate(events) if e.type == ev.AGENT_RESURRECTED]
    assert [e.type for e in events[cut - 2:cut]] == [ev.AGENT_DEAD, ev.AGENT_RESURRECTING]
    prefix = events[:cut]
    directory = _ledger_env(monkeypatch, tmp_path / "ledger")
    rt = LocalRuntime(factory, expected["stream_id"], config, store=seeded_store(prefix))
    rt.incarnation = lc.from_events(prefix).incarnation
    await rt.resurrect(from_snapshot=False)
    await rt.run_open_tasks()
    after = await rt.events()

    def shape(e: Event) -> tuple[Any, ...]:
        return e.version, e.type, e.module, dict(e.payload), dict(e.metadata)

    assert [shape(e) for e in after] == [shape(e) for e in events]
    calls, mails = ledger(directory)
    recording = expected["recording"]["ledger"]
    incarnation = lc.from_events(events).incarnation
    assert calls == [c for c in recording["llm_calls"] if c["incarnation"] == incarnation]
    assert mails == [m for m in recording["side_effects"] if m["incarnation"] == incarnation]
    assert calls  # the resurrection did execute the steps the crash left undone
