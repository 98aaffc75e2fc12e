"""The signed hello: an agent's secret, the hello's MAC, and the gateway's check of it.

The hello is signed with the agent's secret, which the deployment's keyring derives for its ID
(:func:`agent_secret`), over the hello's fields and its declaration as sent (:func:`hello_mac`).
A nonce's freshness is its caller's to check (reach's remote host claims each one once, in the
registry).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from reach.remote.frames import WIRE_VERSION, CloseCode, Declaration, FrameType, Hello, WireRefusal

#: What the MAC of a hello starts with.
HELLO_CONTEXT = "reach-hello/1"
#: What an agent's secret is derived under (the same derivation as every reach principal's).
PRINCIPAL_CONTEXT = b"reach/principal/"
#: How far a hello's ``ts`` may be from the gateway's clock, either way (seconds).
HELLO_WINDOW_S = 300.0


def agent_secret(master: bytes, agent_id: str) -> bytes:
    """An agent's signing secret: HMAC-SHA256(master key, ``"reach/principal/" + agent_id``),
    the same secret :meth:`reach.security.keys.Keyring.secret` gives every principal."""
    return hmac.new(master, PRINCIPAL_CONTEXT + agent_id.encode("utf-8"), hashlib.sha256).digest()


def hello_mac(secret: bytes, agent_id: str, ts: int, nonce: str, declaration: str) -> str:
    """The hello's signature: lowercase hex of HMAC-SHA256(secret, message), the message being
    ``"reach-hello/1\\n<agent_id>\\n<ts>\\n<nonce>\\n<declaration>"`` in UTF-8."""
    message = "\n".join((HELLO_CONTEXT, agent_id, str(ts), nonce, declaration))
    return hmac.new(secret, message.encode("utf-8"), hashlib.sha256).hexdigest()


def make_hello(agent_id: str, declaration: Declaration, secret: bytes, *, now_ms: int,
               nonce: str) -> dict[str, Any]:
    """A signed hello frame (as a JSON-ready object)."""
    text = declaration.model_dump_json(by_alias=True)
    return {"type": FrameType.HELLO.value, "v": WIRE_VERSION, "agent_id": agent_id,
            "ts": now_ms, "nonce": nonce, "declaration": text,
            "sig": hello_mac(secret, agent_id, now_ms, nonce, text)}


def hello_refusal(hello: Hello, secret: bytes, now_ms: int,
                  window_s: float = HELLO_WINDOW_S) -> WireRefusal | None:
    """Why a hello's signature is refused (``replay_window`` or ``bad_signature``), or None.

    The nonce's freshness is the caller's to check (it keeps the nonces it saw).
    """
    skew = abs(now_ms - hello.ts) / 1000
    if skew > window_s:
        return WireRefusal(code=CloseCode.BAD_SIGNATURE, reason="replay_window",
                           message=f"the hello was signed {skew:.0f} s from the gateway's "
                                   f"clock, outside the {window_s:.0f} s window")
    expected = hello_mac(secret, hello.agent_id, hello.ts, hello.nonce, hello.declaration)
    if not hmac.compare_digest(expected, hello.sig):
        return WireRefusal(code=CloseCode.BAD_SIGNATURE, reason="bad_signature",
                           message=f"the hello of {hello.agent_id!r} is not signed with its "
                                   "secret from this deployment's keyring")
    return None
