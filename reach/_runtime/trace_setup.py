"""Turning tracing on in a reach process, as the deployment's settings say.

Every process of a deployment calls :func:`setup` as it starts (the driver, each host,
supervisor, registry, session store and gateway replica): the settings travel with the cluster
handle (:attr:`reach.ports.cluster.Cluster.tracing`), as the security settings do. Without them
nothing is loaded and the process does not trace; with them it installs the SDK
(:mod:`reach._runtime.span_export`, imported here only then) where an OTLP endpoint is set, and
otherwise the lighter tracer whose spans go to the trace store only
(:mod:`reach._runtime.store_tracer`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider

from reach._runtime.span_sink import SpanSink
from reach._runtime.store_tracer import StoreTracerProvider
from reach._runtime.tracer import TRACING, use
from reach.errors import ConfigError, ReachError
from reach.ports.cluster import Cluster
from reach.spans import SpanRecord
from reach.tracing import Tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider

log = logging.getLogger("reach._runtime.trace_setup")


def setup(cluster: Cluster, process: str, *, strict: bool = False) -> bool:
    """Makes this process trace as the cluster's settings say (once: a later call, as the fake
    cluster's processes make in one process, changes nothing); returns whether it traces.

    With no settings, a process whose application installed an SDK tracer provider of its own
    (globally, before) traces with that one.

    Args:
        cluster: The deployment (its ``tracing``).
        process: This process's name (the ``process`` of its spans in the trace store).
        strict: Raise when the SDK is missing (a driver's ``reach.init``); otherwise log it
            and go on without tracing (a process of the cluster).

    Raises:
        ConfigError: ``strict``, and the SDK or the OTLP exporter is not installed.
    """
    if TRACING.tracer is not None:
        return True
    tracing = cluster.tracing
    if tracing is None:
        ours = trace.get_tracer_provider()
        if not isinstance(ours, ProxyTracerProvider):  # the application's own SDK
            use(ours)
            return True
        return False
    try:
        install(tracing, process, cluster)
    except ConfigError as exc:
        if strict:
            raise
        log.warning("%s does not trace: %s", process, exc.message)
        return False
    return True


def check_installed(tracing: Tracing) -> None:
    """Checks that what ``tracing`` needs is installed here (before a driver starts anything).

    Raises:
        ConfigError: the SDK (or, with an endpoint, the OTLP/HTTP exporter) is not installed.
    """
    _sdk(tracing)


def install(tracing: Tracing, process: str,
            cluster: Cluster | None) -> SdkProvider | StoreTracerProvider:
    """Installs tracing in this process for ``tracing``, its spans going to ``cluster``'s
    trace store (when it has one and ``tracing.store``) and to OTLP where an endpoint is set
    (with the SDK; without an endpoint, with reach's lighter tracer); returns the provider
    installed (``force_flush`` sends what it holds, ``shutdown`` ends it).

    Raises:
        ConfigError: the SDK (or, with an endpoint, the OTLP/HTTP exporter) is not installed.
    """
    span_export = _sdk(tracing)

    async def send(records: Sequence[SpanRecord]) -> None:
        assert cluster is not None
        try:
            await cluster.trace_store().add_spans(records)
        except ReachError as exc:  # no store, or it is restarting: these spans are lost
            log.debug("the trace store did not take %d spans: %s", len(records), exc)

    to_store = tracing.store and cluster is not None
    if tracing.traces_url is None:
        light = StoreTracerProvider(tracing.ratio,
                                    SpanSink(send, process) if to_store else None)
        use(light, tracing.ratio)
        return light
    made: SdkProvider = span_export.provider(tracing, process, send if to_store else None)
    use(made, tracing.ratio)
    return made


def _sdk(tracing: Tracing) -> ModuleType:
    """The module that installs the SDK (loaded now).

    Raises:
        ConfigError: the SDK (or, with an endpoint, the OTLP/HTTP exporter) is not installed.
    """
    try:
        from reach._runtime import span_export  # noqa: PLC0415 - the SDK loads where tracing is configured

        if tracing.traces_url is not None:
            from opentelemetry.exporter.otlp.proto.http import (  # noqa: PLC0415, F401 - checked where an endpoint is set
                trace_exporter,
            )
    except ImportError as exc:
        raise ConfigError(
            f"tracing needs OpenTelemetry's SDK and OTLP exporter, which are not installed "
            f"({exc.name or exc})",
            suggestion="pip install 'reach[otel]' (on every node of the cluster)",
            details={"setting": "tracing"}) from exc
    return span_export


__all__ = ["check_installed", "install", "setup"]
