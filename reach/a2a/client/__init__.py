"""The A2A client: a remote A2A agent registered as a reach agent.

:func:`connect` (``rt.connect_a2a``) and :func:`proxy_spec` make a remote A2A agent a reach
agent, reading :class:`A2AMessage` and answering :class:`A2AReply` (:class:`A2AEvent` chunks
when it streams).
"""

from __future__ import annotations

from reach.a2a.client.models import (
    A2AEvent,
    A2AMessage,
    A2AReply,
    A2AState,
    A2AStreamRequest,
)
from reach.a2a.client.proxy import connect, proxy_spec, read_card

__all__ = ["A2AEvent", "A2AMessage", "A2AReply", "A2AState", "A2AStreamRequest", "connect",
           "proxy_spec", "read_card"]
