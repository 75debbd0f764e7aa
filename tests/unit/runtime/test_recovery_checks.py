"""Recovery that verifies itself honestly: the checks a replay ran, ``verified`` derived from
them, the resume phase measured where the agent resumes, and the state hash of a recovery
record recomputed from the log (``ares audit verify --state``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ares.events.model import Event
from ares.lifecycle.recovery import RecoveryRecord, SnapshotInfo
from ares.lifecycle.verification import CHAIN, HEAD, SNAPSHOT_ANCHOR, VERSIONS, StreamVerifier
from ares.replay_reader.audit_state import MISMATCH, OK, UNKNOWN, check_record
from ares.runtime_manager.replay import AgentReplay, state_hash_at
from tests.support.agents import REGISTRY
from tests.unit.runtime.streams import Stream


def agent_stream(steps: int = 3) -> Stream:
    s = Stream("w")
    s.add("agent.started", {"kind": "test.waiter", "config_json": "{}", "incarnation": 1,
                            "worker": "w1"})
    s.add("task.assigned", {"task_id": "t1", "input_json": '{"signal": "go"}'})
    for i in range(steps):
        s.add("step.completed", {"step_name": f"s{i}", "result_json": str(i)}, at_s=i)
    return s


def replayed(events: list[Event]) -> AgentReplay:
    replay = AgentReplay("w", 0, None)
    for offset, event in enumerate(events):
        replay.feed(offset, event)
    return replay


# -- the checks a verifier ran ---------------------------------------------------------------


def test_a_replay_from_genesis_ran_the_chain_versions_and_head_checks() -> None:
    s = agent_stream()
    verifier = StreamVerifier("w")
    verifier.feed_many(s.events)
    assert verifier.finish(s.head) is None
    assert verifier.checks == (CHAIN, VERSIONS, HEAD)


def test_a_replay_from_a_snapshot_also_checked_its_anchor() -> None:
    s = agent_stream()
    snapshot = SnapshotInfo("w", 3, s.events[2].hash, 2)
    verifier = StreamVerifier("w", snapshot)
    verifier.feed_many(s.events)
    assert verifier.finish(s.head) is None
    assert verifier.checks == (CHAIN, VERSIONS, SNAPSHOT_ANCHOR, HEAD)


def test_nothing_replayed_means_no_chain_check_and_so_not_verified() -> None:
    verifier = StreamVerifier("w")
    assert verifier.finish(None) is None  # no failure...
    assert verifier.checks == ()  # ...but nothing was checked
    assert not RecoveryRecord.checked(verifier.checks, failed=False)


def test_a_failed_chain_check_ran_and_fails_the_record() -> None:
    s = agent_stream()
    forged = replace(s.events[3], hash="f" * 64)
    verifier = StreamVerifier("w")
    verifier.feed_many([*s.events[:3], forged])
    failure = verifier.finish(s.head)
    assert failure is not None
    assert CHAIN in verifier.checks
    assert not RecoveryRecord.checked(verifier.checks, failed=True)


def test_without_hash_checks_versions_alone_do_not_verify() -> None:
    s = agent_stream()
    verifier = StreamVerifier("w", check_hashes=False)
    verifier.feed_many(s.events)
    assert verifier.finish(s.head) is None
    assert verifier.checks == (VERSIONS, HEAD)
    assert not RecoveryRecord.checked(verifier.checks, failed=False)


# -- the record ------------------------------------------------------------------------------


def test_the_record_derives_verified_from_the_checks_and_leaves_resume_to_the_resume() -> None:
    s = agent_stream()
    replay = replayed(s.events)
    assert replay.finish(s.head) is None
    record = replay.record(replay_done=replay.started)
    assert record.verified is True
    assert record.checks == (CHAIN, VERSIONS, HEAD)
    assert record.resume_s is None  # not patched in later: measured by ``resumed``
    resumed = record.resumed(0.0042)
    assert resumed.resume_s == 0.0042
    assert replace(resumed, resume_s=None) == record


def test_a_record_of_a_replay_that_failed_is_not_verified() -> None:
    s = agent_stream()
    replay = replayed([*s.events[:2], replace(s.events[2], hash="0" * 64)])
    assert replay.finish(None) is not None
    assert replay.record(replay.started).verified is False


def test_the_checks_survive_an_event_round_trip() -> None:
    s = agent_stream()
    replay = replayed(s.events)
    replay.finish(s.head)
    record = replay.record(replay.started).resumed(0.001)
    event = s.add("agent.resurrected", record.to_payload(incarnation=2, parent_incarnation=1),
                  metadata=record.to_metadata())
    back = RecoveryRecord.from_event(event)
    assert back.checks == record.checks
    assert back.verified is True
    assert back.resume_s == 0.001
    assert record.to_json()["checks"] == list(record.checks or ())


def test_an_older_event_without_checks_reads_as_unknown() -> None:
    event = Stream("w").add("agent.resurrected", {"incarnation": 2, "parent_incarnation": 1})
    assert RecoveryRecord.from_event(event).checks is None


# -- the state hash, recomputed from the log --------------------------------------------------


def recompute(stream_id: str, events: Sequence[tuple[int, Event]],
              version: int) -> tuple[str | None, str]:
    return state_hash_at(stream_id, events, version, REGISTRY)


def recorded_at(events: list[Event]) -> RecoveryRecord:
    replay = replayed(events)
    replay.finish(None)
    replay.build_agent(REGISTRY)
    return replay.record(replay.started)


def test_the_state_hash_is_recomputed_from_the_log() -> None:
    s = agent_stream()
    record = recorded_at(s.events)
    logged = list(enumerate(s.events))
    assert state_hash_at("w", logged, record.resulting_version or 0, REGISTRY) == (
        record.state_hash, "")
    assert check_record("w", 9, record, logged, recompute).status == OK


def test_a_record_whose_state_the_log_contradicts_is_a_mismatch() -> None:
    s = agent_stream()
    record = replace(recorded_at(s.events), state_hash="b" * 64)
    check = check_record("w", 9, record, list(enumerate(s.events)), recompute)
    assert check.status == MISMATCH
    assert "MISMATCH" in check.line()


def test_the_hash_is_of_the_state_at_the_records_version_not_the_streams_end() -> None:
    s = agent_stream(steps=2)
    record = recorded_at(list(s.events))
    s.add("step.completed", {"step_name": "later", "result_json": "9"}, at_s=9)
    check = check_record("w", 9, record, list(enumerate(s.events)), recompute)
    assert check.status == OK


def test_a_trimmed_stream_or_an_unknown_kind_cannot_say() -> None:
    s = agent_stream()
    record = recorded_at(s.events)
    trimmed = list(enumerate(s.events))[2:]
    assert check_record("w", 9, record, trimmed, recompute).status == UNKNOWN
    other = Stream("w")
    other.add("agent.started", {"kind": "no.such.kind", "config_json": "{}", "incarnation": 1,
                                "worker": "w1"})
    unknown = check_record("w", 9, replace(record, resulting_version=1),
                           list(enumerate(other.events)), recompute)
    assert unknown.status == UNKNOWN
    assert "--agents" in unknown.detail
    no_hash = check_record("w", 9, replace(record, state_hash=None),
                           list(enumerate(s.events)), recompute)
    assert no_hash.status == UNKNOWN
