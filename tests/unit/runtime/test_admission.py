"""Admission of a record from ares.commands: each check of the chain, and their order."""

from __future__ import annotations

from ares.commands.model import DEADLINE, Command
from ares.commands.policy import IssuerPolicy
from ares.events.kafka.routing import partition_for
from ares.runtime_manager.admission import Admitted, Expired, Forward, Gate, Refused

PARTITIONS = 6
GATE = Gate(max_record_bytes=1024, partitions=PARTITIONS, reply_partitions=3,
            replies_topic="ares.replies")


def _command(stream: str = "agent-1", **fields: object) -> Command:
    return Command(type="agent.start", stream_id=stream, payload={"kind": "k"},
                   **fields)  # type: ignore[arg-type]


def _home(stream: str) -> int:
    return partition_for(stream, PARTITIONS)


def test_no_value_and_oversized_values_are_refused_before_decoding() -> None:
    assert GATE.admit_raw(None) == Refused("empty", "the record has no value")
    refused = GATE.admit_raw(b"x" * 1025)
    assert isinstance(refused, Refused)
    assert refused.reason == "oversized"
    assert "ARES_MAX_RECORD_BYTES" in refused.detail
    assert GATE.admit_raw(b"ok") == b"ok"


def test_a_well_formed_command_on_its_partition_is_admitted() -> None:
    command = _command()
    assert GATE.admit(command, b"agent-1", _home("agent-1"), 0) == Admitted(command)


def test_a_key_that_is_not_the_stream_is_refused() -> None:
    verdict = GATE.admit(_command(), b"other", _home("agent-1"), 0)
    assert isinstance(verdict, Refused)
    assert verdict.reason == "key_mismatch"


def test_a_command_on_another_partition_is_forwarded_to_its_own() -> None:
    home = _home("agent-1")
    verdict = GATE.admit(_command(), b"agent-1", (home + 1) % PARTITIONS, 0)
    assert verdict == Forward(_command_of(verdict), home)


def _command_of(verdict: object) -> Command:
    assert isinstance(verdict, Forward | Admitted | Expired)
    return verdict.command


def test_an_unauthorised_issuer_is_refused_and_answered_when_it_can_be() -> None:
    gate = Gate(1024, PARTITIONS, 3, "ares.replies", IssuerPolicy.parse("ops=*:agent.stop"))
    answered = gate.admit(_command(issuer="mallory", reply_to="1"), b"agent-1",
                          _home("agent-1"), 0)
    assert isinstance(answered, Refused)
    assert answered.reason == "unauthorised_issuer"
    assert answered.reply is not None
    assert "mallory" in answered.reply.message
    unanswerable = gate.admit(_command(issuer="mallory", reply_to="9"), b"agent-1",
                              _home("agent-1"), 0)
    assert isinstance(unanswerable, Refused)
    assert unanswerable.reply is None


def test_a_reply_to_that_is_no_partition_is_refused_before_anything_runs() -> None:
    verdict = GATE.admit(_command(reply_to="3"), b"agent-1", _home("agent-1"), 0)
    assert isinstance(verdict, Refused)
    assert verdict.reason == "invalid_reply_to"


def test_a_command_past_its_senders_deadline_is_expired() -> None:
    command = _command(metadata={DEADLINE: "1000"})
    assert GATE.admit(command, b"agent-1", _home("agent-1"), 1001) == Expired(command)
    assert GATE.admit(command, b"agent-1", _home("agent-1"), 999) == Admitted(command)


def test_the_first_check_that_objects_decides() -> None:
    # Wrong key and wrong partition and expired: the key decides.
    command = _command(metadata={DEADLINE: "0"})
    verdict = GATE.admit(command, b"other", (_home("agent-1") + 1) % PARTITIONS, 5)
    assert isinstance(verdict, Refused)
    assert verdict.reason == "key_mismatch"
