"""reach from outside: every agent an A2A 1.0 agent over HTTP, remote A2A agents as reach
agents, and outside processes as agents over a WebSocket.

- :mod:`reach.gateway.server`: the gateway one replica runs (agent cards, the JSON-RPC binding
  on the official ``a2a-sdk``, bearer tokens, the WebSocket channel), served on the cluster by
  Ray Serve (:meth:`reach.Runtime.start_gateway`, ``reach gateway``).
- :mod:`reach.gateway.outbound`: :func:`connect` (``rt.connect_a2a``) and :func:`proxy_spec`
  make a remote A2A agent a reach agent, reading :class:`A2AMessage` and answering
  :class:`A2AReply` (:class:`A2AEvent` chunks when it streams).
- :mod:`reach.gateway.options`: the gateway's settings.

The names below other than the options are imported on first use: importing this package (as
every reach process does, for the options) does not import the A2A SDK.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from reach.gateway.options import GATEWAY_APP, GatewayOptions

if TYPE_CHECKING:
    from reach.gateway.outbound import connect, proxy_spec, read_card
    from reach.gateway.outbound_models import (
        A2AEvent,
        A2AMessage,
        A2AReply,
        A2AState,
        A2AStreamRequest,
    )

_LAZY = {"connect": "outbound", "proxy_spec": "outbound", "read_card": "outbound",
         "A2AEvent": "outbound_models", "A2AMessage": "outbound_models",
         "A2AReply": "outbound_models", "A2AState": "outbound_models",
         "A2AStreamRequest": "outbound_models"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reach.gateway' has no attribute {name!r}")
    return getattr(import_module(f"reach.gateway.{module}"), name)


__all__ = ["GATEWAY_APP", "A2AEvent", "A2AMessage", "A2AReply", "A2AState", "A2AStreamRequest",
           "GatewayOptions", "connect", "proxy_spec", "read_card"]
