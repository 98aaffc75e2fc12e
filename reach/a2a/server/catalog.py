"""What the gateway knows of the agents: the registry's records and each agent's handlers, cached.

Cards and calls read a :class:`Catalog`, never the registry directly: the list of agents is
fetched at most once per :data:`AGENTS_TTL_S` (concurrent readers share one registry call, and a
caller that can take a slightly old list gets it at once while it is refreshed), and an agent's
handlers are asked of its host once per incarnation (keyed by agent ID and epoch: a restart may
bring a new class). So a new agent appears, and a stopped one goes, within about a second, and
no request pays for a registry call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from reach import clock
from reach.errors import InvalidPayload, ReachError
from reach.ports.hosts import HostPort
from reach.ports.registry import RegistryPort
from reach.records import AgentRecord, AgentStatus
from reach.schemas import SchemaRef

log = logging.getLogger("reach.a2a.server.catalog")

#: How long the list of agents stays fresh (seconds).
AGENTS_TTL_S = 1.0


def _validator(json_schema: Mapping[str, Any] | None) -> Any:
    if json_schema is None:
        return None
    return Draft202012Validator(json_schema)


@dataclass(frozen=True)
class HandlerInfo:
    """One handler of an agent, as its host describes it.

    Attributes:
        schema: What it reads (``name@MAJOR.MINOR``).
        returns: What it replies (None when it did not say).
        streaming: It streams its reply in chunks.
        reads_text: It reads :class:`reach.Text` (A2A text parts go to it).
        json_schema: The JSON schema of what it reads (None for a handler of plain dicts).
    """

    schema: str
    returns: str | None = None
    streaming: bool = False
    reads_text: bool = False
    json_schema: dict[str, Any] | None = None
    _validator: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_validator", _validator(self.json_schema))

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> HandlerInfo:
        """Reads one entry of :meth:`reach.ports.hosts.HostPort.describe`."""
        return cls(str(doc["schema"]), doc.get("returns"), bool(doc.get("streaming")),
                   bool(doc.get("reads_text")), doc.get("json_schema"))

    def reads(self, declared: str) -> bool:
        """Whether a payload declared as ``declared`` is for this handler (same name and
        major).

        Raises:
            SchemaError: ``declared`` is malformed.
        """
        got, mine = SchemaRef.parse(declared), SchemaRef.parse(self.schema)
        return (got.name, got.major) == (mine.name, mine.major)

    def check(self, payload: Mapping[str, Any]) -> None:
        """Validates a payload against the handler's JSON schema (the agent validates again
        with its model).

        Raises:
            InvalidPayload: it does not match (at most five problems named).
        """
        if self._validator is None:
            return
        problems = [f"{'.'.join(str(p) for p in e.absolute_path) or '(payload)'}: {e.message}"
                    for e in self._validator.iter_errors(payload)]
        if problems:
            raise InvalidPayload(f"payload does not match {self.schema}: "
                                 + "; ".join(problems[:5]),
                                 suggestion="send a data part that matches the schema in the "
                                            "agent's card",
                                 details={"declared": self.schema, "errors": len(problems)})


@dataclass(frozen=True)
class AgentView:
    """An agent as the gateway shows it: its record and its handlers.

    Attributes:
        record: The registry's record.
        handlers: Its handlers; empty when its host could not be asked.
    """

    record: AgentRecord
    handlers: tuple[HandlerInfo, ...] = ()

    @property
    def agent_id(self) -> str:
        """The agent's ID."""
        return self.record.agent_id

    @property
    def streaming(self) -> bool:
        """Whether a handler of it streams."""
        return any(h.streaming for h in self.handlers)

    @property
    def reads_text(self) -> bool:
        """Whether a handler of it reads text."""
        return any(h.reads_text for h in self.handlers)


class Catalog:
    """The agents and their handlers, cached (see the module's docstring).

    Args:
        registry: The registry.
        host: The port of a host by name.
        ttl_s: How long the list of agents stays fresh.
    """

    def __init__(self, registry: RegistryPort, host: Callable[[str], HostPort],
                 ttl_s: float = AGENTS_TTL_S) -> None:
        self._registry = registry
        self._host = host
        self._ttl_s = ttl_s
        self._agents: dict[str, AgentRecord] | None = None
        self._expires = 0.0
        self._refresh: asyncio.Task[dict[str, AgentRecord]] | None = None
        # Invariant: keyed by (agent ID, epoch); an entry is never stale for its key.
        self._handlers: dict[tuple[str, int], tuple[HandlerInfo, ...]] = {}

    async def agents(self, *, fresh: bool = True) -> dict[str, AgentRecord]:
        """The agents to show (registered with a host, not offline), by ID.

        Args:
            fresh: Wait for a list no older than the TTL; otherwise an expired list is served
                at once while it is refreshed.

        Raises:
            ReachError: the registry could not be asked (and no list was ever fetched).
        """
        current = self._agents
        if current is not None and clock.monotonic() < self._expires:
            return current
        refresh = self._refreshing()
        if current is not None and not fresh:
            return current
        return await asyncio.shield(refresh)

    def _refreshing(self) -> asyncio.Task[dict[str, AgentRecord]]:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._fetch())
            self._refresh.add_done_callback(_quiet)
        return self._refresh

    async def _fetch(self) -> dict[str, AgentRecord]:
        records = await self._registry.agents()
        self._agents = {r.agent_id: r for r in records
                        if r.host and r.status is not AgentStatus.OFFLINE}
        self._expires = clock.monotonic() + self._ttl_s
        live = {(r.agent_id, r.epoch) for r in self._agents.values()}
        for key in [k for k in self._handlers if k not in live]:
            del self._handlers[key]
        return self._agents

    async def view(self, agent_id: str, *, fresh: bool = False) -> AgentView | None:
        """One agent, or None when no such agent is registered (an agent missing from an old
        list is looked for in a fresh one before None is answered)."""
        record = (await self.agents(fresh=fresh)).get(agent_id)
        if record is None and not fresh:
            record = (await self.agents(fresh=True)).get(agent_id)
        if record is None:
            return None
        return (await self._views([record]))[0]

    async def views(self) -> list[AgentView]:
        """Every agent to show, sorted by ID."""
        records = sorted((await self.agents()).values(), key=lambda r: r.agent_id)
        return await self._views(records)

    async def _views(self, records: list[AgentRecord]) -> list[AgentView]:
        missing: dict[str, list[AgentRecord]] = {}
        for record in records:
            if (record.agent_id, record.epoch) not in self._handlers:
                missing.setdefault(record.host, []).append(record)
        if missing:
            await asyncio.gather(*(self._describe(h, rs) for h, rs in missing.items()))
        return [AgentView(r, self._handlers.get((r.agent_id, r.epoch), ())) for r in records]

    async def _describe(self, host: str, records: list[AgentRecord]) -> None:
        try:
            docs = await self._host(host).describe([r.agent_id for r in records])
        except ReachError as exc:  # shown without handlers until its host answers
            log.warning("could not describe the agents of host %s: %s", host, exc)
            return
        for record in records:
            if record.agent_id in docs:
                self._handlers[(record.agent_id, record.epoch)] = tuple(
                    HandlerInfo.from_doc(d) for d in docs[record.agent_id])


def _quiet(task: asyncio.Future[Any]) -> None:
    """Reads a background refresh's outcome (its waiters, if any, see the failure)."""
    if not task.cancelled() and task.exception() is not None:
        log.info("refreshing the list of agents failed: %s", task.exception())


__all__ = ["AGENTS_TTL_S", "AgentView", "Catalog", "HandlerInfo"]
