"""Agents used by the integration tests (importable by Ray workers through PYTHONPATH)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

import reach
from policies.sessions import Limits, PendingAction
from reach.sessions import find_session


@reach.schema("test.text@1.0")
class Text(BaseModel):
    text: str


@reach.schema("test.text@1.1")
class TextV11(Text):
    lang: str = "en"


@reach.schema("test.forward@1.0")
class Forward(BaseModel):
    to: list[str]
    text: str = ""
    timeout_ms: int | None = None


@reach.schema("test.info@1.0")
class Info(BaseModel):
    agent_id: str
    pid: int
    node: str = ""
    trace_id: str = ""
    hops: list[str] = []
    remaining_ms: float | None = None
    seen: list[str] = []


class Echo(reach.Agent):
    capabilities = ("echo.say", "order.query")
    description = "Echoes text back. Good at repeating; bad at thinking."

    @reach.handler(Text, returns=Text)
    async def say(self, ctx: reach.Context, m: Text) -> Text:
        return Text(text=f"{self.id}:{m.text}")

    @reach.handler("test.whoami@1.0", returns=Info)
    async def whoami(self, ctx: reach.Context, _m: dict[str, Any]) -> Info:
        import ray

        return Info(agent_id=self.id, pid=os.getpid(),
                    node=ray.get_runtime_context().get_node_id(), trace_id=ctx.trace_id or "",
                    hops=list(ctx.request_envelope.hops), remaining_ms=ctx.remaining_ms())


class Refunds(reach.Agent):
    capabilities = ("refund.request",)
    description = "Handles refunds and 退款 for damaged or late orders."

    @reach.handler(Text, returns=Text)
    async def say(self, ctx: reach.Context, m: Text) -> Text:
        return Text(text=f"refund:{m.text}")


class Forwarder(reach.Agent):
    """Forwards along ``to``: to[0] gets the rest of the list; the last one answers who it is."""

    capabilities = ("test.forward",)

    @reach.handler(Forward, returns=Info)
    async def forward(self, ctx: reach.Context, m: Forward) -> Info:
        if not m.to:
            return Info(agent_id=self.id, pid=os.getpid(), trace_id=ctx.trace_id or "",
                        hops=list(ctx.request_envelope.hops), remaining_ms=ctx.remaining_ms())
        reply = await ctx.request(m.to[0], Forward(to=m.to[1:], text=m.text,
                                                   timeout_ms=m.timeout_ms),
                                  returns=Info, timeout_ms=m.timeout_ms)
        return reply.value


class Slow(reach.Agent):
    capabilities = ("test.slow",)

    @reach.handler(Text, returns=Text)
    async def say(self, ctx: reach.Context, m: Text) -> Text:
        await asyncio.sleep(float(m.text))
        return Text(text="late")


class Faulty(reach.Agent):
    capabilities = ("test.faulty",)

    @reach.handler(Text, returns=Text)
    async def say(self, ctx: reach.Context, m: Text) -> Text:
        if m.text == "degrade":
            raise reach.ReachError("only half the data", severity=reach.Severity.DEGRADABLE,
                                   suggestion="use the partial answer")
        raise KeyError(m.text)


class Streamer(reach.Agent):
    capabilities = ("test.stream",)

    @reach.handler(Text, returns=Text)
    async def say(self, ctx: reach.Context, m: Text) -> AsyncIterator[Text]:
        for i in range(3):
            yield Text(text=f"{m.text}-{i}")
        if m.text == "boom":
            raise reach.AgentUnavailable("upstream went away mid-stream")


class Recorder(reach.Agent):
    """Keeps every notification it gets; a request returns what it has seen."""

    capabilities = ("test.recorder",)

    def __init__(self) -> None:
        self.seen: list[str] = []

    @reach.handler(Text)
    async def note(self, ctx: reach.Context, m: Text) -> None:
        self.seen.append(m.text)

    @reach.handler("test.whoami@1.0", returns=Info)
    async def report(self, ctx: reach.Context, _m: dict[str, Any]) -> Info:
        return Info(agent_id=self.id, pid=os.getpid(), seen=self.seen)


class Crashing(reach.Agent):
    capabilities = ("test.crash",)

    def __init__(self) -> None:
        raise RuntimeError("constructor refuses to start")


@reach.schema("test.life@1.0")
class Life(BaseModel):
    agent_id: str
    pid: int
    token: str
    cancelled: list[str] = []
    calls: int = 0


def crash_order() -> Text:
    """A request that makes a Worker end its process: of its own content each time, since
    the same request killing two incarnations of an agent is poison, and not delivered again."""
    return Text(text=f"crash {os.urandom(4).hex()}")


class Worker(reach.Agent):
    """A supervised agent that can report who it is, crash, quit, fail, or be slow."""

    capabilities = ("test.worker",)

    def __init__(self, fail_if_exists: str = "") -> None:
        if fail_if_exists and os.path.exists(fail_if_exists):
            raise RuntimeError(f"refusing to start: {fail_if_exists} exists")
        self.token = os.urandom(6).hex()
        self.cancelled: list[str] = []
        self.calls = 0

    def _life(self) -> Life:
        return Life(agent_id=self.id, pid=os.getpid(), token=self.token,
                    cancelled=self.cancelled, calls=self.calls)

    @reach.handler("test.life.ask@1.0", returns=Life)
    async def life(self, ctx: reach.Context, _m: dict[str, Any]) -> Life:
        return self._life()

    @reach.handler(Text, returns=Text)
    async def act(self, ctx: reach.Context, m: Text) -> Text:
        self.calls += 1
        if m.text.split(" ", 1)[0] == "crash":
            os._exit(1)
        if m.text == "quit":
            self.exit(normal=True)
        elif m.text == "die":
            self.exit(normal=False, reason="asked to die")
        elif m.text == "retryable":
            raise reach.ReachError("flaky", severity=reach.Severity.RETRYABLE)
        elif m.text == "degrade":
            raise reach.ReachError("half done", severity=reach.Severity.DEGRADABLE,
                                   partial={"rows": 5, "of": 10})
        elif m.text == "fatal":
            raise reach.ReachError("cannot ever work", severity=reach.Severity.FATAL)
        elif m.text.startswith("sleep"):
            try:
                await asyncio.sleep(float(m.text.removeprefix("sleep")))
            except asyncio.CancelledError:
                self.cancelled.append(ctx.trace_id or "")
                raise
        return Text(text=f"{self.id}:{m.text}")


class Fanner(reach.Agent):
    """Calls two agents at once: to[0] slowly, to[1] with the given text."""

    capabilities = ("test.fanner",)

    @reach.handler(Forward, returns=Text)
    async def fan(self, ctx: reach.Context, m: Forward) -> Text:
        slow = asyncio.ensure_future(ctx.request(m.to[0], Text(text="sleep30")))
        try:
            await ctx.request(m.to[1], Text(text=m.text))
        except reach.ReachError:
            slow.cancel()  # failing: its own call goes with it (the callee runs on, untold)
            raise
        await slow
        return Text(text="both done")


def _note(path: str, line: str) -> None:
    """Appends a line to a file: a side effect that survives the process."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class Talker(reach.Agent):
    """One side of a conversation: answers each turn with what it has seen of the session.

    Each handler run is noted in ``runs`` (a file), so a run a crash interrupted still shows.
    A turn whose text starts with "slow" sleeps the first time it runs (``slow_marker`` absent).
    """

    capabilities = ("test.talker",)
    session_limits = Limits(max_message_bytes=64 * 1024, streaming=False)

    def __init__(self, runs: str = "", slow_marker: str = "") -> None:
        self.runs, self.slow_marker = runs, slow_marker

    @reach.handler(Text, returns=Text)
    async def answer(self, ctx: reach.Context, m: Text) -> Text:
        _note(self.runs, f"{ctx.request_envelope.msg_id} {m.text}")
        if m.text.startswith("slow") and not os.path.exists(self.slow_marker):
            _note(self.slow_marker, "slept")
            rest = m.text.removeprefix("slow")
            await asyncio.sleep(float(rest) if rest.replace(".", "", 1).isdigit() else 30.0)
        before = 0
        session = await ctx.session()
        if session is not None:
            context = await session.context(last_n=100)
            before = context.next_seq - 1
        return Text(text=f"{self.id} saw {before} before '{m.text}'")


class Asker(reach.Agent):
    """Asks ``to`` one question in a session (started by a notification) and notes the outcome,
    then or after a restart, in ``outcomes`` (a file)."""

    capabilities = ("test.asker",)

    def __init__(self, outcomes: str = "") -> None:
        self.outcomes = outcomes

    @reach.handler(Forward)
    async def ask(self, ctx: reach.Context, m: Forward) -> None:
        session = await find_session(ctx, m.to[0])
        assert session.peer == m.to[1]
        reply = await session.request(Text(text=m.text), returns=Text, timeout_ms=m.timeout_ms)
        _note(self.outcomes, f"answered {reply.value.text}")

    async def on_recovered(self, request: reach.Envelope, reply: reach.Envelope | None,
                           error: reach.ReachError | None) -> None:
        outcome = f"answered {reply.payload['text']}" if reply else f"cancelled {error}"
        _note(self.outcomes, f"recovered {request.msg_id} {outcome}")


class CancellingAsker(Asker):
    pending_policy = PendingAction.CANCEL


class Summariser(reach.Agent):
    """Folds messages into a summary that says how many it has folded in all."""

    capabilities = ("test.summarise",)

    @reach.handler("reach.summarise@1.0", returns="reach.summary@1.0")
    async def fold(self, ctx: reach.Context, m: dict[str, Any]) -> dict[str, Any]:
        # Takes its time, as a model would: the summary travels back as a reply of its own to
        # the store that asked, not within the call that delivered the request.
        await asyncio.sleep(0.05)
        before = int(m["summary"].split()[0]) if m["summary"] else 0
        return {"summary": f"{before + len(m['messages'])} messages folded by {self.id}"}
