"""Security settings of a deployment, and the guard that applies them in one process.

A deployment's settings (:class:`SecurityConfig`) travel with the cluster handle
(:class:`~reach.ports.cluster.Cluster`) that every reach process is started with, so the
registry, the session store, the hosts and the supervisors a driver starts all hold the same
settings, explicitly. The keyring itself never travels: the settings name its file, which the
operator places at the same path on every node (``ray up`` copies it with ``file_mounts``); an
embedded deployment generates one under ``.reach/`` the first time.

Each process builds its :class:`Guard` once per settings (:func:`guard_for`): the codec signs and
verifies envelopes with it, encrypts and decrypts payloads, the hosts check the ACL with it, and
the registry verifies registrations and heartbeats.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from policies.acl import Acl, AclDecision, Rule, check
from reach.errors import AuthError, ConfigError
from reach.security.keys import (
    DEFAULT_KEYRING,
    REPLAY_WINDOW_S,
    Cipher,
    Keyring,
    Signature,
    Signer,
    Verifier,
)

log = logging.getLogger("reach.security.guard")

#: Session IDs that start with this are encrypted sessions: every process can tell from the
#: (signed) ID alone, and a payload of one that arrives in clear is refused.
ENCRYPTED_SESSION_PREFIX = "enc-"


@dataclass(frozen=True)
class SecurityConfig:
    """How a deployment protects its messages.

    Attributes:
        sign: Sign every envelope, registration and heartbeat, and refuse unsigned ones.
        encrypt: Encrypt every payload (AES-GCM); otherwise only sessions opened with
            ``encrypt=True`` are encrypted. Needs ``sign``.
        keyring: Path of the keyring file (absolute once resolved).
        audit_calls: Record every call's outcome in the audit log (refusals are always recorded).
        window_s: Replay window of signatures, either way (seconds).
    """

    sign: bool = True
    encrypt: bool = False
    keyring: str | None = None
    audit_calls: bool = True
    window_s: float = REPLAY_WINDOW_S

    def __post_init__(self) -> None:
        if self.encrypt and not self.sign:
            raise ConfigError("encryption needs signing: set sign=True with encrypt=True",
                              details={"setting": "encrypt"})
        if self.window_s <= 0:
            raise ConfigError(f"window_s must be positive, got {self.window_s}",
                              details={"setting": "window_s"})


def acl_to_doc(acl: Acl) -> dict[str, Any]:
    """An ACL as a JSON document: ``{"default_allow": bool, "rules": [{"callers": [...],
    "capabilities": [...], "allow": bool}, ...]}``."""
    return {"default_allow": acl.default_allow,
            "rules": [{"callers": list(r.callers), "capabilities": list(r.capabilities),
                       "allow": r.allow} for r in acl.rules]}


def acl_from_doc(doc: Any) -> Acl:
    """Reads what :func:`acl_to_doc` writes.

    Raises:
        ConfigError: the document has another shape.
    """
    try:
        rules = tuple(Rule(tuple(map(str, r["callers"])), tuple(map(str, r["capabilities"])),
                           bool(r.get("allow", True))) for r in doc.get("rules", []))
        return Acl(rules, bool(doc.get("default_allow", True)))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"not an ACL document: {exc}", details={"setting": "acl"}) from exc


def load_acl(source: Acl | str | Path) -> Acl:
    """An ACL given as itself, or as a JSON file of :func:`acl_to_doc`'s shape.

    Raises:
        ConfigError: the file cannot be read or has another shape.
    """
    if isinstance(source, Acl):
        return source
    try:
        doc = json.loads(Path(source).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the ACL at {source}: {exc}",
                          details={"setting": "acl"}) from exc
    return acl_from_doc(doc)


def resolve_keyring(path: str | Path | None, *, create: bool) -> str:
    """The absolute path of the keyring: ``path``, else REACH_KEYRING, else ``.reach/``'s.

    With ``create``, a missing file is generated (readable by its owner only).

    Raises:
        AuthError: the file is missing (and not to be created) or unreadable.
    """
    where = Path(path or os.environ.get("REACH_KEYRING") or DEFAULT_KEYRING).expanduser().absolute()
    if not where.exists():
        if not create:
            raise AuthError(
                f"no keyring at {where}: signing is on, and a process joining a cluster must be "
                "given the deployment's keyring",
                suggestion="copy the cluster's keyring here and pass keyring= or set REACH_KEYRING "
                           "(or turn signing off with sign=False)",
                details={"reason": "keyring", "path": str(where)})
        Keyring.generate().save(where)
        log.info("generated a new deployment keyring at %s", where)
    Keyring.load(where)  # refuse an unreadable one here, not in every actor
    return str(where)


class Guard:
    """One process's signer, verifier, cipher and ACL.

    Args:
        config: The deployment's settings.
        keyring: Its keys.
        clock: Seconds since the epoch (injectable, for the replay window).
    """

    def __init__(self, config: SecurityConfig, keyring: Keyring,
                 clock: Callable[[], float] | None = None) -> None:
        self.config = config
        self.keyring = keyring
        clock_kw: dict[str, Any] = {} if clock is None else {"clock": clock}
        self.signer = Signer(keyring, **clock_kw)
        self.verifier = Verifier(keyring, window_s=config.window_s, **clock_kw)
        self.cipher = Cipher(keyring, reload=self._reload if config.keyring else None)
        self.acl = Acl()
        self._decisions: dict[tuple[str, tuple[str, ...], tuple[str, ...]], AclDecision] = {}

    def _reload(self) -> None:
        """Adopts the data keys of the keyring file, rotated since this process read it."""
        try:
            fresh = Keyring.load(self.config.keyring or DEFAULT_KEYRING)
        except AuthError as exc:
            log.warning("could not re-read the keyring: %s", exc)
            return
        if fresh.master != self.keyring.master:
            log.error("the keyring file has another master key: not adopted")
            return
        self.keyring.data_keys.update(fresh.data_keys)
        self.keyring.current = fresh.current

    def sign(self, principal: str, data: bytes) -> Signature:
        """Signs bytes as ``principal``."""
        return self.signer.sign(principal, data)

    def verify(self, principal: str, data: bytes, signature: Signature) -> None:
        """Verifies bytes signed by ``principal``.

        Raises:
            AuthError: bad signature, outside the replay window, or a replayed nonce.
        """
        self.verifier.verify(principal, data, signature)

    def encrypts(self, session_id: str | None) -> bool:
        """Whether a payload (of this session) is encrypted."""
        return self.config.encrypt or (session_id is not None
                                       and session_id.startswith(ENCRYPTED_SESSION_PREFIX))

    def allow(self, caller: str, caller_caps: tuple[str, ...],
              callee_caps: tuple[str, ...]) -> AclDecision:
        """The ACL's decision on a call (memoised: the ACL is fixed for the process)."""
        key = (caller, caller_caps, callee_caps)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) > 100_000:
                self._decisions.clear()
            decision = self._decisions[key] = check(self.acl, caller, caller_caps, callee_caps)
        return decision

    def set_acl(self, acl: Acl) -> None:
        """Applies a new ACL (the deployment's, from the registry)."""
        self.acl = acl
        self._decisions.clear()


def signed_call(guard: Guard | None, principal: str, args: Any) -> tuple[bytes, Any]:
    """The arguments of a registry call as bytes, with their signature (None when unsigned)."""
    data: bytes = msgpack.packb(args, use_bin_type=True)
    if guard is None:
        return data, None
    sig = guard.sign(principal, data)
    return data, (sig.timestamp, sig.nonce, sig.mac)


def open_call(guard: Guard | None, principal: str, data: bytes, sig: Any) -> Any:
    """The arguments of a signed registry call, verified.

    Raises:
        AuthError: unsigned while signing is on, or the signature does not verify.
    """
    if guard is not None:
        if sig is None:
            raise AuthError(f"an unsigned call from {principal!r} was refused: signing is on",
                            details={"reason": "unsigned", "principal": principal})
        try:
            signature = Signature(float(sig[0]), bytes(sig[1]), bytes(sig[2]))
        except (TypeError, ValueError, IndexError) as exc:
            raise AuthError(f"a malformed signature from {principal!r}",
                            details={"reason": "bad_signature", "principal": principal}) from exc
        guard.verify(principal, data, signature)
    return msgpack.unpackb(data, raw=False, strict_map_key=True)


# The guards of this process, one per deployment's settings (a guard keeps replay state).
_guards: dict[SecurityConfig, Guard | None] = {}


def guard_for(config: SecurityConfig) -> Guard | None:
    """This process's guard for a deployment's settings (None when signing is off); built once.

    Raises:
        AuthError: the keyring file is missing or unreadable.
    """
    if config not in _guards:
        _guards[config] = (Guard(config, Keyring.load(config.keyring or DEFAULT_KEYRING))
                           if config.sign else None)
    return _guards[config]
