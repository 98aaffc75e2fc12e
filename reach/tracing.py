"""The tracing settings of a deployment: :class:`Tracing`, given to ``reach.init(tracing=...)``.

reach traces with OpenTelemetry. Without settings it depends on the API only, which does
nothing: no span is made, no envelope grows. With them (or with the standard ``OTEL_*``
environment variables), every process of the deployment (the driver, each host and supervisor,
the registry, the session store, the gateway's replicas) installs the SDK with a parent-based
ratio sampler and sends the spans it finishes, in batches, to the cluster's trace store and,
where an endpoint is set, to an OTLP/HTTP collector. The settings travel to those processes with
the cluster handle, as the security settings do.

Environment variables read (by the driver, when a setting is not given):

=================================  ==========================================================
``OTEL_SDK_DISABLED``              ``true``: no tracing, whatever else is set
``OTEL_EXPORTER_OTLP_ENDPOINT``    the collector's base URL (``/v1/traces`` is added);
                                   ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``: the full URL
``OTEL_TRACES_SAMPLER_ARG``        the ratio of traces kept (0 to 1)
``OTEL_SERVICE_NAME``              the service name of the spans' resource
=================================  ==========================================================

An endpoint in the environment turns tracing on with ``reach.init()`` alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from reach.errors import ConfigError

#: Where the OTLP/HTTP exporter posts, under a base endpoint.
TRACES_PATH = "/v1/traces"


@dataclass(frozen=True, slots=True)
class Tracing:
    """How a deployment traces.

    Attributes:
        sample_ratio: The share of new traces kept (a trace started elsewhere keeps its
            caller's decision: the sampler is parent-based); None: ``OTEL_TRACES_SAMPLER_ARG``,
            else 1.0.
        otlp_endpoint: An OTLP/HTTP collector's base URL (``http://collector:4318``) or its
            traces URL (ending in ``/v1/traces``); None: ``OTEL_EXPORTER_OTLP_*``, else no
            OTLP export.
        store: Keep the spans in the cluster's own trace store too (what the observer shows).
        service_name: The spans' ``service.name``; None: ``OTEL_SERVICE_NAME``, else "reach".

    Raises:
        ConfigError: a ratio outside [0, 1], or an endpoint that is not an http(s) URL.
    """

    sample_ratio: float | None = None
    otlp_endpoint: str | None = None
    store: bool = True
    service_name: str | None = None

    def __post_init__(self) -> None:
        ratio = self.sample_ratio
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float)
                                  or not 0.0 <= ratio <= 1.0):
            raise ConfigError(f"tracing's sample_ratio must be a number from 0 to 1, got "
                              f"{ratio!r}", details={"setting": "tracing.sample_ratio"})
        url = self.otlp_endpoint
        if url is not None and not (isinstance(url, str)
                                    and url.startswith(("http://", "https://"))):
            raise ConfigError(f"tracing's otlp_endpoint must be an http(s) URL, got {url!r}",
                              suggestion="give the collector's OTLP/HTTP address, e.g. "
                                         "'http://localhost:4318'",
                              details={"setting": "tracing.otlp_endpoint"})

    @property
    def ratio(self) -> float:
        """The sample ratio in force (1.0 when none is given)."""
        return 1.0 if self.sample_ratio is None else float(self.sample_ratio)

    @property
    def traces_url(self) -> str | None:
        """The URL spans are posted to, or None for no OTLP export."""
        url = self.otlp_endpoint
        if url is None or url.rstrip("/").endswith(TRACES_PATH):
            return url
        return url.rstrip("/") + TRACES_PATH

    def resolved(self, env: Mapping[str, str] | None = None) -> Tracing:
        """These settings with what is not given taken from the ``OTEL_*`` variables of ``env``
        (this process's environment by default), so that they mean the same in every process.

        Raises:
            ConfigError: a variable's value is invalid.
        """
        env = os.environ if env is None else env
        ratio = self.sample_ratio
        if ratio is None and env.get("OTEL_TRACES_SAMPLER_ARG"):
            ratio = _ratio(env["OTEL_TRACES_SAMPLER_ARG"])
        url = self.otlp_endpoint or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
        if url is None and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            url = env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + TRACES_PATH
        name = self.service_name or env.get("OTEL_SERVICE_NAME") or "reach"
        return Tracing(1.0 if ratio is None else ratio, url, self.store, name)


def tracing_from(setting: Tracing | bool | None,
                 env: Mapping[str, str] | None = None) -> Tracing | None:
    """The tracing a driver's ``tracing=`` setting asks for, resolved (None: no tracing).

    ``None`` traces when the environment names an OTLP endpoint; ``True`` traces with the
    defaults (and the environment's); ``False`` never traces. ``OTEL_SDK_DISABLED=true`` turns
    it off whatever the setting.

    Raises:
        ConfigError: the setting is of another type, or a variable's value is invalid.
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or setting is False:
        return None
    if setting is None:
        if not (env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
            return None
        setting = True
    if setting is True:
        return Tracing().resolved(env)
    if isinstance(setting, Tracing):
        return setting.resolved(env)
    raise ConfigError(f"tracing must be a reach.Tracing, True or False, not "
                      f"{type(setting).__name__}", details={"setting": "tracing"})


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, got {text!r}",
                          details={"setting": "OTEL_TRACES_SAMPLER_ARG"})
    return value


__all__ = ["TRACES_PATH", "Tracing", "tracing_from"]
