"""Sealed frames: envelopes signed by their senders, payloads encrypted, refusals typed.

Two codecs stand for two processes of one deployment (same keyring, each with its own guard and
clock). Time is a fake clock moved by hand.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.acl import Acl, Rule
from reach.codec import Codec
from reach.errors import AuthError, CodecError, ConfigError, ProtocolError
from reach.protocol import Envelope
from reach.security.guard import (
    ENCRYPTED_SESSION_PREFIX,
    Guard,
    SecurityConfig,
    acl_from_doc,
    acl_to_doc,
    load_acl,
    open_call,
    signed_call,
)
from reach.security.keys import Keyring

START = 1_700_000_000.0
SECRET_TEXT = "退款 4711 给 Ada — secret"


class Clock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


RING = Keyring.generate()


def codec(ring: Keyring = RING, *, encrypt: bool = False, now: float = START) -> Codec:
    return Codec(guard=Guard(SecurityConfig(encrypt=encrypt, keyring="unused"), ring,
                             clock=Clock(now)))


def request(i: int = 0, *, session_id: str | None = None, sender: str = "router-1") -> Envelope:
    return Envelope.request(sender, "refunds-1", {"text": SECRET_TEXT, "n": i}, "refund@1.0",
                            session_id=session_id)


def flip_bit(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def items(frame: bytes) -> list[Any]:
    version, kind, body = msgpack.unpackb(frame, raw=False)
    assert (version, kind) == (1, 2)
    return list(body)


def frame_of(body: list[Any]) -> bytes:
    return bytes(msgpack.packb([1, 2, body], use_bin_type=True))


def reason(exc: BaseException) -> object:
    assert isinstance(exc, AuthError), exc
    return exc.details["reason"]


def test_signed_batch_round_trips_between_two_processes() -> None:
    sent = [request(i) for i in range(5)]
    got = codec().decode_batch(codec().encode_batch(sent))
    assert got == sent


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_flipped_bit_of_a_sealed_envelope_is_refused_and_the_rest_delivered(
        data: st.DataObject) -> None:
    sender, receiver = codec(), codec()
    body = items(sender.encode_batch([request(0), request(1), request(2)]))
    victim = data.draw(st.integers(0, 2), label="envelope")
    part = data.draw(st.integers(0, 3), label="part")  # sealed bytes, timestamp, nonce, mac
    item = list(body[victim])
    if part == 1:
        item[1] = item[1] + data.draw(st.sampled_from([1e-6, -1e-6, 1.0]), label="shift")
    else:
        bit = data.draw(st.integers(0, len(item[part]) * 8 - 1), label="bit")
        item[part] = flip_bit(item[part], bit)
    body[victim] = item
    envelopes, refused = receiver.decode_batch_partial(frame_of(body))
    assert [r.index for r in refused] == [victim]
    assert isinstance(refused[0].error, AuthError | ProtocolError)
    assert sorted(e.payload["n"] for e in envelopes) == sorted({0, 1, 2} - {victim})


@pytest.mark.parametrize(("skew", "accepted"), [(299.0, True), (-299.0, True),
                                                (301.0, False), (-301.0, False)])
def test_timestamp_skew_inside_the_window_is_accepted_and_outside_refused(
        skew: float, accepted: bool) -> None:
    sent = request()
    frame = codec(now=START + skew).encode(sent)
    receiver = codec(now=START)
    if accepted:
        assert receiver.decode(frame) == sent
        return
    envelopes, refused = receiver.decode_batch_partial(frame)
    assert envelopes == []
    assert reason(refused[0].error) == "replay_window"


def test_a_replayed_frame_is_refused() -> None:
    receiver = codec()
    frame = codec().encode_batch([request(0), request(1)])
    assert len(receiver.decode_batch(frame)) == 2
    envelopes, refused = receiver.decode_batch_partial(frame)
    assert envelopes == []
    assert [reason(r.error) for r in refused] == ["replayed_nonce", "replayed_nonce"]


def test_a_frame_signed_with_another_keyring_is_refused() -> None:
    sent = request()
    frame = codec(Keyring.generate()).encode(sent)
    envelopes, refused = codec().decode_batch_partial(frame)
    assert envelopes == []
    assert reason(refused[0].error) == "bad_signature"
    assert (refused[0].msg_id, refused[0].sender) == (sent.msg_id, "router-1")


def test_an_envelope_signed_by_one_principal_but_naming_another_is_refused() -> None:
    sender = codec()
    assert sender.guard is not None
    item = items(sender.encode(request()))[0]
    fields = msgpack.unpackb(item[0], raw=False)
    fields[2] = "refunds-admin"  # claims another sender, keeps router-1's MAC
    item[0] = msgpack.packb(fields, use_bin_type=True)
    _, refused = codec().decode_batch_partial(frame_of([item]))
    assert reason(refused[0].error) == "bad_signature"


def test_an_unsigned_frame_is_refused_where_signing_is_on() -> None:
    with pytest.raises(AuthError) as excinfo:
        codec().decode_batch(Codec().encode(request()))
    assert reason(excinfo.value) == "unsigned"


def test_a_signed_frame_is_refused_where_signing_is_off() -> None:
    with pytest.raises(CodecError) as excinfo:
        Codec().decode(codec().encode(request()))
    assert excinfo.value.details["rule"] == "signing_off"


def test_encrypted_payloads_travel_as_ciphertext_and_arrive_as_plaintext() -> None:
    sent = request()
    frame = codec(encrypt=True).encode(sent)
    assert SECRET_TEXT.encode() not in frame
    assert b"4711" not in frame
    got = codec(encrypt=True).decode(frame)
    assert got.payload == sent.payload
    assert got == sent


def test_a_ciphertext_moved_to_another_envelope_is_refused_and_never_delivered() -> None:
    # An insider holding the signing key re-signs the swap: only the AEAD binding can catch it.
    sender = codec(encrypt=True)
    assert sender.guard is not None
    first, second = (items(sender.encode(request(i)))[0] for i in (1, 2))
    f1, f2 = (msgpack.unpackb(x[0], raw=False) for x in (first, second))
    f1[4] = f2[4]  # the second envelope's ciphertext under the first envelope's header
    sealed = msgpack.packb(f1, use_bin_type=True)
    sig = sender.guard.sign("router-1", sealed)
    envelopes, refused = codec(encrypt=True).decode_batch_partial(
        frame_of([[sealed, sig.timestamp, sig.nonce, sig.mac]]))
    assert envelopes == []
    assert reason(refused[0].error) == "bad_ciphertext"


def test_a_clear_payload_in_an_encrypted_session_is_refused() -> None:
    clear = codec()  # this process does not encrypt the deployment's payloads
    encrypted = request(session_id=ENCRYPTED_SESSION_PREFIX + "s1")
    frame = clear.encode(encrypted)
    assert SECRET_TEXT.encode() not in frame  # its session alone makes it encrypted
    assert codec().decode(frame) == encrypted
    assert clear.guard is not None
    item = items(codec().encode(request(session_id="s2")))[0]
    fields = msgpack.unpackb(item[0], raw=False)
    fields[10] = ENCRYPTED_SESSION_PREFIX + "s2"  # claims the encrypted session, in clear
    sealed = msgpack.packb(fields, use_bin_type=True)
    sig = clear.guard.sign("router-1", sealed)
    _, refused = codec().decode_batch_partial(frame_of([[sealed, sig.timestamp, sig.nonce,
                                                          sig.mac]]))
    assert reason(refused[0].error) == "not_encrypted"


def test_rotated_keys_still_decrypt_what_the_old_key_encrypted() -> None:
    ring = Keyring.generate()
    old = codec(ring, encrypt=True).encode(request())
    ring.rotate()
    new = codec(ring, encrypt=True).encode(request(1))
    receiver = codec(ring, encrypt=True)
    assert receiver.decode(old).payload["n"] == 0
    assert receiver.decode(new).payload["n"] == 1


def test_signed_registry_calls_verify_and_tampering_is_refused() -> None:
    guard = codec().guard
    assert guard is not None
    data, sig = signed_call(guard, "reach.pool.p.0", [[{"agent_id": "a"}], True])
    assert open_call(codec().guard, "reach.pool.p.0", data, sig) == [[{"agent_id": "a"}], True]
    with pytest.raises(AuthError) as excinfo:
        open_call(codec().guard, "reach.pool.p.0", flip_bit(data, 3), sig)
    assert reason(excinfo.value) == "bad_signature"
    with pytest.raises(AuthError) as excinfo:
        open_call(codec().guard, "reach.pool.p.1", data, sig)  # signed by another host
    assert reason(excinfo.value) == "bad_signature"
    with pytest.raises(AuthError) as excinfo:
        open_call(codec().guard, "reach.pool.p.0", data, None)
    assert reason(excinfo.value) == "unsigned"


def test_settings_travel_with_the_cluster_handle_intact() -> None:
    from reach._ray import RayCluster

    config = SecurityConfig(sign=True, encrypt=True, keyring="/k.json", audit_calls=False,
                            window_s=60.0)
    travelled = pickle.loads(pickle.dumps(RayCluster(config)))
    assert travelled.security == config
    assert travelled.namespace == "reach"
    with pytest.raises(ConfigError):
        SecurityConfig(sign=False, encrypt=True)


def test_acl_documents_and_files_round_trip(tmp_path: Path) -> None:
    acl = Acl((Rule(("router-*",), ("refund.*",)), Rule(("cap:public.*",), ("*",), False)),
              default_allow=False)
    assert acl_from_doc(acl_to_doc(acl)) == acl
    path = tmp_path / "acl.json"
    path.write_text(json.dumps(acl_to_doc(acl)), encoding="utf-8")
    assert load_acl(path) == acl
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_acl(path)


def test_the_guard_applies_a_new_acl_at_once() -> None:
    guard = codec().guard
    assert guard is not None
    assert guard.allow("router-1", (), ("refund.issue",)).allowed
    guard.set_acl(Acl((Rule(("router-*",), ("refund.*",), allow=False),)))
    decision = guard.allow("router-1", (), ("refund.issue",))
    assert not decision.allowed
    assert decision.rule == 0


def test_a_rotation_made_elsewhere_is_adopted_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    ring = Keyring.generate()
    ring.save(path)
    config = SecurityConfig(encrypt=True, keyring=str(path))
    running = Codec(guard=Guard(config, Keyring.load(path)))  # started before the rotation
    operator = Keyring.load(path)
    new_kid = operator.rotate()
    operator.save(path)
    newcomer = Codec(guard=Guard(config, Keyring.load(path)))  # started after it
    assert newcomer.decode(running.encode(request(1))).payload["n"] == 1  # old key decrypts
    assert running.decode(newcomer.encode(request(2))).payload["n"] == 2  # re-reads the file
    assert running.guard is not None
    assert running.guard.keyring.current == new_kid  # and now encrypts with the new key
