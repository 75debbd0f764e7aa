"""Signed events (ares.events.signing): what a writer signs, what a keyring accepts, keys and
their rotation, and the checks the chain, recovery's verifier and the audit run with them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from ares.cli.keys import keys
from ares.errors import ConfigError
from ares.events import signing
from ares.events.chain import ChainError, event_hash, seal_encoded, verify_chain
from ares.events.model import Event, NewEvent, StreamHead
from ares.events.signing import (
    UNCHECKED,
    KeyEntry,
    Keyring,
    SignaturePolicy,
    Signer,
    SigningError,
    configured_signer,
    default_policy,
    key_id_of,
)
from ares.events.wire.codec import HEADER_SIZE, decode_event, encode_event
from ares.events.writer import StreamTable
from ares.lifecycle.verification import CHAIN, SIGNATURES, Feed, StreamVerifier
from ares.replay_reader.audit import StreamAudit
from tests.unit.test_codec import T0

SINCE = T0 - timedelta(days=1)


@pytest.fixture(autouse=True)
def no_configured_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts, and leaves the process, without a configured key or keyring."""
    monkeypatch.delenv(signing.KEYRING_ENV, raising=False)
    monkeypatch.delenv(signing.SIGNING_KEY_ENV, raising=False)
    signing.reset()
    yield
    signing.reset()


def keyring_of(*signers: Signer, since: object = SINCE) -> Keyring:
    return Keyring({s.key_id: KeyEntry(s.key_id, s.public_key, "runtime-manager", T0)
                    for s in signers}, since)  # type: ignore[arg-type]


def sealed(n: int, signer: Signer | None, stream_id: str = "agent-1",
           start: StreamHead | None = None, when: object = T0) -> list[Event]:
    head, events = start or StreamHead(), []
    for i in range(n):
        new = NewEvent("note.added", "tests", {"i": i}, id=f"{stream_id}-{head.version + 1}",
                       timestamp=when)  # type: ignore[arg-type]
        event = seal_encoded(stream_id, head, new, head.version + 1, signer=signer)[0]
        head = StreamHead(event.version, event.hash)
        events.append(event)
    return events


def signature_error(events: list[Event], policy: SignaturePolicy,
                    start: StreamHead | None = None) -> ChainError:
    with pytest.raises(ChainError) as info:
        verify_chain(events, start, signatures=policy)
    assert info.value.kind == "signature"
    assert "signature" in str(info.value)
    return info.value


# -- signing -------------------------------------------------------------------------------


def test_a_signed_event_carries_an_ed25519_signature_of_its_hash() -> None:
    signer = Signer.generate()
    event, wire = seal_encoded("a", StreamHead(), NewEvent("note.added", "t", {"x": 1},
                                                           timestamp=T0), 1, signer=signer)
    assert event.key_id == signer.key_id
    assert event.signature is not None
    assert len(event.signature) == 64
    signer.public_key.verify(event.signature, bytes.fromhex(event.hash))  # raises if wrong
    decoded = decode_event(wire)
    assert decoded == event
    assert decoded.signature == event.signature
    assert encode_event(event) == wire  # the codec writes the same bytes
    assert verify_chain([decoded], signatures=SignaturePolicy(keyring_of(signer))) == \
        StreamHead(1, event.hash)


def test_signing_changes_no_hash() -> None:
    """The hash covers the canonical body with null signature fields: signed or not, one
    chain, and the hash definition (event_hash) reproduces both."""
    unsigned, signed = sealed(5, None), sealed(5, Signer.generate())
    assert [e.hash for e in unsigned] == [e.hash for e in signed]
    assert [event_hash(e) for e in signed] == [e.hash for e in signed]
    # Both verify by their wire body (fast path) and from their fields (slow path).
    for events in (signed, [decode_event(encode_event(e)) for e in signed]):
        assert verify_chain(events, signatures=UNCHECKED).hash == signed[-1].hash


def test_the_key_id_is_a_stable_fingerprint_of_the_public_key() -> None:
    signer = Signer.generate()
    again = Signer.from_pem(signing.private_pem(signer.private_key))
    assert again.key_id == signer.key_id == key_id_of(signer.public_key)
    assert signer.key_id.startswith("ed25519:")
    assert len(signer.key_id) == len("ed25519:") + 16
    assert Signer.generate().key_id != signer.key_id


def test_a_writer_table_signs_what_it_seals() -> None:
    signer = Signer.generate()
    plan = StreamTable(signer=signer).plan("a", [NewEvent("note.added", "t", {"i": i})
                                                 for i in range(3)])
    assert all(e.key_id == signer.key_id for e in plan.events)
    assert [decode_event(w) for w in plan.encoded] == list(plan.events)
    verify_chain(plan.events, signatures=SignaturePolicy(keyring_of(signer)))
    assert StreamTable(signer=signer, sign=False).signer is None
    assert StreamTable().signer is None  # nothing configured: unsigned


# -- the policy ------------------------------------------------------------------------------


def test_no_keyring_checks_no_signature() -> None:
    assert default_policy() is UNCHECKED
    assert not UNCHECKED.active
    forged = replace(sealed(1, Signer.generate())[0], signature=b"\x00" * 64)
    verify_chain([forged])  # the process has no keyring: not checked
    assert "not checked" in UNCHECKED.line()


def test_a_well_chained_forgery_is_a_signature_failure() -> None:
    """What the SHA-256 chain cannot see: a correctly chained successor written by someone
    without the writer's key (unsigned, or signed with another key)."""
    writer = Signer.generate()
    events = sealed(4, writer)
    head = StreamHead(events[-1].version, events[-1].hash)
    policy = SignaturePolicy(keyring_of(writer))
    for forger in (None, Signer.generate()):
        forged = sealed(1, forger, start=head)
        verify_chain([*events, *forged], signatures=UNCHECKED)  # the hashes hold
        error = signature_error([*events, *forged], policy)
        assert (error.stream_id, error.version) == ("agent-1", 5)
    # A valid signature of another event, copied onto the forgery, does not verify either.
    copied = replace(sealed(1, None, start=head)[0], signature=events[0].signature,
                     key_id=writer.key_id)
    assert "does not verify" in str(signature_error([*events, copied], policy))


def test_unsigned_events_before_since_are_legacy_and_counted() -> None:
    writer = Signer.generate()
    legacy = sealed(3, None, when=SINCE - timedelta(hours=1))
    head = StreamHead(3, legacy[-1].hash)
    later = sealed(2, writer, start=head)
    policy = SignaturePolicy(keyring_of(writer))
    verify_chain([*legacy, *later], signatures=policy)
    verify_chain([*legacy, *later], signatures=policy)  # counted once per event
    assert (policy.signed, policy.legacy) == (2, 3)
    assert policy.summary()["unsigned_legacy"] == 3
    assert "3 unsigned (legacy" in policy.line()
    # Unsigned from `since` on: refused.
    late = sealed(1, None, start=StreamHead(5, later[-1].hash))
    assert "requires signatures since" in str(signature_error(
        late, policy, StreamHead(5, later[-1].hash)))
    # A keyring without `since` admits no unsigned event at all.
    strict = SignaturePolicy(keyring_of(writer, since=None))
    assert "every event" in str(signature_error(legacy, strict))


def test_a_signed_stream_never_goes_back_to_unsigned() -> None:
    """An unsigned event dated before `since` (a forger picks its timestamp) after a signed
    event of the same stream is refused: no downgrade."""
    writer = Signer.generate()
    signed = sealed(2, writer, when=SINCE - timedelta(hours=2))
    backdated = sealed(1, None, start=StreamHead(2, signed[-1].hash),
                       when=SINCE - timedelta(hours=1))
    policy = SignaturePolicy(keyring_of(writer))
    assert "after a signed one" in str(signature_error([*signed, *backdated], policy))
    with pytest.raises(ChainError, match="signature"):
        verify_chain(backdated, StreamHead(2, signed[-1].hash), signatures=policy,
                     after_signed=True)


def test_an_unknown_key_is_named() -> None:
    stranger = Signer.generate()
    error = signature_error(sealed(1, stranger), SignaturePolicy(keyring_of(Signer.generate())))
    assert stranger.key_id in str(error)


# -- recovery and the audit --------------------------------------------------------------------


def test_recovery_fails_a_forged_stream_like_a_broken_chain() -> None:
    writer = Signer.generate()
    events = sealed(3, writer)
    forged = sealed(1, None, start=StreamHead(3, events[-1].hash))
    verifier = StreamVerifier("agent-1", signatures=SignaturePolicy(keyring_of(writer)))
    assert verifier.feed_many([*events, *forged]) == [Feed.APPLY] * 3 + [Feed.FAILED]
    failure = verifier.finish()
    assert failure is not None
    assert (failure.version, failure.kind) == (4, "signature")
    assert not failure.discard_snapshot  # quarantine, not a snapshot fallback
    assert SIGNATURES in verifier.checks
    assert CHAIN in verifier.checks
    # Without a keyring the same stream verifies, and the record says what was checked.
    plain = StreamVerifier("agent-1", signatures=UNCHECKED)
    plain.feed_many([*events, *forged])
    assert plain.finish() is None
    assert SIGNATURES not in plain.checks


def test_the_verifier_uses_the_configured_keyring(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    writer = Signer.generate()
    path = tmp_path / "keyring.json"
    keyring_of(writer).save(path)
    monkeypatch.setenv(signing.KEYRING_ENV, str(path))
    signing.reset()
    assert default_policy().active
    verifier = StreamVerifier("agent-1")
    for event in sealed(2, None):
        verifier.feed(event)
    assert verifier.failure is not None
    assert verifier.failure.kind == "signature"


def test_the_audit_names_the_signature_and_goes_on(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    writer = Signer.generate()
    events = sealed(5, writer)
    forged = sealed(2, None, start=StreamHead(2, events[1].hash))
    path = tmp_path / "keyring.json"
    keyring_of(writer).save(path)
    monkeypatch.setenv(signing.KEYRING_ENV, str(path))
    signing.reset()
    audit = StreamAudit("agent-1")
    for offset, event in enumerate([*events[:2], *forged]):
        audit.feed(offset, event)
    # Both forged events are named (the audit goes on from the first), each as a signature.
    assert [(f.version, f.kind) for f in audit.report.findings] == [(3, "signature"),
                                                                    (4, "signature")]
    assert "signature" in audit.report.findings[0].line()
    assert audit.head == StreamHead(4, forged[-1].hash)
    assert default_policy().signed == 2


# -- keyrings and keys -----------------------------------------------------------------------


def test_a_keyring_round_trips_through_json_and_yaml(tmp_path: Path) -> None:
    a, b = Signer.generate(), Signer.generate()
    keyring = keyring_of(a, b).retire(a.key_id, T0)
    path = tmp_path / "keyring.json"
    keyring.save(path)
    loaded = Keyring.load(path)
    assert loaded.keys == keyring.keys
    assert loaded.since == SINCE
    assert loaded.keys[a.key_id].retired == T0
    import yaml

    yaml_path = tmp_path / "keyring.yaml"
    yaml_path.write_text(yaml.safe_dump(json.loads(path.read_text())))
    assert Keyring.load(yaml_path).keys == keyring.keys


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "not valid JSON"),
    ('{"keys": [{"public_key": "nope"}]}', "not a PEM public key"),
    ('{"keys": 3}', "'keys' list"),
    ('{"since": "yesterday", "keys": []}', "ISO 8601"),
])
def test_a_bad_keyring_is_a_config_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "keyring.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        Keyring.load(path)


def test_a_keyring_entry_must_carry_its_own_key_id(tmp_path: Path) -> None:
    signer = Signer.generate()
    data = keyring_of(signer).to_json()
    data["keys"][0]["key_id"] = "ed25519:0000000000000000"
    with pytest.raises(SigningError, match="not the key's own id"):
        Keyring.parse(data)


def test_the_configured_signer_must_be_in_the_configured_keyring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signer, other = Signer.generate(), Signer.generate()
    key = tmp_path / "key.pem"
    key.write_bytes(signing.private_pem(signer.private_key))
    ring = tmp_path / "keyring.json"
    monkeypatch.setenv(signing.SIGNING_KEY_ENV, str(key))
    signing.reset()
    assert configured_signer() is not None  # no keyring: signs, nothing to check against
    monkeypatch.setenv(signing.KEYRING_ENV, str(ring))
    keyring_of(other).save(ring)
    signing.reset()
    with pytest.raises(SigningError, match="not in"):
        StreamTable()
    keyring_of(other, signer).retire(signer.key_id, T0).save(ring)
    signing.reset()
    with pytest.raises(SigningError, match="retired"):
        configured_signer()
    monkeypatch.delenv(signing.SIGNING_KEY_ENV)
    signing.reset()
    with pytest.raises(SigningError, match="would be unsigned"):
        configured_signer()


def test_keys_create_list_and_rotate(tmp_path: Path) -> None:
    key, ring = tmp_path / "writer.pem", tmp_path / "keyring.json"
    runner = CliRunner()
    created = runner.invoke(keys, ["create", "--key", str(key), "--keyring", str(ring)])
    assert created.exit_code == 0, created.output
    first = Signer.load(key)
    assert first.key_id in created.output
    assert key.stat().st_mode & 0o777 == 0o600
    again = runner.invoke(keys, ["create", "--key", str(key), "--keyring", str(ring)])
    assert again.exit_code != 0  # a key file is never overwritten
    assert Signer.load(key).key_id == first.key_id
    old_events = sealed(3, first)

    rotated = runner.invoke(keys, ["rotate", "--key", str(key), "--keyring", str(ring)])
    assert rotated.exit_code == 0, rotated.output
    second = Signer.load(key)
    assert second.key_id != first.key_id
    keyring = Keyring.load(ring)
    assert set(keyring.keys) == {first.key_id, second.key_id}
    assert keyring.keys[first.key_id].retired is not None
    assert keyring.keys[second.key_id].retired is None
    # Old events stay verifiable, new ones verify with the new key: one stream, both keys.
    new_events = sealed(2, second, start=StreamHead(3, old_events[-1].hash))
    policy = SignaturePolicy(keyring)
    verify_chain([*old_events, *new_events], signatures=policy)
    assert policy.keys_seen == {first.key_id: 3, second.key_id: 2}

    listed = runner.invoke(keys, ["list", "--keyring", str(ring), "--json"])
    assert listed.exit_code == 0, listed.output
    shown = json.loads(listed.output)
    assert [k["key_id"] for k in shown["keys"]] == [first.key_id, second.key_id]
    assert shown["since"] is not None
    table = runner.invoke(keys, ["list", "--keyring", str(ring)])
    assert first.key_id in table.output
    assert "retired" in table.output


def test_keys_create_since_always_requires_every_event_signed(tmp_path: Path) -> None:
    key, ring = tmp_path / "k.pem", tmp_path / "ring.json"
    done = CliRunner().invoke(keys, ["create", "--key", str(key), "--keyring", str(ring),
                                     "--since", "always", "--principal", "rm-eu"])
    assert done.exit_code == 0, done.output
    keyring = Keyring.load(ring)
    assert keyring.since is None
    assert [e.principal for e in keyring.keys.values()] == ["rm-eu"]


def test_the_wire_body_of_a_signed_event_ends_with_hash_signature_and_key_id() -> None:
    signer = Signer.generate()
    event = sealed(1, signer)[0]
    body = encode_event(event)[HEADER_SIZE:]
    assert body.endswith(b"\x80\x01" + event.hash.encode() + b"\x02\x80\x01"
                         + (event.signature or b"") + signer.tail)
    assert body.endswith(b"\x02" + bytes([len(signer.key_id) * 2]) + signer.key_id.encode())


def test_the_hash_check_reads_the_wire_body_of_every_shape() -> None:
    """The fast path (no re-encoding) for a body of release v1 (the hash ends it), an
    unsigned body of today (two nulls after the hash) and a signed one."""
    from ares.events.chain import _Hasher
    from ares.events.wire.codec import default_codec
    from ares.events.wire.schemas import EVENT, registry
    from tests.unit.test_golden_histories import decode_history

    v1 = decode_history("chat-three-turns")[:3]
    assert registry().releases["v1"][EVENT].fingerprint != registry().get(EVENT).fingerprint
    for events in (v1, [decode_event(encode_event(e)) for e in sealed(3, None)],
                   [decode_event(encode_event(e)) for e in sealed(3, Signer.generate())]):
        hasher = _Hasher(default_codec())
        for event in events:
            hasher.check(event)
        assert hasher._versions is None  # never needed the schemas: no event re-encoded
