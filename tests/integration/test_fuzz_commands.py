"""Hostile input on ``ares.commands`` and through ``ares.Client``, against a real
``ares run runtime-manager`` process on the real broker.

Hypothesis generates well over 10,000 records: random bytes, truncated and bit-flipped
commands, wrong and foreign fingerprints, trailing garbage, valid Avro with nonsense values
(unknown command types and agent kinds, negative versions, huge strings, deep JSON, broken
JSON, empty batches, extreme timestamps, garbage reply_to), oversized records, mismatched
keys, plus floods of valid commands for one agent and one stream. Every record is produced
at a known (partition, offset); afterwards:

* every record that is invalid by construction is in ``ares.dlq`` — 100 % — with its
  original key and bytes, a reason and a detail, under its source offset;
* a record whose mutation may or may not have left a valid command is either dead-lettered
  or decodes as a command;
* nothing valid is lost or dead-lettered: every valid append's event is in the log once,
  every flooded task is assigned;
* the owner is still the same process, and a valid command after the flood is answered.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from aiokafka import AIOKafkaProducer
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from ares.client import Client, CommandRejectedError
from ares.commands.model import Command, Reply, ReplyStatus, append_command
from ares.config import Settings
from ares.errors import SchemaError
from ares.events.kafka.dlq import DeadLetter
from ares.events.kafka.routing import partition_for
from ares.events.model import NewEvent
from ares.events.wire.codec import HEADER_SIZE
from ares.events.wire.schemas import COMMAND, COMMAND_PAYLOADS, registry
from ares.topics import COMMANDS, DLQ, TopicPlan
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env, service
from tests.support.runtime import read_stream

MAX_RECORD = 16 * 1024
PARTITIONS = 4
HOSTILE = int(os.environ.get("ARES_FUZZ_RECORDS", "12000"))  # ~9 % valid: >= 10,000 hostile
FLOOD_APPENDS = 1500
FLOOD_TASKS = 300
FLOOD_AGENT = "fuzz-flood-agent"
FLOOD_STREAM = "fuzz-flood-stream"
KNOWN_REASONS = {"bad_magic", "unknown_fingerprint", "truncated", "schema_mismatch",
                 "invalid_payload", "invalid_command", "unknown_command", "invalid_agent",
                 "empty", "oversized", "key_mismatch", "handler_error", "invalid_reply_to"}

REJECT = "reject"  # invalid by construction: must be dead-lettered
EITHER = "either"  # a mutation that may still be a valid command
VALID = "valid"  # must be applied, never dead-lettered


@dataclass(frozen=True, slots=True)
class Hostile:
    label: str
    verdict: str
    key: bytes | None
    value: bytes | None
    event_id: str | None = None  # VALID appends: the event that must reach the log


# -- what hypothesis draws -------------------------------------------------------------


def _raw_command(fields: dict[str, Any]) -> bytes:
    """Valid Avro of the Command schema, whatever the values mean (nothing validated)."""
    schema = registry().get(COMMAND)
    datum = {"id": str(uuid.uuid4()), "stream_id": "fuzz-0", "type": "agent.stop",
             "issuer": "fuzzer", "timestamp": datetime.now(UTC),
             "payload": ("ares.v1.command.StopAgent", {"reason": ""}), "reply_to": None,
             "metadata": {}, **fields}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema.parsed, datum)
    return b"\xc3\x01" + schema.fingerprint + buffer.getvalue()


def _append(stream: str, events: list[dict[str, Any]], expected: int) -> bytes:
    return _raw_command({"stream_id": stream, "type": "events.append", "payload": (
        "ares.v1.command.AppendEvents", {"expected_version": expected, "events": events})})


def _event(payload_json: str = '{"n": 1}', event_id: str | None = None) -> dict[str, Any]:
    return {"id": event_id or str(uuid.uuid4()), "type": "fuzz.noted", "module": "fuzzer",
            "payload_json": payload_json, "metadata": {}, "timestamp": None}


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


streams = st.integers(0, 300).map(lambda n: f"fuzz-{n}")


@st.composite
def valid_appends(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    event = NewEvent("fuzz.noted", "fuzzer", {"n": draw(st.integers()),
                                              "text": draw(st.text(max_size=50))})
    value = append_command(stream, [event], -1, issuer="fuzzer").encode()
    return Hostile("valid_append", VALID, stream.encode(), value, event.id)


@st.composite
def bases(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid command to mutate."""
    stream = draw(streams)
    kind = draw(st.sampled_from(["append", "stop", "assign"]))
    if kind == "append":
        value = _append(stream, [_event()], -1)
    elif kind == "stop":
        value = _raw_command({"stream_id": stream, "payload": (
            "ares.v1.command.StopAgent", {"reason": draw(st.text(max_size=30))})})
    else:
        value = _raw_command({"stream_id": stream, "type": "task.assign", "payload": (
            "ares.v1.command.AssignTask", {"task_id": "t", "input_json": "{}"})})
    return stream, value


@st.composite
def garbage(draw: st.DrawFn) -> Hostile:
    value = draw(st.binary(max_size=400))
    return Hostile("random_bytes", REJECT, draw(streams).encode(), value)


@st.composite
def truncated(draw: st.DrawFn) -> Hostile:
    stream, value = draw(bases())
    cut = draw(st.integers(0, len(value) - 1))
    return Hostile("truncated", REJECT, stream.encode(), value[:cut])


@st.composite
def wrong_fingerprint(draw: st.DrawFn) -> Hostile:
    stream, value = draw(bases())
    known = set(registry().by_fingerprint)
    fingerprint = draw(st.binary(min_size=8, max_size=8).filter(lambda f: f not in known))
    return Hostile("wrong_fingerprint", REJECT, stream.encode(),
                   value[:2] + fingerprint + value[HEADER_SIZE:])


@st.composite
def foreign_schema(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    reply = Reply(str(uuid.uuid4()), ReplyStatus.OK, stream, draw(st.integers(0, 2**40)))
    return Hostile("foreign_schema", REJECT, stream.encode(), reply.encode())


@st.composite
def trailing(draw: st.DrawFn) -> Hostile:
    stream, value = draw(bases())
    return Hostile("trailing_bytes", REJECT, stream.encode(),
                   value + draw(st.binary(min_size=1, max_size=64)))


@st.composite
def bit_flips(draw: st.DrawFn) -> Hostile:
    stream, value = draw(bases())
    body = bytearray(value)
    for _ in range(draw(st.integers(1, 4))):
        body[draw(st.integers(HEADER_SIZE, len(body) - 1))] = draw(st.integers(0, 255))
    return Hostile("bit_flips", EITHER, stream.encode(), bytes(body))


@st.composite
def unknown_type(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    command_type = draw(st.text(max_size=40).filter(lambda t: t not in COMMAND_PAYLOADS))
    return Hostile("unknown_command_type", REJECT, stream.encode(),
                   _raw_command({"stream_id": stream, "type": command_type}))


@st.composite
def unknown_kind(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    kind = draw(st.text(max_size=60).filter(lambda k: not k.startswith("example.")))
    return Hostile("unknown_agent_kind", REJECT, stream.encode(), _raw_command({
        "stream_id": stream, "type": "agent.start",
        "payload": ("ares.v1.command.StartAgent", {"kind": kind, "config_json": "{}"})}))


@st.composite
def bad_config(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    config = draw(st.one_of(
        # not JSON ("" is not refused: it means the default, "{}")
        st.text(min_size=1, max_size=40).filter(lambda t: not _is_json(t)),
        st.integers(2000, 50_000).map(_deep),  # deeper than any parser's recursion
        st.just("[]"), st.just('{"bogus": 1}'), st.just('{"reconcile": "yes"}')))
    return Hostile("bad_agent_config", REJECT, stream.encode(), _raw_command({
        "stream_id": stream, "type": "agent.start",
        "payload": ("ares.v1.command.StartAgent",
                    {"kind": "example.pipeline", "config_json": config})}))


@st.composite
def negative_version(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    version = draw(st.integers(-(2**63), -2))
    return Hostile("negative_version", REJECT, stream.encode(),
                   _append(stream, [_event()], version))


@st.composite
def bad_events(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    choice = draw(st.sampled_from(["not_json", "too_deep", "empty", "same_id"]))
    if choice == "not_json":
        events = [_event(draw(st.text(max_size=40).filter(lambda t: not _is_json(t))))]
    elif choice == "too_deep":
        events = [_event(_deep(draw(st.integers(2000, 50_000))))]
    elif choice == "empty":
        events = []
    else:
        same = str(uuid.uuid4())
        events = [_event(event_id=same), _event(event_id=same)]
    return Hostile(f"bad_events_{choice}", REJECT, stream.encode(), _append(stream, events, -1))


@st.composite
def oversized(draw: st.DrawFn) -> Hostile:
    stream = draw(streams)
    size = draw(st.integers(MAX_RECORD + 1, MAX_RECORD + 8192))
    return Hostile("oversized", REJECT, stream.encode(), _raw_command({
        "stream_id": stream, "payload": ("ares.v1.command.StopAgent", {"reason": "x" * size})}))


@st.composite
def key_mismatch(draw: st.DrawFn) -> Hostile:
    stream, value = draw(bases())
    key = draw(st.one_of(st.none(), st.binary(max_size=20).filter(lambda k: k != stream.encode())))
    return Hostile("key_mismatch", REJECT, key, value)


@st.composite
def odd_values(draw: st.DrawFn) -> Hostile:
    """Decodable commands with strange but maybe acceptable values: the owner may refuse or
    apply them, never stall on them."""
    stream = draw(streams)
    fields: dict[str, Any] = {"stream_id": stream}
    choice = draw(st.sampled_from(["timestamp", "reply_to", "huge", "deep_ok", "metadata"]))
    if choice == "timestamp":
        fields["timestamp"] = draw(st.integers(-(2**63), 2**63 - 1))
    elif choice == "reply_to":
        fields["reply_to"] = draw(st.one_of(st.text(max_size=12),
                                            st.integers(-(2**40), 2**40).map(str)))
    elif choice == "huge":
        fields["type"] = "task.assign"
        fields["payload"] = ("ares.v1.command.AssignTask", {
            "task_id": "t" * draw(st.integers(1000, MAX_RECORD // 2)), "input_json": "{}"})
    elif choice == "metadata":
        fields["metadata"] = draw(st.dictionaries(st.text(max_size=30), st.text(max_size=30),
                                                  max_size=5))
    else:
        return Hostile("deep_json_parsable", EITHER, stream.encode(),
                       _append(stream, [_event(_deep(draw(st.integers(100, 900))))], -1))
    return Hostile(f"odd_{choice}", EITHER, stream.encode(), _raw_command(fields))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def hostile_records() -> st.SearchStrategy[Hostile]:
    return st.one_of(garbage(), truncated(), wrong_fingerprint(), foreign_schema(), trailing(),
                     bit_flips(), unknown_type(), unknown_kind(), bad_config(),
                     negative_version(), bad_events(), st.one_of(oversized(), key_mismatch()),
                     odd_values(), valid_appends(), st.just(Hostile("tombstone", REJECT,
                                                                    b"fuzz-1", None)))


def generate(count: int) -> list[Hostile]:
    """``count`` examples of the strategy, the same ones every run (derandomized)."""
    found: list[Hostile] = []

    @hyp_settings(max_examples=count, database=None, derandomize=True, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(hostile_records())
    def collect(record: Hostile) -> None:
        found.append(record)

    collect()
    return found


def floods() -> list[Hostile]:
    """Valid commands for one stream and one agent, as fast as the producer goes."""
    records = []
    for n in range(FLOOD_APPENDS):
        event = NewEvent("fuzz.noted", "fuzzer", {"n": n})
        records.append(Hostile("flood_append", VALID, FLOOD_STREAM.encode(),
                               append_command(FLOOD_STREAM, [event], -1).encode(), event.id))
    for n in range(FLOOD_TASKS):
        command = Command("task.assign", FLOOD_AGENT, {
            "task_id": f"flood-{n:04d}", "input_json": '{"steps":0}'}, issuer="fuzzer")
        records.append(Hostile("flood_task", VALID, FLOOD_AGENT.encode(), command.encode()))
    return records


# -- the owner under attack ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_settings(kafka_bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"fuzz-{uuid.uuid4().hex[:8]}.",
                    max_record_bytes=MAX_RECORD, request_timeout_s=60.0)


@pytest.fixture(scope="module")
async def plan(fuzz_settings: Settings) -> AsyncIterator[TopicPlan]:
    async with applied_topics(fuzz_settings, partitions=PARTITIONS) as plan:
        yield plan


@pytest.fixture(scope="module")
def owner(fuzz_settings: Settings, plan: TopicPlan,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    logs = tmp_path_factory.mktemp("fuzz-logs")
    env = ares_env(fuzz_settings, PARTITIONS)
    with service("runtime-manager", env, logs, "--session-timeout-ms", "10000") as proc:
        yield proc, logs
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.fixture
async def client(fuzz_settings: Settings, plan: TopicPlan,
                 owner: tuple[Any, Path]) -> AsyncIterator[Client]:
    async with Client(fuzz_settings, plan, issuer="fuzz-test") as client:
        await _until_served(client, owner)
        yield client


async def _until_served(client: Client, owner: tuple[Any, Path]) -> None:
    """Every partition answers (the owner recovered them all)."""
    proc, logs = owner
    for partition in range(PARTITIONS):
        stream = _stream_on(partition, "ready")
        for _ in range(120):
            assert proc.poll() is None, f"the owner died:\n{_log(logs)}"
            try:
                await client.append(stream, [NewEvent("fuzz.ready", "fuzzer", {})],
                                    timeout_s=5)
                break
            except Exception:  # not serving yet
                await asyncio.sleep(0.5)
        else:
            pytest.fail(f"partition {partition} never answered:\n{_log(logs)}")


def _stream_on(partition: int, tag: str) -> str:
    n = 0
    while partition_for(f"fuzz-{tag}-{n}", PARTITIONS) != partition:
        n += 1
    return f"fuzz-{tag}-{n}"


def _log(logs: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-4000:] for p in logs.glob("*.log"))


@pytest.mark.timeout(900)
async def test_ten_thousand_hostile_records_are_dead_lettered_and_nothing_valid_is_lost(
    client: Client, fuzz_settings: Settings, plan: TopicPlan, owner: tuple[Any, Path]
) -> None:
    proc, logs = owner
    # The flood's agent exists before its tasks arrive.
    await client.start_agent(FLOOD_AGENT, "example.pipeline")
    records = generate(HOSTILE) + floods()
    labels = Counter(r.label for r in records)
    hostile = sum(1 for r in records if r.verdict != VALID)
    print(f"{len(records)} records, {hostile} hostile: {dict(sorted(labels.items()))}")
    assert hostile >= 10_000, f"only {hostile} hostile records generated"

    placed = await _produce(fuzz_settings, plan, records)
    # After the flood, one valid command per partition: answered means every record
    # before it on that partition was handled, and the owner did not stall.
    for partition in range(PARTITIONS):
        stream = _stream_on(partition, "after")
        assert await client.append(stream, [NewEvent("fuzz.after", "fuzzer", {})]) >= 1
    assert proc.poll() is None, f"the owner died:\n{_log(logs)}"

    letters = {}
    for r in await drain_records(fuzz_settings.kafka_bootstrap, plan.name(DLQ),
                                 partitions=plan.topic(DLQ).partitions):
        letter = DeadLetter.from_record(r.key, r.value, r.headers)
        if letter.source_topic == plan.name(COMMANDS):
            letters[(letter.source_partition, letter.source_offset)] = letter

    missing, wrong, valid_lettered, undecodable_accepted = [], [], [], []
    reasons: Counter[str] = Counter()
    for record, where in zip(records, placed, strict=True):
        letter = letters.get(where)
        if record.verdict == VALID:
            if letter is not None:
                valid_lettered.append(f"{record.label}: {letter.reason}: {letter.detail}")
            continue
        if letter is None:
            if record.verdict == REJECT:
                missing.append(f"{record.label} at {where}: {record.value!r:.120}")
            elif not _decodes(record.value):
                undecodable_accepted.append(f"{record.label} at {where}")
            continue
        reasons[letter.reason] += 1
        if (letter.value or b"") != (record.value or b"") or letter.key != record.key \
                or letter.reason not in KNOWN_REASONS or not letter.detail:
            wrong.append(f"{record.label}: reason {letter.reason!r}, detail "
                         f"{letter.detail!r:.80}, bytes kept: {letter.value == record.value}")
    print(f"dead letters by reason: {dict(sorted(reasons.items()))}")
    assert not missing, f"{len(missing)} rejected record(s) never reached the DLQ:\n" + \
        "\n".join(missing[:20])
    assert not wrong, "dead letters without their reason or original bytes:\n" + \
        "\n".join(wrong[:20])
    assert not undecodable_accepted, "\n".join(undecodable_accepted[:20])
    assert not valid_lettered, "valid commands dead-lettered:\n" + "\n".join(valid_lettered[:20])

    await _valid_ones_applied(fuzz_settings, plan, records)
    assert proc.poll() is None, f"the owner died:\n{_log(logs)}"


async def _produce(settings: Settings, plan: TopicPlan,
                   records: list[Hostile]) -> list[tuple[int, int]]:
    """Send every record; where each landed (partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=20,
                                max_request_size=1_048_576)
    await producer.start()
    try:
        placed: list[tuple[int, int]] = []
        for start in range(0, len(records), 500):
            futures = [await producer.send(plan.name(COMMANDS), r.value, key=r.key)
                       for r in records[start:start + 500]]
            placed += [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
        return placed
    finally:
        await producer.stop()


def _decodes(value: bytes | None) -> bool:
    try:
        Command.decode(value or b"")
    except SchemaError:
        return False
    return True


async def _valid_ones_applied(settings: Settings, plan: TopicPlan,
                              records: list[Hostile]) -> None:
    expected: dict[str, list[str]] = {}
    for record in records:
        if record.verdict == VALID and record.event_id is not None:
            expected.setdefault((record.key or b"").decode(), []).append(record.event_id)
    for stream, ids in expected.items():
        found = Counter(e.id for e in await read_stream(settings, plan, stream))
        lost = [i for i in ids if found[i] == 0]
        twice = [i for i, n in found.items() if n > 1]
        assert not lost, f"{stream}: {len(lost)} valid appended event(s) lost"
        assert not twice, f"{stream}: events appended twice: {twice[:5]}"
    flood = await read_stream(settings, plan, FLOOD_AGENT)
    assigned = {e.payload["task_id"] for e in flood if e.type == "task.assigned"}
    assert assigned == {f"flood-{n:04d}" for n in range(FLOOD_TASKS)}


# -- through ares.Client -------------------------------------------------------------------


async def test_the_client_refuses_what_it_cannot_encode_precisely(client: Client) -> None:
    with pytest.raises(SchemaError, match=r"unknown command type 'agent\.explode'"):
        await client.send(Command("agent.explode", "fuzz-c1", {}))
    with pytest.raises(SchemaError, match="payload"):
        await client.send(Command("agent.start", "fuzz-c1", {"no_kind": 1}))


async def test_nonsense_through_the_client_is_refused_and_dead_lettered(
    client: Client, fuzz_settings: Settings, plan: TopicPlan
) -> None:
    stream = f"fuzz-client-{uuid.uuid4().hex[:6]}"
    cases: list[tuple[str, Any]] = [
        ("no.such.kind", client.start_agent(stream, "no.such.kind")),
        ("unknown setting", client.start_agent(stream, "example.pipeline", {"bogus": 1})),
        ("expected_version must be >= -1",
         client.append(stream, [NewEvent("fuzz.noted", "fuzzer", {})], expected_version=-7)),
    ]
    for needle, call in cases:
        with pytest.raises(CommandRejectedError, match=needle.replace(".", r"\.")):
            await call
    letters = [DeadLetter.from_record(r.key, r.value, r.headers)
               for r in await drain_records(fuzz_settings.kafka_bootstrap, plan.name(DLQ),
                                            partitions=plan.topic(DLQ).partitions)
               if r.key == stream.encode()]
    assert sorted(letter.reason for letter in letters) == sorted(
        ["invalid_agent", "invalid_agent", "invalid_command"])
    assert all(Command.decode(letter.value or b"").stream_id == stream for letter in letters)


async def test_a_command_with_an_impossible_reply_to_is_either_applied_or_rejected(
    client: Client, fuzz_settings: Settings, plan: TopicPlan
) -> None:
    stream = f"fuzz-replyto-{uuid.uuid4().hex[:6]}"
    event = NewEvent("fuzz.noted", "fuzzer", {"n": 1})
    command = replace(append_command(stream, [event], -1), reply_to="-1")
    producer = AIOKafkaProducer(bootstrap_servers=fuzz_settings.kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(plan.name(COMMANDS), command.encode(), key=stream.encode())
    finally:
        await producer.stop()
    # A command after it on the same stream (same partition): answered means handled.
    await client.append(stream, [NewEvent("fuzz.after", "fuzzer", {})])
    applied = event.id in {e.id for e in await read_stream(fuzz_settings, plan, stream)}
    lettered = [r for r in await drain_records(fuzz_settings.kafka_bootstrap, plan.name(DLQ),
                                               partitions=plan.topic(DLQ).partitions)
                if r.key == stream.encode()]
    assert applied != bool(lettered), (
        f"applied: {applied}, dead-lettered: {[dict(r.headers) for r in lettered]}")


# -- hostile input on the command line ----------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000
CLI_CASES = [  # (args, exit code, what the message must say)
    (["events", "append", "fuzz-cli", "--type", "t", "--payload", "{bad"], 2,
     "Invalid value for --payload: not valid JSON"),
    (["events", "append", "fuzz-cli", "--type", "t", "--payload", "[1, 2]"], 2,
     "must be a JSON object"),
    (["events", "append", "fuzz-cli", "--type", "t", "--expected-version", "-5"], 2,
     "-5 is not in the range x>=-1"),
    (["agents", "task", "fuzz-cli", "--input", "{bad"], 2,
     "Invalid value for --input: not valid JSON"),
    (["agents", "start", "fuzz-cli", "--kind", "example.pipeline", "--config", "{bad"], 2,
     "Invalid value for --config: not valid JSON"),
    (["agents", "start", "fuzz-cli"], 2, "Missing option '--kind'"),
    (["agents", "start", "fuzz-cli", "--kind", "example.pipeline", "--bogus-flag"], 2,
     "No such option: --bogus-flag"),
    (["chaos", "--faults", "-1"], 2, "-1 is not in the range x>=0"),
    (["--bootstrap-servers", "nonsense", "agents", "status"], 2, "'nonsense' is not host:port"),
    # Kinds are the workers' (plugins): the owner refuses, naming the kind.
    (["agents", "start", "fuzz-cli-kind", "--kind", "no.such.kind"], 1, "no.such.kind"),
    (["agents", "start", "fuzz-cli-conf", "--kind", "example.pipeline", "--config",
      '{"bogus": 1}'], 1, "unknown setting(s) ['bogus']"),
]
CLI_BUGS = [  # the CLI crashes with a traceback instead of a usage error
    (["agents", "task", "fuzz-cli", "--input", DEEP], 2, "Invalid value for --input"),
    (["agents", "start", "fuzz-cli", "--kind", "example.pipeline", "--config",
      '{"a": ' + DEEP + "}"], 2, "Invalid value for --config"),
    (["events", "append", "fuzz-cli", "--type", "", "--payload", "{}"], 2,
     "Invalid value for --type"),
]


def _cli(fuzz_settings: Settings, args: list[str]) -> tuple[int, str]:
    env = ares_env(fuzz_settings, PARTITIONS, ARES_REQUEST_TIMEOUT_S="30")
    result = ares(*args, env=env, timeout=120)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(("args", "code", "says"), CLI_CASES,
                         ids=[" ".join(a)[:50] for a, _, _ in CLI_CASES])
def test_cli_input_is_validated_with_precise_messages(
    fuzz_settings: Settings, plan: TopicPlan, owner: tuple[Any, Path], args: list[str],
    code: int, says: str
) -> None:
    exit_code, output = _cli(fuzz_settings, args)
    assert (exit_code, says in output, "Traceback" in output) == (code, True, False), output


@pytest.mark.parametrize(("args", "code", "says"), CLI_BUGS,
                         ids=["deep --input", "deep --config", "empty --type"])
def test_cli_hostile_input_is_a_usage_error_not_a_traceback(
    fuzz_settings: Settings, plan: TopicPlan, args: list[str], code: int, says: str
) -> None:
    exit_code, output = _cli(fuzz_settings, args)
    assert (exit_code, says in output, "Traceback" in output) == (code, True, False), \
        output[-500:]
