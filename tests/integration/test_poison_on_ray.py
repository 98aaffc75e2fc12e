"""Poison messages on a real Ray: a request whose handler ends its process (``os._exit``) in
two incarnations of its agent, sent by a plain request, by a session request and by a
supervised task, ends as a ``poison`` dead letter with a fatal PoisonMessage to its caller,
audited, and is never handed to the agent a third time, while an unmarked request to the same
agent afterwards is answered. A probe of always the same content, in hands at two crashes of
its agent (each by a request of its own) and answered in between, is not poison: it keeps
being answered.

The Ray cluster is shared by the whole integration session: the agents and the supervisor here
have names of their own (``pm-`` prefix), and the test stops what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from poison_agents import Brittle, Dose, Probe, Probed, Watched
from ray_helpers import wait_until

import reach
from reach import ChildSpec, Intensity, PoisonMessage, Severity, SupervisorSpec
from reach.records import TaskState

pytestmark = pytest.mark.integration

#: Each agent dies twice here: the intensity is never what stops its restarts.
GENEROUS = Intensity(20, 60)
#: Long enough for two deaths and two restarts, whatever backoff the restarts take.
TIMEOUT_MS = 60_000


def handed(path: Path, agent_id: str, text: str) -> int:
    """How many times ``agent_id`` was handed the dose ``text`` (its handler writes each down)."""
    if not path.exists():
        return 0
    return path.read_text(encoding="utf-8").splitlines().count(f"{agent_id} {text}")


async def poison_letters(rt: Any, agent_id: str) -> list[reach.DeadLetter]:
    async def found() -> list[reach.DeadLetter]:
        return [d for d in await rt.dead_letters() if d.code == "poison"
                and d.receiver == agent_id]

    letters: list[reach.DeadLetter] = await wait_until(found)
    return letters


async def audited(rt: Any, agent_id: str) -> list[dict[str, Any]]:
    async def found() -> list[dict[str, Any]]:
        records = await rt.cluster.audit_log().audit_records(None, agent_id, 1000)
        return [r for r in records if r["msg_type"] == "poison"]

    records: list[dict[str, Any]] = await wait_until(found)
    return records


async def answered(rt: Any, agent_id: str) -> str:
    reply = await rt.client.request(agent_id, Dose(text="fine"), timeout_ms=TIMEOUT_MS)
    return str(reply.value.text)


async def check_quarantined(rt: Any, path: Path, agent_id: str, text: str) -> None:
    """Handed twice and no more, even to a retry under a new ID; a poison letter that says so,
    an audit record; and the agent answers an unmarked dose."""
    with pytest.raises(PoisonMessage):
        await rt.client.request(agent_id, Dose(text=text), timeout_ms=TIMEOUT_MS)
    assert handed(path, agent_id, text) == 2
    letters = await poison_letters(rt, agent_id)
    assert {d.kills for d in letters} == {2}
    assert all(d.trace_id for d in letters)
    assert await audited(rt, agent_id)
    assert await answered(rt, agent_id) == f"{agent_id} took fine"
    assert handed(path, agent_id, text) == 2


async def test_a_request_that_kills_two_incarnations_is_quarantined_however_it_is_sent(
    rt: Any, tmp_path: Path,
) -> None:
    path = tmp_path / "handed.txt"
    ids = ("pm-plain", "pm-session", "pm-task")
    sup = await rt.supervise(SupervisorSpec(
        "pm", intensity=GENEROUS, children=[ChildSpec(Brittle, i, args=(str(path),))
                                            for i in ids]))
    try:
        # A plain request: the first death is a retryable AgentUnavailable, as before; the
        # user's retry (a new request ID, the same content) kills the next incarnation too.
        with pytest.raises(reach.AgentUnavailable):
            await rt.client.request("pm-plain", Dose(text="poison plain"), timeout_ms=TIMEOUT_MS)
        with pytest.raises(PoisonMessage) as plain:
            await rt.client.request("pm-plain", Dose(text="poison plain"), timeout_ms=TIMEOUT_MS)
        assert plain.value.severity is Severity.FATAL
        assert plain.value.kills == 2
        await check_quarantined(rt, path, "pm-plain", "poison plain")

        # A session request: resent once after the first death, then failed as poison.
        session = await rt.open_session(rt.client.sender, "pm-session")
        with pytest.raises(PoisonMessage) as turn:
            await session.request(Dose(text="poison session"), timeout_ms=TIMEOUT_MS)
        request_id = str(turn.value.details["request_id"])
        assert await rt.cluster.sessions().pending_status(request_id) == "failed"
        await check_quarantined(rt, path, "pm-session", "poison session")

        # A supervised task: retried once after the first death, then aborted as poison.
        task = await sup.submit("pm-task", Dose(text="poison task"), timeout_ms=TIMEOUT_MS,
                                retry_limit=5)
        result = await task.result()
        assert result.state is TaskState.FAILED
        assert result.error is not None
        assert (result.error.code, result.error.severity) == ("poison", Severity.FATAL)
        assert [a.code for a in result.attempts] == ["agent_unavailable", "poison"]
        await check_quarantined(rt, path, "pm-task", "poison task")
    finally:
        with contextlib.suppress(reach.ReachError, TimeoutError):
            await asyncio.wait_for(sup.stop(), timeout=30)


async def test_a_probe_answered_between_two_crashes_of_its_agent_keeps_being_answered(
    rt: Any, tmp_path: Path,
) -> None:
    path = tmp_path / "handed.txt"
    sup = await rt.supervise(SupervisorSpec(
        "pm-probes", intensity=GENEROUS,
        children=[ChildSpec(Watched, "pm-probed", args=(str(path),))]))
    pids: list[int] = []  # the process of each probe's answer, in order
    failures: list[reach.ReachError] = []
    stop = asyncio.Event()

    async def probe() -> None:
        try:
            reply = await rt.client.request("pm-probed", Probe(), returns=Probed,
                                            timeout_ms=TIMEOUT_MS)
            pids.append(reply.value.pid)
        except reach.ReachError as exc:
            failures.append(exc)

    async def probing() -> None:
        # A probe leaves every 20 ms and takes 200 ms: some are in hands at any moment.
        out: set[asyncio.Future[None]] = set()
        while not stop.is_set():
            call = asyncio.ensure_future(probe())
            out.add(call)
            call.add_done_callback(out.discard)
            await asyncio.sleep(0.02)
        await asyncio.gather(*out)

    async def answered_by_another(than: list[int]) -> int:
        return next((pid for pid in pids if pid not in than), 0)

    prober = asyncio.ensure_future(probing())
    try:
        seen = [await wait_until(lambda: answered_by_another([]), timeout_s=60)]
        for i in (1, 2):
            with pytest.raises(reach.AgentUnavailable):  # a crash of its own: killed once
                await rt.client.request("pm-probed", Dose(text=f"poison crash {i}"),
                                        timeout_ms=TIMEOUT_MS)
            seen.append(await wait_until(lambda: answered_by_another(seen), timeout_s=60))

        async def answered_after_both() -> bool:
            return pids.count(seen[-1]) >= 10

        await wait_until(answered_after_both, timeout_s=60)
    finally:
        stop.set()
        await prober
        with contextlib.suppress(reach.ReachError, TimeoutError):
            await asyncio.wait_for(sup.stop(), timeout=30)
    assert len(set(seen)) == 3  # three incarnations, each answered probes
    assert failures  # probes were in hands at the crashes: they failed with them
    assert all(isinstance(f, reach.AgentUnavailable) for f in failures), failures
    assert not [d for d in await rt.dead_letters() if d.code == "poison"
                and d.receiver == "pm-probed"]
    assert handed(path, "pm-probed", "poison crash 1") == 1
    assert handed(path, "pm-probed", "poison crash 2") == 1
