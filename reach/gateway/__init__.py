"""The gateway: the one HTTP application a cluster serves to the outside.

It mounts the features that face outward, each a folder of its own: the A2A 1.0 server
(:mod:`reach.a2a.server`: agent cards, the JSON-RPC binding, A2A tasks) and the WebSocket
channel of agents that dial in (:mod:`reach.remote.channel`). :mod:`reach.gateway.server` is
what one replica runs; :mod:`reach.gateway.deploy` serves it over the cluster's HTTP ingress (Ray
Serve on Ray: :meth:`reach.Runtime.start_gateway`, ``reach gateway``). Its settings are
:class:`reach.web.options.GatewayOptions`.
"""

from __future__ import annotations

from reach.web.options import GATEWAY_APP, GatewayOptions

__all__ = ["GATEWAY_APP", "GatewayOptions"]
