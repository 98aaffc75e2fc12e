"""The WebSocket wire of remote agents: JSON frames, the signed hello, close codes.

An agent outside the cluster dials ``ws(s)://<gateway>/v1/agents/connect`` with
``Authorization: Bearer <token>`` and speaks JSON text frames (UTF-8; a binary frame is refused).
Every frame is an object whose ``type`` says what it is (see ``docs/wire.md`` for the page a
developer in another language implements from):

==============  ==========  ====================================================================
``type``        sent by     carries
==============  ==========  ====================================================================
``hello``       agent       ``agent_id``, ``ts`` (ms), ``nonce``, ``declaration`` (JSON *text*:
                            capabilities, description, handlers, pending policy), ``sig``
``welcome``     gateway     ``agent_id``, ``epoch``, ``restarted``, ``max_frame_bytes``,
                            ``heartbeat_s``, ``queue_limit``
``envelope``    both        ``envelope``: one envelope (``docs/envelope.schema.json``)
``batch``       both        ``envelopes``: several
``heartbeat``   both        ``ts`` (the gateway echoes the agent's)
``error``       gateway     ``code``, ``message``, ``msg_id``: an envelope it refused
``goodbye``     agent       ``reason``: the agent leaves for good (no restart)
==============  ==========  ====================================================================

The hello is signed with the agent's secret, which the deployment's keyring derives for its ID
(:func:`agent_secret`): HMAC-SHA256 over ``"reach-hello/1\\n" + agent_id + "\\n" + ts + "\\n" +
nonce + "\\n" + declaration`` (:func:`hello_mac`). The declaration travels as text so that the
bytes signed are the bytes sent: no JSON canonicalisation is needed in any language.

The wire is pure (no I/O, no clock read: time is passed in) and imports neither Ray nor the
runtime, so the Python client and the gateway share it. Its parts: the frames and what they are
made of (:mod:`reach.remote.frames`), reading a frame an agent sent
(:mod:`reach.remote.frame_parsing`), the signed hello (:mod:`reach.remote.signing`) and envelopes
as the wire carries them (:mod:`reach.remote.envelope_frames`). This module gathers their names.
"""

from __future__ import annotations

from reach.remote.envelope_frames import (
    envelope_json,
    envelope_schema,
    envelope_schema_text,
    envelopes_frame,
    error_frame,
    frame_text,
    read_envelope,
    safe_envelopes_frame,
)
from reach.remote.frame_parsing import parse_frame, refusal
from reach.remote.frames import (
    CAPABILITY_PREFIX,
    CONNECT_PATH,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_FRAME_BYTES,
    FINAL_CODES,
    WIRE_VERSION,
    Attached,
    CloseCode,
    Declaration,
    Envelopes,
    Frame,
    FrameType,
    Goodbye,
    HandlerDoc,
    Heartbeat,
    Hello,
    RefusedItem,
    WireRefusal,
)
from reach.remote.signing import (
    HELLO_CONTEXT,
    HELLO_WINDOW_S,
    PRINCIPAL_CONTEXT,
    agent_secret,
    hello_mac,
    hello_refusal,
    make_hello,
)

if __name__ == "__main__":  # pragma: no cover - the generator of the committed schema
    import sys

    sys.stdout.write(envelope_schema_text())


__all__ = [
    "Attached", "CAPABILITY_PREFIX", "CONNECT_PATH", "DEFAULT_MAX_BATCH", "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FRAME_BYTES", "FINAL_CODES", "HELLO_CONTEXT", "HELLO_WINDOW_S",
    "PRINCIPAL_CONTEXT", "WIRE_VERSION", "CloseCode", "Declaration", "Envelopes", "Frame",
    "FrameType", "Goodbye", "HandlerDoc", "Heartbeat", "Hello", "RefusedItem", "WireRefusal",
    "agent_secret", "envelope_json", "envelope_schema", "envelope_schema_text",
    "envelopes_frame", "error_frame", "frame_text", "hello_mac", "hello_refusal", "make_hello",
    "parse_frame", "read_envelope", "refusal", "safe_envelopes_frame",
]
