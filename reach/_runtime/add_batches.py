"""Agents added to one host in the same turn of the event loop go to it in one call.

A pool host's death restarts every agent it held at once, each by a restart of its own that
moves it to a live host of the pool: one call apiece, each a registration of its own in the
registry, ten of them for ten agents, while the new incarnations' callers wait for the slowest.
Gathered here, the agents of one class and arguments moved to one host in the same turn are
added by one call and registered by one registry call. A batch that fails for another reason
than its host's death (an agent's constructor or ``on_start`` raised, an ID is live elsewhere)
is added again one agent per call, so that an agent's failure stays its own; a dead host fails
them all alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reach.agent import Agent
from reach.errors import AgentUnavailable
from reach.ports.hosts import HostPort
from reach.records import AgentRecord

Priority = int | Mapping[str, int] | None


@dataclass
class _Batch:
    """Agents to add to one host in one call: one class, the same arguments and priorities."""

    host: HostPort
    cls: type[Agent]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    priority: Priority
    # Each agent's ID, the least epoch of its new incarnation (None: any), and its caller's
    # future.
    members: list[tuple[str, int | None, asyncio.Future[AgentRecord]]] = field(
        default_factory=list)

    def takes(self, host: HostPort, cls: type[Agent], args: tuple[Any, ...],
              kwargs: dict[str, Any], priority: Priority) -> bool:
        """Whether an agent of these can join this batch."""
        return (host.name == self.host.name and cls is self.cls and _same(args, self.args)
                and _same(kwargs, self.kwargs) and _same(priority, self.priority))


class AddBatches:
    """The batches of agents being gathered for their hosts in this turn of the loop."""

    def __init__(self) -> None:
        # Invariant: a batch is open (joinable) only until its call is made, in the next turn.
        self._open: list[_Batch] = []
        self._calls: set[asyncio.Task[None]] = set()

    async def add(self, host: HostPort, cls: type[Agent], agent_id: str, *,
                  args: tuple[Any, ...], kwargs: dict[str, Any],
                  epochs: Mapping[str, int] | None, priority: Priority) -> list[AgentRecord]:
        """Adds one agent to ``host`` (as ``HostPort.add_agents`` does), with the others added
        to it in this turn of the loop when they are of the same class, arguments and
        priorities; its record.

        Raises:
            AgentUnavailable: the host is dead.
            Exception: what adding this agent alone raised.
        """
        loop = asyncio.get_running_loop()
        batch = next((b for b in self._open if b.takes(host, cls, args, kwargs, priority)), None)
        if batch is None:
            batch = _Batch(host, cls, args, kwargs, priority)
            self._open.append(batch)
            loop.call_soon(self._send, batch)
        future: asyncio.Future[AgentRecord] = loop.create_future()
        batch.members.append((agent_id, (epochs or {}).get(agent_id), future))
        return [await future]

    def _send(self, batch: _Batch) -> None:
        self._open.remove(batch)
        call = asyncio.get_running_loop().create_task(self._call(batch))
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)

    async def _call(self, batch: _Batch) -> None:
        """Adds a batch's agents in one call; one by one if that failed but for a dead host.
        Called off (the loop is closing), it calls off its callers' waits too."""
        try:
            await self._add_all(batch)
        finally:
            for _, _, future in batch.members:
                future.cancel()  # unless settled: a caller never waits for nothing

    async def _add_all(self, batch: _Batch) -> None:
        try:
            records = await _add(batch, batch.members)
        except AgentUnavailable as exc:
            for _, _, future in batch.members:
                _settle(future, error=exc)
            return
        except Exception as exc:  # one agent's failure: each is added alone
            if len(batch.members) == 1:
                _settle(batch.members[0][2], error=exc)
                return
            await asyncio.gather(*(_alone(batch, m) for m in batch.members))
            return
        by_id = {r.agent_id: r for r in records}
        for agent_id, _, future in batch.members:
            _settle(future, record=by_id[agent_id])


async def _add(batch: _Batch, members: list[tuple[str, int | None, asyncio.Future[AgentRecord]]],
               ) -> list[AgentRecord]:
    epochs = {a: e for a, e, _ in members if e is not None}
    return await batch.host.add_agents(batch.cls, [a for a, _, _ in members], batch.args,
                                       batch.kwargs, epochs or None, priority=batch.priority)


async def _alone(batch: _Batch,
                 member: tuple[str, int | None, asyncio.Future[AgentRecord]]) -> None:
    try:
        (record,) = await _add(batch, [member])
    except Exception as exc:
        _settle(member[2], error=exc)
    else:
        _settle(member[2], record=record)


def _settle(future: asyncio.Future[AgentRecord], *, record: AgentRecord | None = None,
            error: BaseException | None = None) -> None:
    """Gives a caller its record or its error (unless it stopped waiting)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert record is not None
        future.set_result(record)


def _same(a: object, b: object) -> bool:
    """Whether two values are the same or equal (a value whose comparison fails is not)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an argument whose __eq__ raises (or is ambiguous) is added apart
        return False
