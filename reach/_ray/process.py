"""Ray in this process: starting or joining it (for :func:`reach.init` and ``reach status``),
leaving it, and Ray's metric classes."""


from __future__ import annotations

import logging
import os
import socket
from typing import Any

import ray
from ray._private.services import canonicalize_bootstrap_address_or_die
from ray.util.metrics import Counter, Gauge, Histogram

from reach._ray.serving import prepare_local
from reach._runtime.names import (
    NAMESPACE,
)
from reach.errors import (
    AgentUnavailable,
    ConfigError,
)


def is_initialized() -> bool:
    """Whether this process is connected to Ray."""
    return bool(ray.is_initialized())


def start(address: str, runtime_env: dict[str, Any], **kwargs: Any) -> None:
    """Starts (``address="local"``) or joins Ray, in reach's namespace. A local Ray gets Serve's
    HAProxy ingress
    (:func:`reach._ray.serving.serve_environment`) unless the environment says otherwise."""
    if address == "local":
        prepare_local()
    ray.init(address=address, namespace=NAMESPACE, runtime_env=runtime_env, **kwargs)


def job_env() -> dict[str, str]:
    """The environment variables of the Ray job this process runs in."""
    env: dict[str, str] = ray.get_runtime_context().runtime_env.env_vars()
    return env


def shutdown() -> None:
    """Disconnects this process from Ray (stopping the Ray it started, if it did)."""
    ray.shutdown()


def join(address: str | None, probe_s: float) -> str:
    """Joins a running Ray without ever starting one; returns its address.

    Raises:
        AgentUnavailable: no Ray answers at the address (or none could be found).
    """
    suggestion = "start one (`ray start --head`, or a driver calling reach.init()), " \
                 "or pass --address"
    try:  # Ray's own resolution: RAY_ADDRESS, the last `ray start`, a Ray process here
        where = address if address and address.startswith("ray://") else \
            canonicalize_bootstrap_address_or_die(address)  # type: ignore[arg-type] # None: auto
    except (ConnectionError, ValueError) as exc:
        raise AgentUnavailable(f"no running Ray cluster found: {exc}",
                               suggestion=suggestion) from None
    host, _, port = where.removeprefix("ray://").rpartition(":")
    try:  # ray.init would retry an address where nothing listens for minutes
        socket.create_connection((host, int(port)), timeout=probe_s).close()
    except (OSError, ValueError) as exc:
        raise AgentUnavailable(f"no Ray cluster answers at {where}: {exc}",
                               suggestion=suggestion, details={"address": where}) from None
    ray.init(address=where, namespace=NAMESPACE, log_to_driver=False,
             logging_level=logging.ERROR)
    return where


def metric_types() -> tuple[Any, Any, Any] | None:
    """Ray's Counter, Gauge and Histogram, or None when this process is not on Ray."""
    if not ray.is_initialized():
        return None
    return Counter, Gauge, Histogram


def check_address(address: str | None) -> str:
    """The address :func:`reach.init` starts or joins Ray at.

    Raises:
        ConfigError: an address that is not a string.
    """
    where = address or os.environ.get("RAY_ADDRESS") or "local"
    if not isinstance(where, str):
        raise ConfigError(f"address must be a string, not {type(where).__name__}")
    return where


