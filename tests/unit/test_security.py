"""Signatures, replay protection, payload encryption and the keyring.

Time is a fake clock the test moves by hand: no sleeps, no wall clock.
"""

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reach.errors import AuthError
from reach.security.keys import Cipher, Keyring, Signer, Verifier, header_aad

WINDOW_S = 300.0
START = 1_700_000_000.0
DATA = b"transfer 10 credits to agent-7"
UNICODE_PAYLOAD = "退款 ✓ — Grüße, привет, 🤖".encode()


class FakeClock:
    """A clock that stands still until the test moves it."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def flip_bit(data: bytes, bit: int) -> bytes:
    """``data`` with bit number ``bit`` (0 = lowest bit of the first byte) inverted."""
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def refusal_reason(excinfo: pytest.ExceptionInfo[AuthError]) -> object:
    return excinfo.value.details["reason"]


# One keyring for the property-based tests (hypothesis does not mix with function fixtures).
RING = Keyring.generate()


def aad_for(ring: Keyring, **overrides: str) -> bytes:
    header: dict[str, str] = {"sender": "router-1", "receiver": "refunds-2", "msg_type": "request",
                              "msg_id": "m-1", "schema": "refund@1.0", "kid": ring.current}
    header.update(overrides)
    return header_aad(timestamp=START, **header)


@pytest.fixture
def ring() -> Keyring:
    return Keyring.generate()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def signer(ring: Keyring, clock: FakeClock) -> Signer:
    return Signer(ring, clock=clock)


@pytest.fixture
def verifier(ring: Keyring, clock: FakeClock) -> Verifier:
    return Verifier(ring, window_s=WINDOW_S, clock=clock)


# --- signatures --------------------------------------------------------------------------------


def test_a_signature_of_the_same_principal_and_data_verifies(
        signer: Signer, verifier: Verifier) -> None:
    verifier.verify("agent-1", DATA, signer.sign("agent-1", DATA))


@given(data=st.binary(min_size=1, max_size=200), choice=st.data())
def test_flipping_any_bit_of_the_data_is_refused_as_a_bad_signature(
        data: bytes, choice: st.DataObject) -> None:
    clock = FakeClock()
    signature = Signer(RING, clock=clock).sign("agent-1", data)
    bit = choice.draw(st.integers(0, len(data) * 8 - 1), label="bit")
    with pytest.raises(AuthError) as excinfo:
        Verifier(RING, window_s=WINDOW_S, clock=clock).verify(
            "agent-1", flip_bit(data, bit), signature)
    assert refusal_reason(excinfo) == "bad_signature"


@pytest.mark.parametrize("part", ["mac", "nonce"])
@given(choice=st.data())
def test_flipping_any_bit_of_the_signature_is_refused_as_a_bad_signature(
        part: str, choice: st.DataObject) -> None:
    clock = FakeClock()
    signature = Signer(RING, clock=clock).sign("agent-1", DATA)
    original: bytes = getattr(signature, part)
    bit = choice.draw(st.integers(0, len(original) * 8 - 1), label="bit")
    if part == "mac":
        tampered = dataclasses.replace(signature, mac=flip_bit(original, bit))
    else:
        tampered = dataclasses.replace(signature, nonce=flip_bit(original, bit))
    with pytest.raises(AuthError) as excinfo:
        Verifier(RING, window_s=WINDOW_S, clock=clock).verify("agent-1", DATA, tampered)
    assert refusal_reason(excinfo) == "bad_signature"


@pytest.mark.parametrize("shift_s", [-1.0, 1e-6, 1.0, 120.0])
def test_a_changed_timestamp_inside_the_window_is_refused_as_a_bad_signature(
        signer: Signer, verifier: Verifier, shift_s: float) -> None:
    signature = signer.sign("agent-1", DATA)
    moved = dataclasses.replace(signature, timestamp=signature.timestamp + shift_s)
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("agent-1", DATA, moved)
    assert refusal_reason(excinfo) == "bad_signature"


@pytest.mark.parametrize("direction", [1, -1], ids=["signer-ahead", "signer-behind"])
def test_a_skew_of_299_s_is_accepted_either_way(ring: Keyring, direction: int) -> None:
    signer = Signer(ring, clock=FakeClock(START + direction * 299.0))
    verifier = Verifier(ring, window_s=WINDOW_S, clock=FakeClock(START))
    verifier.verify("agent-1", DATA, signer.sign("agent-1", DATA))


@pytest.mark.parametrize("direction", [1, -1], ids=["signer-ahead", "signer-behind"])
def test_a_skew_of_301_s_is_refused_as_outside_the_replay_window_either_way(
        ring: Keyring, direction: int) -> None:
    signer = Signer(ring, clock=FakeClock(START + direction * 301.0))
    verifier = Verifier(ring, window_s=WINDOW_S, clock=FakeClock(START))
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("agent-1", DATA, signer.sign("agent-1", DATA))
    assert refusal_reason(excinfo) == "replay_window"
    assert excinfo.value.details["skew_s"] == pytest.approx(301.0)


def test_the_same_signature_verified_twice_is_refused_the_second_time(
        signer: Signer, verifier: Verifier) -> None:
    signature = signer.sign("agent-1", DATA)
    verifier.verify("agent-1", DATA, signature)
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("agent-1", DATA, signature)
    assert refusal_reason(excinfo) == "replayed_nonce"


def test_a_signature_made_with_another_keyring_is_refused(
        clock: FakeClock, verifier: Verifier) -> None:
    forger = Signer(Keyring.generate(), clock=clock)
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("agent-1", DATA, forger.sign("agent-1", DATA))
    assert refusal_reason(excinfo) == "bad_signature"


def test_a_signature_by_another_principal_is_refused(signer: Signer, verifier: Verifier) -> None:
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("agent-1", DATA, signer.sign("agent-2", DATA))
    assert refusal_reason(excinfo) == "bad_signature"
    assert excinfo.value.details["principal"] == "agent-1"


def test_an_unknown_principal_is_refused_before_its_signature_is_checked(
        ring: Keyring, clock: FakeClock, signer: Signer) -> None:
    asked: list[str] = []

    def known(principal: str) -> bool:
        asked.append(principal)
        return principal == "agent-1"

    verifier = Verifier(ring, window_s=WINDOW_S, known=known, clock=clock)
    verifier.verify("agent-1", DATA, signer.sign("agent-1", DATA))
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("mallory", DATA, signer.sign("mallory", DATA))
    assert refusal_reason(excinfo) == "unknown_principal"
    assert excinfo.value.details["principal"] == "mallory"
    assert asked == ["agent-1", "mallory"]


def test_nonces_from_one_signer_never_repeat_over_ten_thousand_signatures(
        signer: Signer) -> None:
    nonces = {signer.sign("agent-1", DATA).nonce for _ in range(10_000)}
    assert len(nonces) == 10_000


def test_two_signers_on_one_keyring_do_not_share_nonces(ring: Keyring, clock: FakeClock) -> None:
    first, second = Signer(ring, clock=clock), Signer(ring, clock=clock)
    ours = {first.sign("agent-1", DATA).nonce for _ in range(100)}
    theirs = {second.sign("agent-1", DATA).nonce for _ in range(100)}
    assert not ours & theirs


def test_signers_silent_for_a_window_are_forgotten_and_their_replays_refused_by_the_window(
        ring: Keyring, signer: Signer, verifier: Verifier, clock: FakeClock) -> None:
    quiet = Signer(ring, clock=clock)
    old = quiet.sign("agent-2", DATA)
    verifier.verify("agent-2", DATA, old)
    clock.advance(WINDOW_S + 1)
    verifier.verify("agent-1", DATA, signer.sign("agent-1", DATA))  # a later accept prunes
    # Memory is bounded by the signers active within the window, not by messages.
    assert not verifier.seen(old.nonce)
    assert verifier.remembered == 1
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("agent-2", DATA, old)
    assert refusal_reason(excinfo) == "replay_window"


def test_out_of_order_nonces_are_accepted_once_and_far_older_ones_refused(
        signer: Signer, verifier: Verifier) -> None:
    from reach.security.keys import NONCE_WINDOW

    first, second = signer.sign("agent-1", DATA), signer.sign("agent-1", DATA)
    verifier.verify("agent-1", DATA, second)
    verifier.verify("agent-1", DATA, first)  # late, not seen: accepted
    with pytest.raises(AuthError):
        verifier.verify("agent-1", DATA, first)
    lagging = signer.sign("agent-1", DATA)
    for _ in range(NONCE_WINDOW):
        signer.sign("agent-1", DATA)
    verifier.verify("agent-1", DATA, signer.sign("agent-1", DATA))
    with pytest.raises(AuthError) as excinfo:  # too far behind to tell from a replay
        verifier.verify("agent-1", DATA, lagging)
    assert refusal_reason(excinfo) == "replayed_nonce"


def test_nonces_inside_the_window_are_kept_and_their_replay_is_refused_by_the_nonce(
        signer: Signer, verifier: Verifier, clock: FakeClock) -> None:
    old = signer.sign("agent-1", DATA)
    verifier.verify("agent-1", DATA, old)
    clock.advance(WINDOW_S - 1)
    verifier.verify("agent-1", DATA, signer.sign("agent-1", DATA))
    with pytest.raises(AuthError) as excinfo:
        verifier.verify("agent-1", DATA, old)
    assert refusal_reason(excinfo) == "replayed_nonce"


# --- payload encryption ------------------------------------------------------------------------


def test_a_unicode_payload_round_trips_through_the_cipher(ring: Keyring) -> None:
    cipher, aad = Cipher(ring), aad_for(ring)
    kid, nonce, ciphertext = cipher.encrypt(UNICODE_PAYLOAD, aad)
    assert ciphertext != UNICODE_PAYLOAD
    assert Cipher(ring).decrypt(kid, nonce, ciphertext, aad) == UNICODE_PAYLOAD


@given(choice=st.data())
def test_a_ciphertext_with_any_bit_flipped_is_refused(choice: st.DataObject) -> None:
    cipher, aad = Cipher(RING), aad_for(RING)
    kid, nonce, ciphertext = cipher.encrypt(UNICODE_PAYLOAD, aad)
    bit = choice.draw(st.integers(0, len(ciphertext) * 8 - 1), label="bit")
    with pytest.raises(AuthError) as excinfo:
        cipher.decrypt(kid, nonce, flip_bit(ciphertext, bit), aad)
    assert refusal_reason(excinfo) == "bad_ciphertext"


@pytest.mark.parametrize(("field", "other"), [("msg_id", "m-2"), ("receiver", "refunds-3"),
                                              ("schema", "refund@2.0"), ("sender", "router-9")])
def test_a_ciphertext_moved_to_another_envelope_is_refused(
        ring: Keyring, field: str, other: str) -> None:
    cipher = Cipher(ring)
    kid, nonce, ciphertext = cipher.encrypt(UNICODE_PAYLOAD, aad_for(ring))
    with pytest.raises(AuthError) as excinfo:
        cipher.decrypt(kid, nonce, ciphertext, aad_for(ring, **{field: other}))
    assert refusal_reason(excinfo) == "bad_ciphertext"


def test_an_unknown_key_id_is_refused(ring: Keyring) -> None:
    cipher, aad = Cipher(ring), aad_for(ring)
    _, nonce, ciphertext = cipher.encrypt(UNICODE_PAYLOAD, aad)
    with pytest.raises(AuthError) as excinfo:
        cipher.decrypt("k99-000000", nonce, ciphertext, aad)
    assert refusal_reason(excinfo) == "unknown_key"
    assert excinfo.value.details["kid"] == "k99-000000"


def test_after_rotation_new_ciphertexts_use_the_new_key_and_old_ones_still_decrypt(
        ring: Keyring) -> None:
    cipher = Cipher(ring)
    old_aad = aad_for(ring)
    old_kid, old_nonce, old_ciphertext = cipher.encrypt(b"before", old_aad)

    new_kid = ring.rotate()
    new_aad = aad_for(ring)
    kid, nonce, ciphertext = cipher.encrypt(b"after", new_aad)

    assert old_kid != new_kid
    assert kid == new_kid == ring.current
    assert cipher.decrypt(old_kid, old_nonce, old_ciphertext, old_aad) == b"before"
    assert Cipher(ring).decrypt(old_kid, old_nonce, old_ciphertext, old_aad) == b"before"
    assert Cipher(ring).decrypt(kid, nonce, ciphertext, new_aad) == b"after"


def test_nonces_from_one_cipher_never_repeat(ring: Keyring) -> None:
    cipher, aad = Cipher(ring), aad_for(ring)
    nonces = {cipher.encrypt(b"x", aad)[1] for _ in range(10_000)}
    assert len(nonces) == 10_000
    assert {len(n) for n in nonces} == {12}


# --- the keyring -------------------------------------------------------------------------------


def test_a_saved_keyring_is_readable_by_its_owner_only_and_loads_back_equal(
        ring: Keyring, tmp_path: Path) -> None:
    ring.rotate()
    path = tmp_path / "keys" / "ring.json"
    ring.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = Keyring.load(path)
    assert loaded == ring
    assert loaded.secret("agent-1") == ring.secret("agent-1")


def test_loading_a_missing_keyring_is_an_auth_error(tmp_path: Path) -> None:
    with pytest.raises(AuthError) as excinfo:
        Keyring.load(tmp_path / "absent.json")
    assert refusal_reason(excinfo) == "keyring"


@pytest.mark.parametrize("body", [
    "not json at all",
    "[]",
    "null",
    json.dumps({"current": "k1"}),
    json.dumps({"master": "zz", "data_keys": {}, "current": ""}),
    json.dumps({"master": "00", "data_keys": {"k1": "not hex"}, "current": "k1"}),
], ids=["not-json", "list", "null", "no-master", "master-not-hex", "data-key-not-hex"])
def test_loading_a_corrupt_keyring_is_an_auth_error(tmp_path: Path, body: str) -> None:
    path = tmp_path / "ring.json"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(AuthError) as excinfo:
        Keyring.load(path)
    assert refusal_reason(excinfo) == "keyring"


def test_two_keyrings_derive_different_secrets_for_the_same_principal() -> None:
    assert Keyring.generate().secret("agent-1") != Keyring.generate().secret("agent-1")


def test_one_keyring_derives_the_same_secret_every_time_and_one_per_principal(
        ring: Keyring) -> None:
    assert ring.secret("agent-1") == ring.secret("agent-1")
    assert ring.secret("agent-1") != ring.secret("agent-2")
    assert len(ring.secret("客服-1")) == 32



def test_saving_over_an_existing_readable_file_makes_it_private(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    path.write_text("{}", encoding="utf-8")
    path.chmod(0o644)
    Keyring.generate().save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("body", [
    {"master": "00", "data_keys": [], "current": ""},
    {"master": "00" * 32, "data_keys": {}, "current": "k1"},
    {"master": "00" * 8, "data_keys": {"k1": "00" * 32}, "current": "k1"},
], ids=["data-keys-not-a-map", "current-key-missing", "short-master"])
def test_a_malformed_keyring_file_is_an_auth_error(tmp_path: Path, body: dict[str, object],
                                                     ) -> None:
    path = tmp_path / "keyring.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    with pytest.raises(AuthError):
        Keyring.load(path)


def test_a_clock_stepped_back_does_not_reopen_the_window_for_a_replay() -> None:
    ring, clock = Keyring.generate(), FakeClock(600.0)
    signer, verifier = Signer(ring, clock), Verifier(ring, 300.0, clock=clock)
    first = signer.sign("a", b"x")
    verifier.verify("a", b"x", first)
    clock.now = 1000.0
    verifier.verify("a", b"y", signer.sign("a", b"y"))  # prunes the first nonce
    clock.now = 850.0
    with pytest.raises(AuthError) as err:
        verifier.verify("a", b"x", first)
    assert err.value.details["reason"] == "replay_window"


def test_a_signature_with_a_non_finite_timestamp_is_refused() -> None:
    ring, clock = Keyring.generate(), FakeClock(600.0)
    sig = Signer(ring, lambda: float("nan")).sign("a", b"x")
    with pytest.raises(AuthError) as err:
        Verifier(ring, clock=clock).verify("a", b"x", sig)
    assert err.value.details["reason"] == "replay_window"


def test_the_message_budget_starts_again_with_a_rotated_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reach.security.keys

    monkeypatch.setattr(reach.security.keys, "MAX_MESSAGES_PER_KEY", 2)
    ring = Keyring.generate()
    cipher = Cipher(ring)
    cipher.encrypt(b"1", b"aad")
    cipher.encrypt(b"2", b"aad")
    with pytest.raises(AuthError, match="rotate"):
        cipher.encrypt(b"3", b"aad")
    ring.rotate()
    assert cipher.encrypt(b"3", b"aad")[0] == ring.current


@given(st.binary(max_size=300), st.binary(min_size=16, max_size=16),
       st.floats(allow_nan=False, allow_infinity=False))
def test_the_fast_mac_is_the_standard_hmac(data: bytes, nonce: bytes, timestamp: float) -> None:
    from reach.security.keys import _Keyed, _mac

    secret = RING.secret("agent-1")
    assert _Keyed(secret).mac(timestamp, nonce, data) == _mac(secret, timestamp, nonce, data)
