"""Where agents are: a per-process cache of routes and capability holders, fed by the registry.

The registry is never in the message path: a client resolves an agent ID to its host here (cached
for ROUTE_TTL_S, dropped at once when the host is found dead or no longer holds the agent), and
a capability to its best holders (cached for HOLDERS_TTL_S, so loads stay fresh). While an agent
restarts, a lookup waits for it rather than failing, up to the caller's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray.exceptions import RayError

from reach.errors import AgentNotFound, AgentUnavailable, NoCapableAgent, ReachError
from reach.protocol import Envelope
from reach.transport import translate_ray_error

#: How long a resolved agent ID stays cached (seconds).
ROUTE_TTL_S = 30.0
#: How long a capability's holder list stays cached (seconds); loads are refreshed this often.
HOLDERS_TTL_S = 1.0
#: How many of the best holders a pick considers (broadcast asks for all of them).
PICK_FROM = 64
#: First interval at which a held message polls for its restarting agent (doubles to 0.25 s).
HOLD_POLL_S = 0.02
#: Longest wait for the registry when the caller has no deadline.
REGISTRY_WAIT_S = 10.0
#: How long a notification waits for a restarting agent before it becomes a dead letter.
NOTIFY_HOLD_S = 5.0

log = logging.getLogger("reach.directory")


@dataclass(frozen=True)
class AgentInfo:
    """What the registry knows of an agent.

    Attributes:
        agent_id: The agent's ID.
        capabilities: Its capability tags.
        description: Its natural-language self-description.
        host: Name of the host actor it lives in.
        node: ID of the Ray node of that host.
        status: ``online``, ``busy`` or ``offline``.
        load: Requests in flight, as last heartbeat.
        epoch: Incarnation number, larger after each restart.
    """

    agent_id: str
    capabilities: tuple[str, ...]
    description: str
    host: str
    node: str
    status: str
    load: int
    epoch: int

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> AgentInfo:
        """Builds an AgentInfo from a registry record."""
        return cls(
            rec["agent_id"], tuple(rec["capabilities"]), rec["description"], rec["host"],
            rec["node"], rec["status"], rec["load"], rec["epoch"],
        )


class Directory:
    """Per-process cache of routes (agent ID -> host) and capability holders, fed by the registry.

    Args:
        registry: Handle of the Registry actor.
        clock: Monotonic clock, injectable for tests.
    """

    def __init__(self, registry: Any, clock: Any = time.monotonic) -> None:
        self.registry = registry
        self._clock = clock
        self._routes: dict[str, tuple[str, float]] = {}
        self._principals: dict[str, tuple[tuple[str, ...], float]] = {}
        self._holders: dict[tuple[str, str | None, int | None],
                            tuple[list[AgentInfo], list[str], float]] = {}
        self.lookups = 0

    async def route(self, agent_id: str, deadline: float | None = None) -> str:
        """The host endpoint of ``agent_id``; while it restarts, waits for it (until ``deadline``).

        Raises:
            AgentNotFound: the registry has no such agent.
            AgentUnavailable: the agent is offline, or still restarting when waiting longer would
                pass ``deadline`` (epoch seconds).
        """
        hit = self._routes.get(agent_id)
        now = self._clock()
        if hit is not None and hit[1] > now:
            return hit[0]
        rec = await self._lookup_settled(agent_id, deadline)
        if rec is None:
            raise AgentNotFound(
                f"no agent {agent_id!r} is registered",
                suggestion="check the ID, or discover agents by capability",
                details={"agent_id": agent_id},
            )
        if rec["status"] == "recovering":
            raise AgentUnavailable(
                f"agent {agent_id!r} is not re-registered yet: the registry restarted and is "
                "rebuilding its table from the hosts' heartbeats",
                suggestion="retry within a heartbeat interval",
                details={"agent_id": agent_id},
            )
        if rec["status"] == "offline":
            raise AgentUnavailable(
                f"agent {agent_id!r} is offline (host {rec['host']} missed its heartbeats)",
                details={"agent_id": agent_id, "host": rec["host"]},
            )
        self._routes[agent_id] = (rec["host"], self._clock() + ROUTE_TTL_S)
        return str(rec["host"])

    async def _lookup_settled(self, agent_id: str, deadline: float | None) -> Any:
        """Looks an agent up, holding while its supervisor restarts it."""
        delay = HOLD_POLL_S
        while True:
            self.lookups += 1
            rec = await self._ask(self.registry.lookup.remote(agent_id), deadline)
            if rec is None or rec["status"] != "restarting":
                return rec
            if deadline is None or time.time() + delay >= deadline:
                raise AgentUnavailable(
                    f"agent {agent_id!r} is restarting and is not back before the request's "
                    "deadline",
                    suggestion="retry later, or give the request a longer timeout",
                    details={"agent_id": agent_id, "restarting": True},
                )
            await asyncio.sleep(delay)  # poll: the registry does not push
            delay = min(delay * 2, 0.25)

    async def _ask(self, ref: Any, deadline: float | None) -> Any:
        """Awaits a registry call, no longer than the caller's deadline (or REGISTRY_WAIT_S)."""
        wait = REGISTRY_WAIT_S if deadline is None else max(deadline - time.time(), 0.001)
        try:
            return await asyncio.wait_for(asyncio.ensure_future(ref), wait)
        except TimeoutError:
            raise AgentUnavailable(
                f"the registry did not answer within {wait:.1f} s (is it restarting?)",
                suggestion="retry shortly", details={"waited_s": round(wait, 3)},
            ) from None
        except RayError as exc:
            raise translate_ray_error(exc, "reach.registry") from exc

    def known_principal(self, agent_id: str) -> tuple[str, ...] | None:
        """The cached capabilities of a registered agent; None when not cached (ask
        :meth:`principal`)."""
        hit = self._principals.get(agent_id)
        if hit is not None and hit[1] > self._clock():
            return hit[0]
        return None

    async def principal(self, agent_id: str) -> tuple[str, ...] | None:
        """The capabilities of a registered agent (in any state), or None if none has that ID.

        Known principals are cached like routes; unknown ones are asked again next time.
        """
        cached = self.known_principal(agent_id)
        if cached is not None:
            return cached
        self.lookups += 1
        now = self._clock()
        rec = await self._ask(self.registry.lookup.remote(agent_id), None)
        if rec is None:
            return None
        caps = tuple(rec.get("capabilities", ()))
        if "capabilities" in rec:  # not a placeholder of a registry that is rebuilding
            self._principals[agent_id] = (caps, now + ROUTE_TTL_S)
        return caps

    def dead_letter(self, envelopes: list[Envelope], error: ReachError) -> None:
        """Records envelopes that could not be delivered, and why (fire and forget)."""
        letters = [{"msg_id": e.msg_id, "msg_type": e.msg_type.value, "sender": e.sender,
                    "receiver": e.receiver, "trace_id": e.trace_id, "code": error.code,
                    "reason": error.message, "at": time.time()} for e in envelopes]
        for e in envelopes:
            log.warning("dead letter: %s %s from %s to %s: %s (trace %s)", e.msg_type.value,
                        e.msg_id, e.sender, e.receiver, error.message, e.trace_id)
        if letters:
            self.registry.dead_letter.remote(letters)

    def learn(self, info: AgentInfo) -> None:
        """Caches a route found by discovery (of an online agent only)."""
        if info.status == "online":
            self._routes[info.agent_id] = (info.host, self._clock() + ROUTE_TTL_S)

    def drop(self, agent_id: str) -> None:
        """Forgets the route of one agent (its host did not have it)."""
        self._routes.pop(agent_id, None)

    def drop_endpoint(self, endpoint: str) -> None:
        """Forgets every route and holder list through a dead host."""
        for agent_id in [a for a, (host, _) in self._routes.items() if host == endpoint]:
            del self._routes[agent_id]
        self._holders.clear()

    async def holders(self, capability: str, text: str | None = None,
                      limit: int | None = PICK_FROM) -> list[AgentInfo]:
        """The ``limit`` best online holders of ``capability`` (cached for HOLDERS_TTL_S).

        Raises:
            NoCapableAgent: nobody online holds it; the error names the closest tags.
        """
        key = (capability, text, limit)
        now = self._clock()
        hit = self._holders.get(key)
        if hit is None or hit[2] <= now:
            records, close = await self._ask(
                self.registry.discover.remote(capability, text, limit), None)
            infos = [AgentInfo.from_record(r) for r in records]
            hit = self._holders[key] = (infos, close, now + HOLDERS_TTL_S)
            for info in infos:
                self.learn(info)
        infos, close, _ = hit
        if not infos:
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise NoCapableAgent(
                f"no online agent holds capability {capability!r}{hint}",
                suggestion="spawn an agent with that capability, or check the tag",
                details={"capability": capability, "close_matches": ", ".join(close)},
            )
        return infos
