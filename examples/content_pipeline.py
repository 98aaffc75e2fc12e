"""A three-stage content pipeline: research -> write -> proofread, each stage an agent.

The stages run under one supervisor. They do not hand their work to each other: the driver opens
a session and asks each stage in turn within it, and each stage reads what the stage before it
produced from the session. At the end the agents are stopped and the session, kept by the session
store, is read back: the conversation outlives the agents that took part in it.

With ``--crash-writer`` the writer's process dies in the middle of its first draft; its supervisor
restarts it, the same request is sent again, and the writer carries on from the note it left in
the session (Ray reports the dead worker: that is the crash, on purpose). Every transform is
deterministic (no model calls).

Run it on a Ray of its own, started for the run and stopped at the end (the default, unless
RAY_ADDRESS names a cluster), or on a running cluster, from a driver on one of its nodes::

    python examples/content_pipeline.py
    python examples/content_pipeline.py --address auto --topic "supervision of actors"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import textwrap

from pydantic import BaseModel

import reach

SUPERVISOR = "content-pipeline"
STAGES = (("research", "pipeline-researcher"), ("write", "pipeline-writer"),
          ("proofread", "pipeline-proofreader"))
#: The writer and the proofreader share one host process; the researcher has its own.
POOL = reach.Packed(pool="content-pipeline", size=1)

# What the researcher knows: (topic words, a note as found in the sources, typos and all).
SOURCES = (
    ({"actor", "actors", "model"},
     "an actor handles one message at a time , so its state needs no lock"),
    ({"actor", "actors", "model", "message", "messages"},
     "actors share no memory; they comunicate only by sending messages"),
    ({"actor", "actors", "supervision", "supervisor", "failure"},
     "a supervisor restarts a failed actor insted of letting the failure spread"),
    ({"actor", "actors", "location", "cluster"},
     "an adress names an actor wherever it runs , on this machine or on another"),
    ({"session", "sessions", "conversation"},
     "a session keeps a conversation's messages in order , numbered by sequence"),
    ({"session", "sessions", "supervision", "failure"},
     "a request that was in flight when its reciever died is sent again after the restart"),
)
TYPOS = {"comunicate": "communicate", "insted": "instead", "adress": "address",
         "reciever": "receiver"}


@reach.schema("pipeline.step@1.0")
class Step(BaseModel):
    """What the driver asks of every stage: do your part for this topic."""

    topic: str


@reach.schema("pipeline.work@1.0")
class Work(BaseModel):
    """What a stage produced: its text, and notes on how it got there."""

    stage: str
    author: str
    text: str
    notes: list[str] = []


async def session_of(ctx: reach.Context) -> reach.Session:
    """The session of the request being handled.

    Raises:
        ReachError: the request is not part of a session (fatal).
    """
    session = await ctx.session()
    if session is None:
        raise reach.ReachError(f"{ctx.agent_id} works within a session",
                               severity=reach.Severity.FATAL,
                               suggestion="send the request with Session.request")
    return session


async def earlier_work(ctx: reach.Context, stage: str) -> Work:
    """The latest output of ``stage`` in the session of the request being handled.

    Raises:
        ReachError: the request is not part of a session, or ``stage`` has not run in it (fatal).
    """
    context = await (await session_of(ctx)).context(last_n=50)
    for message in reversed(context.messages):
        if message.kind == "reply" and message.payload.get("stage") == stage:
            return Work.model_validate(message.payload)
    raise reach.ReachError(f"the session has no {stage} output yet",
                           severity=reach.Severity.FATAL,
                           suggestion=f"run the {stage} stage first")


class Researcher(reach.Agent):
    """Collects the notes the sources hold on a topic."""

    capabilities = ("content.research",)
    description = "Finds notes on a topic in its sources. Copies them as found, typos included."

    @reach.handler(Step, returns=Work)
    async def research(self, ctx: reach.Context, step: Step) -> Work:
        words = set(re.findall(r"[a-z]+", step.topic.lower()))
        notes = [note for tags, note in SOURCES if tags & words]
        if not notes:
            raise reach.ReachError(f"the sources say nothing about {step.topic!r}",
                                   severity=reach.Severity.FATAL,
                                   suggestion="try a topic about actors or sessions")
        return Work(stage="research", author=self.id, text="\n".join(notes), notes=notes)


class Writer(reach.Agent):
    """Turns the research notes in the session into a first draft."""

    capabilities = ("content.write",)
    description = "Writes a rough first draft from research notes. Does not check spelling."

    def __init__(self, crash_once: bool = False) -> None:
        self.crash_once = crash_once

    @reach.handler(Step, returns=Work)
    async def write(self, ctx: reach.Context, step: Step) -> Work:
        research = await earlier_work(ctx, "research")
        if self.crash_once and not await self._started_before(ctx):
            session = await session_of(ctx)
            await session.append(self.id, {"note": "draft started"}, kind="note")
            os._exit(1)  # the process dies mid-draft; the supervisor restarts it
        points = [note.rstrip(".") for note in research.notes]
        draft = (f"this note explains {step.topic} in {len(points)} points. "
                 + ". ".join(points))
        return Work(stage="write", author=self.id, text=draft,
                    notes=[f"{len(points)} points from {research.author}"])

    async def _started_before(self, ctx: reach.Context) -> bool:
        context = await (await session_of(ctx)).context(last_n=50)
        return any(m.kind == "note" and m.sender == self.id for m in context.messages)


class Proofreader(reach.Agent):
    """Corrects the draft in the session: spelling, spacing, capitals, the final full stop."""

    capabilities = ("content.proofread",)
    description = "Proofreads a draft: fixes known typos, spacing and capitals. Adds nothing."

    @reach.handler(Step, returns=Work)
    async def proofread(self, ctx: reach.Context, step: Step) -> Work:
        draft = await earlier_work(ctx, "write")
        text, notes = proofread(draft.text)
        return Work(stage="proofread", author=self.id, text=text, notes=notes)


def proofread(text: str) -> tuple[str, list[str]]:
    """The corrected text, and what was corrected."""
    notes = []
    for wrong, right in TYPOS.items():
        text, n = re.subn(rf"\b{wrong}\b", right, text)
        if n:
            notes.append(f"{wrong} -> {right}")
    text, n = re.subn(r"\s+([,.;])", r"\1", text)
    if n:
        notes.append(f"{n} spaces before punctuation removed")
    text, n = re.subn(r"(^|[.!?]\s+)([a-z])", lambda m: m[1] + m[2].upper(), text)
    if n:
        notes.append(f"{n} sentences capitalised")
    if not text.endswith("."):
        text += "."
        notes.append("final full stop added")
    return text, notes


def tree(crash_writer: bool) -> reach.SupervisorSpec:
    """The supervision tree of the three stages, in pipeline order."""
    (_, researcher), (_, writer), (_, proofreader) = STAGES
    return reach.SupervisorSpec(SUPERVISOR, children=[
        reach.ChildSpec(Researcher, researcher, placement=reach.Dedicated()),
        reach.ChildSpec(Writer, writer, placement=POOL, kwargs={"crash_once": crash_writer}),
        reach.ChildSpec(Proofreader, proofreader, placement=POOL),
    ])


def show(stage: str, work: Work) -> None:
    """Prints one stage's output."""
    print(f"\n== {stage} by {work.author} ==")
    for line in work.text.splitlines():
        print(textwrap.fill(line, width=96, initial_indent="  ", subsequent_indent="  "))
    if stage != "research":  # the research notes are its text already
        for note in work.notes:
            print(f"  - {note}")


def describe(message: reach.SessionMessage) -> str:
    """One line for a stored session message."""
    payload = message.payload
    if message.kind == "request":
        what = f"topic={payload['topic']!r}"
    elif message.kind == "reply":
        what = f"{payload['stage']}: {payload['text'][:48]!r}..."
    else:
        what = repr(dict(payload))
    return f"  #{message.seq:<2} {message.kind:<7} {message.sender:<22} {what}"


async def run_stages(session: reach.Session, topic: str) -> list[Work]:
    """Asks each stage in turn within the session and prints its output; returns the outputs.

    The session was opened with the first stage; the driver, a third party, turns to each
    stage in turn within it (``to=``).

    Raises:
        ReachError: a stage failed (its own error, typed).
    """
    results = []
    for stage, agent_id in STAGES:
        reply = await session.request(Step(topic=topic), returns=Work, to=agent_id)
        show(stage, reply.value)
        results.append(reply.value)
    return results


def problems(final: Work, kept: tuple[reach.SessionMessage, ...], restarted: list[str],
             crash_writer: bool) -> list[str]:
    """What is wrong with a finished run (nothing, when it went as it should)."""
    found = [f"typo {typo!r} left" for typo in TYPOS if typo in final.text]
    replies = [m.sender for m in kept if m.kind == "reply"]
    if replies != [agent_id for _, agent_id in STAGES]:
        found.append(f"the session holds replies from {replies}")
    if crash_writer and STAGES[1][1] not in restarted:
        found.append("the writer was not restarted")
    return found


async def run(rt: reach.Runtime, topic: str, crash_writer: bool) -> int:
    """Runs the pipeline in a session, stops it, reads the session back, closes the runtime;
    returns the status."""
    async with rt:
        return await run_pipeline(rt, topic, crash_writer)


async def run_pipeline(rt: reach.Runtime, topic: str, crash_writer: bool) -> int:
    """Runs the pipeline in a session, stops it (which frees its names for the next run),
    reads the session back; returns the status."""
    sup = await rt.supervise(tree(crash_writer))
    try:
        session = await rt.open_session(rt.client.sender, STAGES[0][1],
                                        reach.Terms(timeout_ms=120_000))
        print(f"session {session.session_id} opened with terms {session.terms}")
        try:
            results = await run_stages(session, topic)
        except reach.ReachError as exc:
            hint = f" ({exc.suggestion})" if exc.suggestion else ""
            print(f"\npipeline FAILED: {type(exc).__name__}: {exc}{hint}")
            return 1
        restarts = (await sup.status()).restarts
    finally:
        await sup.stop()
    if restarts:
        print()
    for restart in restarts:
        print(f"{SUPERVISOR} restarted {restart.child} ({restart.reason})")
    kept = (await (await rt.session(session.session_id)).context(last_n=50)).messages
    print(f"\nthe agents are stopped; session {session.session_id} keeps {len(kept)} messages:")
    for message in kept:
        print(describe(message))
    wrong = problems(results[-1], kept, [r.child for r in restarts], crash_writer)
    if wrong:
        print(f"\npipeline FAILED: {'; '.join(wrong)}")
        return 1
    print(f"\npipeline complete: research -> write -> proofread, "
          f"{len(kept)} messages kept in session {session.session_id}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses the command line and runs the pipeline; a Ray started for the run stops when the
    script ends."""
    parser = argparse.ArgumentParser(description="research -> write -> proofread, in a session.")
    parser.add_argument("--address", default=None,
                        help="Ray cluster to join, e.g. auto (default: RAY_ADDRESS if set, "
                             "else a local Ray started for this run)")
    parser.add_argument("--topic", default="the actor model", help="what to write about")
    parser.add_argument("--crash-writer", action="store_true",
                        help="kill the writer's process mid-draft once (it is restarted)")
    args = parser.parse_args(argv)
    # Not Ray's default (which joins the last cluster started on this machine, if any):
    # without an address, a Ray of its own, stopped at the end.
    where = args.address or os.environ.get("RAY_ADDRESS") or "local"
    rt = reach.init(address=where, log_to_driver=False)
    return asyncio.run(run(rt, args.topic, args.crash_writer))


if __name__ == "__main__":
    sys.exit(main())
