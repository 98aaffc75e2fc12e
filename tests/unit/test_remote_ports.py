"""The remote host's port, its adapter and the host agree: every method of RemoteHostPort (a
host's and the remote host's own) takes the same parameters on RemoteHost (names, in order) and
on RemoteHostClient (defaults too), and the adapter calls the host's method of that name, with
the arguments in order."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Generator
from typing import Protocol

import pytest

from reach.remote.host import RemoteHost
from reach.remote.ports import RemoteHostClient, RemoteHostPort


def port_methods(port: type) -> list[str]:
    """The public methods a Protocol declares, with those of the Protocols it extends."""
    found: set[str] = set()
    for cls in port.__mro__:
        if cls is object or cls is Protocol or cls.__module__ == "typing":
            continue
        found |= {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
    return sorted(found)


METHODS = port_methods(RemoteHostPort)


def parameters(fn: object) -> list[tuple[str, object, object]]:
    """A method's parameters past ``self``: name, kind and default."""
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in list(sig.parameters.values())[1:]]


def test_the_port_has_a_hosts_methods_and_the_remote_hosts_own() -> None:
    assert {"deliver", "watch", "add_agents", "info", "attach", "take", "put", "poke", "detach",
            "refused", "hand_over"} <= set(METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_the_host_and_the_adapter_take_what_the_port_declares(method: str) -> None:
    declared = parameters(getattr(RemoteHostPort, method))
    # The adapter's defaults are the port's; a host's defaults are the host port's concern.
    assert parameters(getattr(RemoteHostClient, method)) == declared
    assert [p[:2] for p in parameters(getattr(RemoteHost, method))] == [p[:2] for p in declared]


class Pending:
    """A call under way that nobody awaits here."""

    def __await__(self) -> Generator[None, None, object]:
        yield
        return None


class Recorder:
    """A process handle that records the calls made on it."""

    name = "reach.remote.replica-1"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []

    def call(self, method: str, *args: object) -> Awaitable[object]:
        self.calls.append((method, args))
        return Pending()


@pytest.mark.parametrize("method", METHODS)
def test_the_adapter_calls_the_hosts_method_of_the_same_name(method: str) -> None:
    process = Recorder()
    client = RemoteHostClient(process)
    args = tuple(f"arg-{i}" for i, _ in enumerate(parameters(getattr(RemoteHostPort, method))))
    getattr(client, method)(*args)
    assert process.calls == [(method, args)]
    assert client.name == process.name
