"""Fingerprints: stable digests for the same failure, "the same event every time"."""

from __future__ import annotations

import pytest

from ares.health_checker.fingerprint import DeathFacts, fingerprint, message_digest


def death(n: int, message: str = "boom", event: str = "step.completed",
          version: int = 3, error: str = "RuntimeError") -> DeathFacts:
    return DeathFacts(event_id=f"e{n}", at=float(n), cause="exception", incarnation=n,
                      error_type=error, error_message=message, traceback_digest="tb",
                      last_event_type=event, last_version=version)


def test_messages_that_differ_in_numbers_ids_and_quoted_values_share_a_digest() -> None:
    assert message_digest("timeout after 30.2s on 'a' id 0x7f3a") == message_digest(
        "timeout after 31.9s on 'b' id 0xdead")
    assert message_digest("timeout") != message_digest("refused")
    assert message_digest(None) is None


def test_the_same_failure_at_the_same_event_is_one_fingerprint() -> None:
    fp = fingerprint([death(n, f"boom at attempt {n}") for n in range(1, 6)])
    assert fp.same_event
    assert fp.same_error
    assert (fp.sharing, fp.deaths) == (5, 5)
    assert fp.statement().startswith("dies at the same event every time: step.completed v3; "
                                     "RuntimeError: boom at attempt 5")
    assert fp.details()["events"] == ",".join(["step.completed v3"] * 5)
    again = fingerprint([death(n, f"boom at attempt {n + 7}") for n in range(1, 3)])
    assert again.digest == fp.digest


def test_the_dominant_signature_names_the_loop() -> None:
    deaths = [death(1, event="llm.call", version=5), death(2), death(3), death(4)]
    fp = fingerprint(deaths)
    assert not fp.same_event
    assert (fp.last_event_type, fp.last_version, fp.sharing) == ("step.completed", 3, 3)
    assert "dies at different events (llm.call v5, step.completed v3)" in fp.statement()


def test_a_fingerprint_needs_deaths() -> None:
    with pytest.raises(ValueError, match="at least one"):
        fingerprint([])
