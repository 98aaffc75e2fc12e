"""Identities, signatures and payload encryption: the primitives. :mod:`reach.security.guard`
applies them in a process: the codec signs, verifies and encrypts with them, the registry and
the hosts check registrations, heartbeats and the ACL.

- A :class:`Keyring` holds a deployment's master key and its data keys. Each principal's (agent,
  host, driver) signing secret is derived from the master key, so any process holding the keyring
  can verify any principal and nobody without it can sign as one.
- A :class:`Signer` signs bytes with HMAC-SHA256 over ``timestamp | nonce | bytes``; nonces are a
  per-process random prefix and a counter, never reused. A :class:`Verifier` checks the signature
  in constant time, a replay window (default 300 s either way) and that no nonce repeats within
  it; each refusal is an :class:`~reach.errors.AuthError` naming its reason.
- A :class:`Cipher` encrypts payloads with AES-GCM under the current data key, the envelope's
  header bound as associated data, so a ciphertext moved to another envelope does not decrypt.
  Nonces are a random 4-byte prefix per process and an 8-byte counter; data keys carry an ID so
  that they can be rotated without downtime (old IDs still decrypt).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from reach.errors import AuthError

#: Where the embedded default keeps the deployment's keyring, under the current folder.
DEFAULT_KEYRING = ".reach/keyring.json"
#: How far a signature's timestamp may be from the verifier's clock, either way (seconds).
REPLAY_WINDOW_S = 300.0
#: Messages one process may encrypt under one data key before it must rotate (counter nonces).
MAX_MESSAGES_PER_KEY = 2**32


def _refuse(reason: str, message: str, **details: str | float) -> AuthError:
    return AuthError(message, details={"reason": reason, **details})


@dataclass
class Keyring:
    """A deployment's keys.

    Attributes:
        master: The key every principal's signing secret is derived from (32 bytes).
        data_keys: AES-256 keys by key ID.
        current: The key ID new ciphertexts use.
    """

    master: bytes = field(repr=False)
    data_keys: dict[str, bytes] = field(default_factory=dict, repr=False)
    current: str = ""

    @classmethod
    def generate(cls) -> Keyring:
        """A new keyring with a random master key and one data key."""
        ring = cls(os.urandom(32))
        ring.rotate()
        return ring

    def secret(self, principal: str) -> bytes:
        """The signing secret of a principal (an agent, host or driver ID)."""
        return hmac.new(self.master, b"reach/principal/" + principal.encode("utf-8"),
                        hashlib.sha256).digest()

    def rotate(self) -> str:
        """Adds a data key and makes it current; returns its ID (older keys still decrypt)."""
        kid = f"k{len(self.data_keys) + 1}-{os.urandom(3).hex()}"
        self.data_keys[kid] = AESGCM.generate_key(bit_length=256)
        self.current = kid
        return kid

    def save(self, path: str | Path) -> None:
        """Writes the keyring atomically, readable by its owner only (even over an old file)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"master": self.master.hex(), "current": self.current,
                           "data_keys": {k: v.hex() for k, v in self.data_keys.items()}})
        temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(body)
        os.replace(temp, target)

    @classmethod
    def load(cls, path: str | Path) -> Keyring:
        """Reads a keyring written by :meth:`save`.

        Raises:
            AuthError: the file is missing or not a keyring.
        """
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
            ring = cls(bytes.fromhex(raw["master"]),
                       {k: bytes.fromhex(v) for k, v in raw["data_keys"].items()},
                       raw["current"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _refuse("keyring", f"cannot read the keyring at {path}: {exc}") from exc
        if len(ring.master) != 32 or ring.current not in ring.data_keys:
            raise _refuse("keyring", f"the keyring at {path} is incomplete: a 32-byte master "
                          "key and a current data key are needed")
        return ring


class _Nonces:
    """Unique nonces: a random prefix per process and a counter."""

    def __init__(self, prefix_bytes: int) -> None:
        self.prefix = os.urandom(prefix_bytes)
        self.counter = itertools.count()

    def next(self) -> bytes:
        return self.prefix + struct.pack(">Q", next(self.counter))


@dataclass(frozen=True)
class Signature:
    """What travels with signed bytes: when, a never-reused nonce, and the HMAC."""

    timestamp: float
    nonce: bytes
    mac: bytes


class _Keyed:
    """HMAC-SHA256 under one secret, its padded-key states computed once (RFC 2104): each MAC
    then costs two hash copies, not a new HMAC context."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: bytes) -> None:
        key = secret.ljust(64, b"\0")  # secrets are 32 bytes: shorter than SHA-256's block
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def mac(self, timestamp: float, nonce: bytes, data: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(struct.pack(">d", timestamp))
        inner.update(nonce)
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


def _mac(secret: bytes, timestamp: float, nonce: bytes, data: bytes) -> bytes:
    """The reference HMAC (what :class:`_Keyed` computes faster)."""
    return hmac.digest(secret, struct.pack(">d", timestamp) + nonce + data, "sha256")


class Signer:
    """Signs bytes on behalf of principals.

    Args:
        keyring: The deployment's keys.
        clock: Seconds since the epoch (injectable).
    """

    def __init__(self, keyring: Keyring, clock: Callable[[], float] = time.time) -> None:
        self.keyring = keyring
        self.clock = clock
        self._nonces = _Nonces(8)
        self._secrets: dict[str, _Keyed] = {}

    def sign(self, principal: str, data: bytes) -> Signature:
        """The signature of ``data`` by ``principal``."""
        keyed = self._secrets.get(principal)
        if keyed is None:
            keyed = self._secrets[principal] = _Keyed(self.keyring.secret(principal))
        timestamp, nonce = self.clock(), self._nonces.next()
        return Signature(timestamp, nonce, keyed.mac(timestamp, nonce, data))


#: How many counters behind the newest one a signer's nonce may arrive (out-of-order delivery).
NONCE_WINDOW = 1 << 15
_WINDOW_MASK = (1 << NONCE_WINDOW) - 1


class _Window:
    """Counters seen from one signer process: the highest, and a bitmap of the ones below it."""

    __slots__ = ("bits", "high", "last")

    def __init__(self) -> None:
        self.high = -1
        self.bits = 0  # bit i set: counter high - i was seen
        self.last = 0.0  # newest timestamp seen, for forgetting idle signers

    def admit(self, counter: int) -> bool:
        """Records a counter; False if it was seen already or is too far behind to tell."""
        if counter > self.high:
            bits = (self.bits << (counter - self.high)) | 1
            # Trimmed only once it has grown well past the window: one big mask, not one a call.
            self.bits = bits & _WINDOW_MASK if bits.bit_length() > 2 * NONCE_WINDOW else bits
            self.high = counter
            return True
        behind = self.high - counter
        if behind >= NONCE_WINDOW:
            return False
        bit = 1 << behind
        if self.bits & bit:
            return False
        self.bits |= bit
        return True


class Verifier:
    """Checks signatures: the MAC, the replay window, and that no nonce is seen twice.

    Nonces are a signer's 8-byte process prefix and an 8-byte counter, so the verifier keeps, per
    signer process, the highest counter and a bitmap of the :data:`NONCE_WINDOW` counters below
    it (as IPsec does): memory stays bounded by the number of signers, not of messages. A nonce
    further behind than that cannot be told from a replay and is refused as one.

    Args:
        keyring: The deployment's keys.
        window_s: How far a timestamp may be from this clock, either way.
        known: Tells whether a principal exists (unknown principals are refused).
        clock: Seconds since the epoch (injectable).
    """

    def __init__(self, keyring: Keyring, window_s: float = REPLAY_WINDOW_S,
                 known: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.keyring = keyring
        self.window_s = window_s
        self.known = known
        self.clock = clock
        # Invariant: every signer seen within the last window has its counter window here.
        self._signers: dict[bytes, _Window] = {}
        self._secrets: dict[str, _Keyed] = {}
        self._next_prune = 0.0
        self._high = float("-inf")

    def verify(self, principal: str, data: bytes, signature: Signature) -> None:
        """Accepts the signature or refuses it.

        Raises:
            AuthError: ``details["reason"]`` is ``unknown_principal``, ``replay_window``,
                ``bad_signature`` or ``replayed_nonce``.
        """
        if self.known is not None and not self.known(principal):
            raise _refuse("unknown_principal", f"{principal!r} is not a known agent",
                          principal=principal)
        now = self.clock()
        # The high-water mark keeps a clock stepped backwards from reopening the window on
        # signatures whose signers were already forgotten.
        self._high = max(self._high, now)
        skew = abs(now - signature.timestamp)
        if (not math.isfinite(signature.timestamp) or skew > self.window_s
                or signature.timestamp < self._high - self.window_s):
            raise _refuse("replay_window", f"signature of {principal!r} is {skew:.0f} s from "
                          f"this clock, outside the {self.window_s:.0f} s window",
                          principal=principal, skew_s=skew)
        keyed = self._secrets.get(principal)
        if keyed is None:
            keyed = self._secrets[principal] = _Keyed(self.keyring.secret(principal))
        expected = keyed.mac(signature.timestamp, signature.nonce, data)
        if not hmac.compare_digest(expected, signature.mac):
            raise _refuse("bad_signature", f"bad signature on a message from {principal!r}",
                          principal=principal)
        nonce = signature.nonce
        window = self._signers.get(nonce[:8])
        if window is None:
            window = self._signers[nonce[:8]] = _Window()
        if len(nonce) != 16 or not window.admit(int.from_bytes(nonce[8:], "big")):
            raise _refuse("replayed_nonce", f"a message from {principal!r} was replayed",
                          principal=principal)
        window.last = max(window.last, signature.timestamp)
        if now >= self._next_prune:
            self._prune(now)

    def _prune(self, now: float) -> None:
        oldest = self._high - self.window_s
        # A signer silent for a whole window can be forgotten: its old nonces fail the window.
        self._signers = {p: w for p, w in self._signers.items() if w.last >= oldest}
        self._next_prune = now + self.window_s / 10

    @property
    def remembered(self) -> int:
        """How many signers' nonce windows are kept: those active within the last window (so
        memory is bounded by signers, not by messages)."""
        return len(self._signers)

    def seen(self, nonce: bytes) -> bool:
        """Whether a nonce is remembered as seen (its replay would be refused by the nonce)."""
        window = self._signers.get(nonce[:8])
        if window is None or len(nonce) != 16:
            return False
        behind = window.high - int.from_bytes(nonce[8:], "big")
        return 0 <= behind < NONCE_WINDOW and bool(window.bits >> behind & 1)


class Cipher:
    """AES-GCM payload encryption with the header as associated data.

    Args:
        keyring: The deployment's keys (``current`` encrypts, any known ID decrypts).
        reload: Called once when a key ID is unknown, to re-read the keyring (its file may have
            been rotated by the operator since this process started).
    """

    def __init__(self, keyring: Keyring, reload: Callable[[], None] | None = None) -> None:
        self.keyring = keyring
        self.reload = reload  # re-reads the keyring: a key ID from a rotation made elsewhere
        self._nonces = _Nonces(4)
        self._aeads: dict[str, AESGCM] = {}
        self._used: dict[str, int] = {}  # messages encrypted per key ID by this process

    def _aead(self, kid: str) -> AESGCM:
        aead = self._aeads.get(kid)
        if aead is None:
            key = self.keyring.data_keys.get(kid)
            if key is None and self.reload is not None:
                self.reload()
                key = self.keyring.data_keys.get(kid)
            if key is None:
                raise _refuse("unknown_key", f"no data key {kid!r} in the keyring", kid=kid)
            aead = self._aeads[kid] = AESGCM(key)
        return aead

    def encrypt(self, plaintext: bytes, aad: bytes) -> tuple[str, bytes, bytes]:
        """Returns (key ID, nonce, ciphertext) for ``plaintext`` bound to ``aad``.

        Raises:
            AuthError: this process reached its message budget for the key: rotate it.
        """
        kid = self.keyring.current
        used = self._used[kid] = self._used.get(kid, 0) + 1
        if used > MAX_MESSAGES_PER_KEY:
            raise _refuse("rotate_key", "the data key has encrypted its budget of messages in "
                          "this process; rotate the keyring", kid=kid)
        nonce = self._nonces.next()
        return kid, nonce, self._aead(kid).encrypt(nonce, plaintext, aad)

    def decrypt(self, kid: str, nonce: bytes, ciphertext: bytes, aad: bytes) -> bytes:
        """The plaintext, if the ciphertext is intact and bound to this ``aad``.

        Raises:
            AuthError: unknown key ID, or tampered ciphertext / moved to another envelope.
        """
        try:
            return self._aead(kid).decrypt(nonce, ciphertext, aad)
        except InvalidTag:
            raise _refuse("bad_ciphertext", "a payload does not decrypt: it was altered or "
                          "belongs to another envelope", kid=kid) from None


def header_aad(*, sender: str, receiver: str, msg_type: str, msg_id: str, schema: str,
               timestamp: float, kid: str) -> bytes:
    """The associated data binding a ciphertext to its envelope's header."""
    aad: bytes = msgpack.packb([sender, receiver, msg_type, msg_id, schema, timestamp, kid],
                               use_bin_type=True)
    return aad
