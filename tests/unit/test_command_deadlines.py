"""Which commands carry a deadline, and the words a sender that stopped waiting is given."""

from __future__ import annotations

import time

import click
import pytest
from click.testing import CliRunner

from ares.cli.send import deadline_option
from ares.commands.deadlines import (
    EXPIRED_REPLY,
    NOW_ONLY,
    Fate,
    NotAnsweredError,
    deadline_of,
    deadline_s_for,
    is_expired,
    parse_seconds,
    with_deadline,
)
from ares.commands.model import DEADLINE, Command, Reply, ReplyStatus
from ares.events.wire.schemas import COMMAND_PAYLOADS


@pytest.mark.parametrize(("text", "seconds"), [("30", 30.0), ("0.5", 0.5), ("90s", 90.0),
                                               ("5m", 300.0), ("1h", 3600.0), ("2d", 172800.0),
                                               ("500ms", 0.5)])
def test_a_deadline_is_seconds_or_a_duration(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("text", ["0", "-3", "soon", "5 parsecs", "nan", "inf", ""])
def test_a_deadline_that_is_no_positive_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a positive duration"):
        parse_seconds(text)


def test_only_the_commands_about_a_moment_have_a_deadline_by_default() -> None:
    kept = sorted(set(COMMAND_PAYLOADS) - NOW_ONLY)
    assert sorted(NOW_ONLY) == ["agent.kill", "worker.crash"]
    assert {t: deadline_s_for(t, None, 10.0) for t in kept} == dict.fromkeys(kept)
    assert {t: deadline_s_for(t, None, 10.0) for t in NOW_ONLY} == dict.fromkeys(NOW_ONLY, 10.0)
    # What the sender asks for wins, for every type.
    assert {deadline_s_for(t, 60.0, 10.0) for t in COMMAND_PAYLOADS} == {60.0}


def test_the_deadline_goes_into_the_metadata_once() -> None:
    command = Command("agent.signal", "a1", {"name": "go"})
    assert with_deadline(command, None, 1000.0) is command
    timed = with_deadline(command, 30.0, 1000.0)
    assert timed.metadata[DEADLINE] == "1030000"
    assert (timed.id, timed.payload) == (command.id, command.payload)
    assert deadline_of(timed) == 1030.0
    assert with_deadline(timed, 5.0, 2000.0) is timed  # a deadline already set is kept
    assert deadline_of(Command("agent.signal", "a1", {}, metadata={DEADLINE: "soon"})) is None


def test_the_words_say_what_becomes_of_a_command_nobody_answered() -> None:
    now = time.time()
    kept = NotAnsweredError(Command("agent.signal", "a1", {}), 10.0)
    assert kept.kept
    assert str(kept).startswith("not answered within 10 s: no owner took agent.signal for 'a1'")
    assert str(kept).endswith("the command is kept on ares.commands and will be applied when "
                              "an owner takes it")
    pending = Fate(now + 60)
    assert pending.kept(now)
    assert "until its deadline" in pending.words(now)
    assert "a later one refuses it and dead-letters it to ares.dlq" in pending.words(now)
    passed = NotAnsweredError(with_deadline(Command("agent.kill", "a1", {}), 1.0, now - 5), 1.0)
    assert not passed.kept
    assert str(passed).endswith("an owner that takes it now refuses it and dead-letters it to "
                                "ares.dlq (reason expired), it is not applied")
    assert passed.exit_code == 4


def test_the_cli_option_takes_seconds_or_a_duration() -> None:
    @click.command()
    @deadline_option()
    def send(deadline_s: float | None) -> None:
        click.echo(repr(deadline_s))

    runner = CliRunner()
    assert runner.invoke(send, []).output == "None\n"
    assert runner.invoke(send, ["--deadline", "5m"]).output == "300.0\n"
    refused = runner.invoke(send, ["--deadline", "later"])
    assert refused.exit_code == 2
    assert "'later' is not a positive duration (seconds or a duration: 30, 90s" in refused.output


def test_the_api_answers_an_expired_command_with_a_409() -> None:
    from ares.replay_reader.http_api import _refused

    expired = _refused(Reply("c1", ReplyStatus.REJECTED, "a1", message=EXPIRED_REPLY))
    refused = _refused(Reply("c1", ReplyStatus.REJECTED, "a1", message="unknown kind"))
    assert (expired.status, refused.status) == (409, 422)
    assert is_expired(f"agent.kill for 'a1' refused: {EXPIRED_REPLY}")
