"""Ray Serve, the cluster's HTTP ingress: a served class behind Serve's ASGI ingress, the HTTP
server's defaults in a replica, the wait for an application to run, and the environment a local
Ray gives Serve (its HAProxy ingress)."""


from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

import uvicorn

from reach.errors import (
    ConfigError,
)
from reach.ports.ingress import HttpService

log = logging.getLogger("reach.ray")

_SERVED: dict[type[object], Any] = {}


def served_class(service: type[HttpService]) -> Any:
    """The Serve deployment of a :class:`~reach.ports.ingress.HttpService` class: the class behind
    Serve's ASGI ingress, each replica built as ``service(*args)`` once the HTTP server
    defaults it was given are set (made once per process and class)."""
    made = _SERVED.get(service)
    if made is None:
        from ray import serve  # noqa: PLC0415 - Serve loads where it serves

        base: Any = service

        @serve.ingress()
        class Served(base):  # type: ignore[misc] # the caller's class, given at run time
            def __init__(self, server_defaults: dict[str, object], *args: object) -> None:
                set_server_defaults(server_defaults)  # before Serve's server starts
                super().__init__(*args)

            def __serve_build_asgi_app__(self) -> Any:
                return self.app

            async def check_health(self) -> None:
                await self.health()

            async def __del__(self) -> None:
                await self.close()

        made = _SERVED[service] = serve.deployment(Served)
    return made


def set_server_defaults(settings: Mapping[str, object]) -> None:
    """Makes the HTTP server Serve starts in this process take ``settings`` as the defaults of
    its ``uvicorn.Config`` (what Serve offers no setting or variable of its own for: say, a
    WebSocket frame limit).

    With Serve's direct ingress (on under its HAProxy ingress, which a local reach turns on),
    each replica serves HTTP itself: Serve builds its uvicorn server after the deployment's
    constructor returns (``ray.serve._private.http_util.start_asgi_http_server``), from
    ``uvicorn.Config`` with none of these settings. So, in the replica's process,
    ``uvicorn.Config`` takes them as defaults. A unit test fails if Serve stops building its
    server that way. Behind Serve's default Python proxy instead (and through the fallback
    HAProxy uses until it routes to a new replica), the proxy holds the sockets, with uvicorn's
    own settings: the first case is logged here, once per replica. Nothing is changed for no
    settings.
    """
    if not settings:
        return
    base: Any = getattr(uvicorn.Config, "reach_base", uvicorn.Config)

    class ServerConfig(base):  # type: ignore[misc] # uvicorn's own, wrapped
        reach_base = base

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**settings, **kwargs})

    uvicorn.Config = ServerConfig  # type: ignore[misc]
    if not any(os.environ.get(v) == "1" for v in (SERVE_HAPROXY, SERVE_DIRECT_INGRESS)):
        log.warning("Serve's Python proxy holds this replica's connections, with uvicorn's own "
                    "settings (a WebSocket frame is buffered up to 16 MiB), not the replica's "
                    "(%s): set %s=1 to have the replica's own server hold them",
                    ", ".join(sorted(settings)), SERVE_HAPROXY)


#: Serve's direct ingress (each replica serves HTTP itself; implied by :data:`SERVE_HAPROXY`).
SERVE_DIRECT_INGRESS = "RAY_SERVE_ENABLE_DIRECT_INGRESS"


def wait_running(name: str, timeout_s: float) -> None:
    """Waits until Serve reports the application running (raises ConfigError when it fails)."""
    from ray import serve  # noqa: PLC0415 - Serve loads where it serves

    deadline = time.monotonic() + timeout_s
    while True:
        status = serve.status().applications.get(name)
        state = str(status.status) if status is not None else "NOT_STARTED"
        if state.endswith("RUNNING"):
            return
        if state.endswith(("DEPLOY_FAILED", "UNHEALTHY")) or time.monotonic() > deadline:
            message = status.message if status is not None else "never started"
            raise ConfigError(f"the application {name!r} is {state}: {message}")
        time.sleep(0.2)


#: Ray Serve's HAProxy ingress (the HTTP path of what :meth:`RayCluster.serve` serves): set in
#: the environment a local Ray starts with, unless the user set it. Measured on 2 cores with a
#: trivial Serve echo and 100 connections: about 2,400 requests/s with it, 220 with Serve's
#: default Python proxy.
SERVE_HAPROXY = "RAY_SERVE_ENABLE_HA_PROXY"


#: The ports Serve's HAProxy binds besides the HTTP port (its stats and metrics), and their
#: defaults: fixed ports, so a second local Ray's would clash with the first's.
SERVE_HAPROXY_PORTS = {"RAY_SERVE_HAPROXY_STATS_PORT": 8404, "RAY_SERVE_HAPROXY_METRICS_PORT": 9101}


#: This process started the (local) Ray it runs on: Serve's proxy listens on this machine.
_STARTED_LOCAL = False


def prepare_local() -> None:
    """This process is about to start a local Ray: Serve's proxy will listen on this machine,
    and Serve gets its environment (:func:`serve_environment`)."""
    global _STARTED_LOCAL  # noqa: PLW0603 - one Ray per process
    _STARTED_LOCAL = True
    serve_environment()


def proxy_is_local() -> bool:
    """Whether Serve's HTTP proxy listens on this machine (this process started its Ray)."""
    return _STARTED_LOCAL


def serve_environment() -> None:
    """Sets, where the environment does not, what a Ray started from this process gives Ray
    Serve: the HAProxy ingress, its stats and metrics on the first free ports from their
    defaults (not ports the OS picks: Ray's own processes may take one before HAProxy binds)."""
    os.environ.setdefault(SERVE_HAPROXY, "1")
    for setting, default in SERVE_HAPROXY_PORTS.items():
        if setting not in os.environ:
            os.environ[setting] = str(next(
                (p for p in range(default, default + 200) if port_free(p)), default))


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


