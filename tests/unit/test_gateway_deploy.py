"""The gateway on the cluster's HTTP ingress (reach.gateway.deploy), on the fake cluster: one
HTTP port per cluster, an application per gateway name, each replica a GatewayServer."""

from __future__ import annotations

import pytest

from reach.errors import ConfigError
from reach.gateway.deploy import start_gateway, stop_gateway
from reach.gateway.server import GatewayServer
from reach.testing import FakeCluster, run
from reach.web.options import DEFAULT_PORT, GatewayOptions


def test_the_first_gateway_starts_the_http_ingress_on_its_port_or_the_default() -> None:
    async def scenario(fake: FakeCluster) -> None:
        assert fake.http_port() is None
        url = start_gateway(fake, GatewayOptions(auth=False))
        assert url == f"http://127.0.0.1:{DEFAULT_PORT}"
        assert fake.http_port() == DEFAULT_PORT
        assert isinstance(fake.services["reach-gateway"], GatewayServer)

    run(scenario)


def test_a_gateway_takes_the_running_ingress_port_and_refuses_another() -> None:
    async def scenario(fake: FakeCluster) -> None:
        start_gateway(fake, GatewayOptions(auth=False, port=8123, name="gw-a"))
        assert start_gateway(fake, GatewayOptions(auth=False, name="gw-b")).endswith(":8123")
        with pytest.raises(ConfigError, match="already listens on port 8123") as refused:
            start_gateway(fake, GatewayOptions(auth=False, port=8124, name="gw-c"))
        assert refused.value.details == {"setting": "port", "running": 8123}
        assert sorted(fake.services) == ["gw-a", "gw-b"]

    run(scenario)


def test_stopping_a_gateway_ends_its_application_and_stopping_none_does_nothing() -> None:
    async def scenario(fake: FakeCluster) -> None:
        start_gateway(fake, GatewayOptions(auth=False, name="gw-a"))
        stop_gateway(fake, "gw-a")
        stop_gateway(fake, "gw-a")
        assert fake.services == {}

    run(scenario)


def test_a_gateway_replica_starts_its_remote_host_beside_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        start_gateway(fake, GatewayOptions(auth=False))
        server: GatewayServer = fake.services["reach-gateway"]
        assert fake.names("reach.remote.") == [server.remote_host.name]
        assert await server.remote_host.count() == 0

    run(scenario)
