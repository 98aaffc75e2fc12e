"""The gateway on the cluster: starting, updating and stopping its application.

The gateway is an application served over the cluster's HTTP ingress
(:meth:`reach.ports.cluster.Cluster.serve`: Ray Serve on Ray, one replica in the test's loop on the
fake cluster), each replica a :class:`~reach.gateway.server.GatewayServer`. This module decides
what the gateway asks of it: the HTTP port (a cluster has one ingress, so one port: the running
one, or the one given, or :data:`~reach.web.options.DEFAULT_PORT`), how many calls a replica
carries, the environment of a replica's process, and the WebSocket frame limit its own HTTP
server keeps (:func:`reach.remote.channel_server.uvicorn_settings`).
"""

from __future__ import annotations

import os
from dataclasses import replace

from reach.errors import ConfigError
from reach.gateway.server import GatewayServer
from reach.ports.cluster import Cluster
from reach.ports.ingress import ServiceSettings
from reach.remote.channel_server import uvicorn_settings
from reach.remote.wire import DEFAULT_MAX_FRAME_BYTES
from reach.web.options import DEFAULT_PORT, GatewayOptions

#: Calls one gateway replica carries at once (they wait on agents, not on the CPU), and calls
#: queued for replicas beyond that.
GATEWAY_MAX_ONGOING = 1000
GATEWAY_MAX_QUEUED = 2000
#: How long the gateway's replicas may take to run.
START_TIMEOUT_S = 120.0
#: The A2A SDK's OpenTelemetry spans cost about 1 ms a request: off in the replicas unless this
#: variable turns them on where the gateway is started (the SDK reads it when imported, so it
#: is set in the replica's environment).
SDK_TRACING = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"


def start_gateway(cluster: Cluster, options: GatewayOptions) -> str:
    """Starts the gateway application, or updates the one running under ``options.name``
    (say, to more replicas); returns once its replicas answer, with its base URL.

    Raises:
        ConfigError: the cluster's HTTP ingress listens on another port than ``options.port``,
            or cannot listen on it, or the gateway failed to start (with the platform's reason).
    """
    port = cluster.http_port()
    if port is None:
        port = options.port or DEFAULT_PORT
        cluster.start_http(options.host, port, options.proxy_location)
    elif options.port not in (None, port):  # one HTTP ingress per cluster: its port is settled
        raise ConfigError(
            f"Ray Serve's HTTP proxy already listens on port {port} in this cluster; "
            f"a gateway cannot listen on {options.port}",
            suggestion=f"start the gateway with port={port} (or none), or restart "
                       "Serve (serve.shutdown()) to move it",
            details={"setting": "port", "running": port})
    options = replace(options, port=port)
    settings = ServiceSettings(
        replicas=options.replicas, route_prefix="/", max_ongoing=GATEWAY_MAX_ONGOING,
        max_queued=GATEWAY_MAX_QUEUED, env={SDK_TRACING: os.environ.get(SDK_TRACING, "false")},
        # The channel's frame limit, kept by the replica's own server before a frame is read.
        server_defaults=uvicorn_settings(DEFAULT_MAX_FRAME_BYTES))
    cluster.serve(options.name, GatewayServer, (cluster, options), settings, START_TIMEOUT_S)
    return options.base_url


def stop_gateway(cluster: Cluster, name: str) -> None:
    """Stops the gateway application called ``name`` (nothing when none runs); agents keep
    running."""
    cluster.unserve(name)


__all__ = ["GATEWAY_MAX_ONGOING", "GATEWAY_MAX_QUEUED", "start_gateway", "stop_gateway"]
