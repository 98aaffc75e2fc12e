"""reach from outside: every agent an A2A 1.0 agent over HTTP, and remote A2A agents as reach
agents.

- :mod:`reach.gateway.server`: the gateway one replica runs (agent cards, the JSON-RPC binding
  on the official ``a2a-sdk``, bearer tokens), served on the cluster by Ray Serve
  (:meth:`reach.Runtime.start_gateway`, ``reach gateway``).
- :mod:`reach.gateway.options`: its settings.
"""

from reach.gateway.options import GATEWAY_APP, GatewayOptions

__all__ = ["GATEWAY_APP", "GatewayOptions"]
