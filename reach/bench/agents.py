"""The agents the benchmarks run and their payload models, in one importable module.

Ray workers and ``reach connect`` processes import these classes by name (``reach.bench.agents``),
so nothing is shipped by value, and a benchmark run as ``python -m reach.bench.NAME`` (its module
then being ``__main__``) registers no schema twice. The plain Ray actors the benchmarks compare
reach with are in :mod:`reach.bench.anchors`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time

from pydantic import BaseModel

import reach

# -- the seed scenario (reach.bench.seed_scenario) ---------------------------------------------


@reach.schema("bench.item@1.0")
class Item(BaseModel):
    """A small order line with Chinese text."""

    sku: str
    text: str
    qty: int


class ItemEcho(reach.Agent):
    """Echoes an item back with its quantity doubled."""

    capabilities = ("bench.echo",)
    description = "Echoes an item back with its quantity doubled."

    @reach.handler(Item, returns=Item)
    async def echo(self, ctx: reach.Context, item: Item) -> Item:
        """The item, its quantity doubled."""
        return Item(sku=item.sku, text=item.text, qty=item.qty * 2)


# -- the gateway and remote agents (reach.bench.gateway, reach.bench.remote_agent) --------------


@reach.schema("bench.ask@1.0")
class Ask(BaseModel):
    """What a caller says: a number to tell the answers apart, and a text."""

    n: int
    text: str


@reach.schema("bench.said@1.0")
class Said(BaseModel):
    """What the echo agent says back."""

    n: int
    text: str


class EchoAgent(reach.Agent):
    """Says back what it was told (a stand-in for a quick agent)."""

    capabilities = ("bench.echo",)
    description = "Says back what it was told (a stand-in for a quick agent)."

    @reach.handler(Ask, returns=Said)
    async def echo(self, ctx: reach.Context, ask: Ask) -> Said:
        """The ask, said back."""
        return Said(n=ask.n, text=ask.text)


# -- I/O-bound handlers (reach.bench.io_bound) ---------------------------------------------------

#: How long an I/O-bound handler waits, standing for a model call (seconds).
CALL_S = 0.5


@reach.schema("bench.prompt@1.0")
class Prompt(BaseModel):
    """A prompt to complete."""

    n: int
    text: str


@reach.schema("bench.completion@1.0")
class Completion(BaseModel):
    """A prompt's completion."""

    n: int
    text: str


class SlowAgent(reach.Agent):
    """Completes a prompt after :data:`CALL_S`, as a model call would."""

    capabilities = ("bench.complete",)
    description = "Completes a prompt after half a second, as a model call would."

    @reach.handler(Prompt, returns=Completion)
    async def complete(self, ctx: reach.Context, prompt: Prompt) -> Completion:
        """The prompt in capitals, after :data:`CALL_S`."""
        await asyncio.sleep(CALL_S)
        return Completion(n=prompt.n, text=prompt.text.upper())


# -- chaos (reach.bench.chaos) -------------------------------------------------------------------


@reach.schema("chaos.job@1.0")
class Job(BaseModel):
    """A unit of work of ``work_ms``."""

    n: int
    work_ms: int = 20


@reach.schema("chaos.done@1.0")
class Done(BaseModel):
    """A job done, and by whom."""

    n: int
    by: str


class ChaosWorker(reach.Agent):
    """Does a small unit of work; may be killed at any moment."""

    capabilities = ("chaos.work",)
    description = "Does a small unit of work; may be killed at any moment."

    @reach.handler(Job, returns=Done)
    async def work(self, ctx: reach.Context, job: Job) -> Done:
        """Waits ``work_ms`` (standing for real work), then says it is done."""
        await asyncio.sleep(job.work_ms / 1000)
        return Done(n=job.n, by=self.id)


# -- restarts (reach.bench.restart) --------------------------------------------------------------


@reach.schema("bench.restart.ping@1.1")
class Ping(BaseModel):
    """Asks an incarnation who it is; ``n`` tells probes apart (a request sent again and again
    with one content, in hands when its agent's host died twice, would be taken for poison)."""

    n: int = 0


@reach.schema("bench.restart.crash@1.0")
class Crash(BaseModel):
    """Asks an agent to end its own process, writing the moment to the file ``mark``."""

    mark: str


@reach.schema("bench.restart.incarnation@1.0")
class Incarnation(BaseModel):
    """An incarnation: its process and a token it drew when it started."""

    pid: int
    token: str


def crash_now(mark: str, token: str = "") -> None:
    """Writes this moment (epoch seconds) and ``token`` (the incarnation's, if any) to ``mark``,
    then ends this process at once."""
    fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, f"{time.time()!r} {token}".encode("ascii"))
    os.close(fd)
    os._exit(1)


def read_mark(mark: str) -> tuple[float, str] | None:
    """What :func:`crash_now` wrote to ``mark``: the moment and the token; None while nothing
    (or not all of it) is there."""
    try:
        with open(mark, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    moment, _, token = text.partition(" ")
    try:
        return float(moment), token
    except ValueError:  # being written
        return None


class Victim(reach.Agent):
    """Says which incarnation it is; crashes its own process on request."""

    capabilities = ("bench.restart",)
    description = "Says which incarnation it is; crashes its own process on request."

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)

    @reach.handler(Ping, returns=Incarnation)
    async def ping(self, ctx: reach.Context, _: Ping) -> Incarnation:
        """This incarnation."""
        return Incarnation(pid=os.getpid(), token=self.token)

    @reach.handler(Crash, returns=Incarnation)
    async def crash(self, ctx: reach.Context, c: Crash) -> Incarnation:
        """Ends this process (never returns), naming this incarnation in the mark."""
        crash_now(c.mark, self.token)
        raise AssertionError("unreachable")  # pragma: no cover


# -- registry scale (reach.bench.registry_scale) -------------------------------------------------


class Light(reach.Agent):
    """A light agent; its capability is set per subclass (:func:`light_class`)."""

    description = "A light agent for the registry scale benchmark."


def light_class(tag: str) -> type[reach.Agent]:
    """A subclass of :class:`Light` holding ``tag``, named after it."""
    return type(f"Light_{tag.replace('.', '_')}", (Light,), {"capabilities": (tag,)})


def slow_class(capability: str) -> type[SlowAgent]:
    """SlowAgent holding ``capability`` only: each contestant asks for a tag of its own, so that
    no list of holders cached for the one before can send it to agents that are gone."""
    return type(f"SlowAgent_{capability.replace('.', '_')}", (SlowAgent,),
                {"capabilities": (capability,)})
