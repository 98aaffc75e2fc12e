"""How a gateway is started: one frozen record that travels to every replica."""

from __future__ import annotations

from dataclasses import dataclass

from reach.errors import ConfigError

#: The Ray Serve application name of the gateway (and of its deployment).
GATEWAY_APP = "reach-gateway"
#: The port of the HTTP proxy when Serve is not running yet and none is given.
DEFAULT_PORT = 8000


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """A gateway's settings.

    Attributes:
        host: Address the HTTP proxy listens on.
        port: Its port. A cluster has one HTTP proxy (Ray Serve's): by default the port it
            listens on already, else :data:`DEFAULT_PORT`; another port than the running
            proxy's is refused.
        replicas: Gateway replicas (each a process holding a reach client of its own).
        public_url: The base URL written into agent cards (default ``http://host:port``).
        max_body_bytes: Largest request body accepted; a larger one is refused with a JSON-RPC
            error (the gateway stays up).
        max_json_depth: Most levels of arrays and objects nested in a request body (the
            JSON-RPC envelope's own five included: a payload in a data part has the rest); a
            deeper one is a parse error (-32700). At most 32: A2A's protobuf messages cannot
            be decoded with a data part much deeper (see
            :data:`reach.a2a.server._proto.MAX_VALUE_DEPTH`).
        timeout_ms: Budget of one A2A task, every reach attempt included.
        retry_limit: Retries of a failed attempt (under the task policy of reach's supervisors).
        auth: Require a bearer token (``reach token NAME``) on every call but the agent cards.
        observers: The token names that may read the observer's data (``/observe/api``): it
            shows every agent, supervisor, trace and dead letter of the cluster, which an A2A
            caller's token is not for (``reach observe`` prints the first one's token).
        proxy_location: Where Ray Serve runs HTTP proxies: ``HeadOnly`` (one machine, or
            one entry point) or ``EveryNode`` (a proxy on each node of a real cluster).
        name: The Serve application's name.
    """

    host: str = "127.0.0.1"
    port: int | None = None
    replicas: int = 1
    public_url: str | None = None
    max_body_bytes: int = 1 << 20
    max_json_depth: int = 32
    timeout_ms: int = 30_000
    retry_limit: int = 2
    auth: bool = True
    observers: tuple[str, ...] = ("observer",)
    proxy_location: str = "HeadOnly"
    name: str = GATEWAY_APP

    def __post_init__(self) -> None:
        if self.port is not None and not 0 < self.port < 65536:
            raise ConfigError(f"gateway port must be 1-65535, got {self.port}")
        if self.replicas < 1:
            raise ConfigError(f"a gateway needs at least one replica, got {self.replicas}")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        if not 8 <= self.max_json_depth <= 32:
            raise ConfigError(f"max_json_depth must be 8-32, got {self.max_json_depth}",
                              details={"setting": "max_json_depth"})
        if self.timeout_ms <= 0:
            raise ConfigError(f"timeout_ms must be positive, got {self.timeout_ms}")
        if isinstance(self.observers, str) or not all(
                isinstance(n, str) and n for n in self.observers):
            raise ConfigError(f"observers must be a tuple of token names, got {self.observers!r}",
                              details={"setting": "observers"})
        if self.proxy_location not in ("HeadOnly", "EveryNode"):
            raise ConfigError(
                f"proxy_location must be HeadOnly or EveryNode, got {self.proxy_location!r}")

    @property
    def base_url(self) -> str:
        """The URL cards advertise: ``public_url``, else where the proxy listens."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port or DEFAULT_PORT}"
