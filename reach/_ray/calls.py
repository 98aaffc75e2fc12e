"""How a call on one of reach's Ray actors starts and ends: the base of every port's adapter.

A call starts at once (``handle.m.remote(...)``) and is a :class:`RayCall`: awaiting it gives the
result, or the call's error translated into reach's error tree (:func:`translate`, the one place
Ray's errors are read). Agent classes given to a host travel as :class:`_ShippedClass`: pickled
once per sending process, rebuilt once per receiving one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator
from typing import Any, cast

import ray
from ray.exceptions import (
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
    RayError,
    RayTaskError,
)

from reach.errors import AgentUnavailable, Detail, ReachError


def translate(exc: BaseException, name: str) -> BaseException:
    """What a failed call to the process ``name`` raises: the one translation of Ray's errors.

    A ReachError raised remotely arrives as itself; so does the exception an agent's constructor
    (or ``on_start``) raised in a host. A dead or unreachable process is AgentUnavailable (its
    details say ``unreachable`` when the process was not seen to die).
    """
    if isinstance(exc, ReachError):
        return exc
    if isinstance(exc, RayTaskError):
        cause = exc.cause
        if isinstance(cause, BaseException) and not isinstance(cause, RayError):
            return cause
    if isinstance(exc, RayActorError):
        details: dict[str, Detail] = {"endpoint": name}
        if isinstance(exc, ActorUnavailableError):
            # Not seen to die, only unreachable: so are the processes of a node lost, until
            # Ray's health checks declare it dead (a process killed on a live node is seen to).
            details["unreachable"] = True
        return AgentUnavailable(
            f"{name} is dead or unreachable: {type(exc).__name__}",
            suggestion="retry: a supervisor may restart the agent, or another holder may answer",
            details=details,
        )
    if isinstance(exc, GetTimeoutError):
        return AgentUnavailable(f"{name} did not answer in time", details={"endpoint": name})
    return AgentUnavailable(f"call to {name} failed: {type(exc).__name__}: {exc}",
                            details={"endpoint": name})


class RayCall:
    """A call under way on an actor: awaiting it gives its result or its translated error.

    Attributes:
        ref: Ray's reference to the call's result.
        name: The process called.
    """

    __slots__ = ("name", "ref")

    def __init__(self, ref: Any, name: str) -> None:
        self.ref = ref
        self.name = name

    def __await__(self) -> Generator[Any, None, Any]:
        try:
            return (yield from self.ref.__await__())
        except RayError as exc:
            raise translate(exc, self.name) from exc


class RayPort:
    """One process's actor handle and name, and how a call on it starts.

    Pickles as its handle and name (a handle travels between Ray processes).

    Args:
        handle: The actor's handle.
        name: The actor's name (the endpoint name replies are sent to).
    """

    def __init__(self, handle: Any, name: str) -> None:
        self.handle = handle
        self.name = name
        self._remotes: dict[str, Callable[..., Any]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.handle, self.name))

    def call(self, method: str, *args: object, **kwargs: object) -> RayCall:
        """Starts the actor's ``method`` now (also one outside the port: what a benchmark
        measures, or a feature's own port over this process)."""
        try:
            remote = self._remotes[method]
        except KeyError:  # bound once: a handle's attribute makes a new method object
            remote = self._remotes[method] = getattr(self.handle, method).remote
        return RayCall(remote(*args, **kwargs), self.name)


class _ShippedClass:
    """An agent class as a call argument: pickled once per sending process, rebuilt once per
    receiving process.

    A class defined in a script travels by value; pickling it costs the sender about 1 ms and
    rebuilding it a fresh receiver about 10 ms (its models' schemas), five times more on a
    loaded machine: on a restart's path. Its pickle is kept here, keyed by its digest, and a
    process that rebuilt a class once finds it by that key (a class is sent as it was when this
    process first sent it).
    """

    __slots__ = ("blob", "key")

    def __init__(self, key: str, blob: bytes) -> None:
        self.key = key
        self.blob = blob

    def __reduce__(self) -> tuple[Any, ...]:
        return (_received_class, (self.key, self.blob))


_SHIPPED: dict[type, _ShippedClass] = {}
_RECEIVED: dict[str, type] = {}


def ship(cls: type) -> _ShippedClass:
    """A class as a shipped class (pickled the first time only)."""
    shipped = _SHIPPED.get(cls)
    if shipped is None:
        blob: bytes = ray.cloudpickle.dumps(cls)  # type: ignore[no-untyped-call]
        key = hashlib.sha256(blob).hexdigest()
        shipped = _SHIPPED[cls] = _ShippedClass(key, blob)
        _RECEIVED.setdefault(key, cls)
    return shipped


def _received_class(key: str, blob: bytes) -> type:
    """The class of a shipped class's pickle, rebuilt the first time only."""
    cls = _RECEIVED.get(key)
    if cls is None:
        cls = _RECEIVED[key] = cast(type, ray.cloudpickle.loads(blob))
    return cls


__all__ = ["RayCall", "RayPort", "ship", "translate"]
