"""Who may make which call of the registry (:mod:`actors.registry`).

The calls that change the registry are signed (:func:`reach.security.guard.signed_call`) by the
process that makes them: a host, a supervisor, a driver or a remote agents' host. The gate opens
a call's arguments (a signature that does not verify is refused, counted, measured and audited)
and says who may do what: a host registers only agents on itself (a refusal counted and audited
too); a host's agents are deregistered by that host, or by a supervisor or driver (the host
died); statuses are marked by a supervisor or driver, online and offline also by the agents' own
host; only a driver changes the ACL, and only a remote agents' host claims hello nonces.
"""

from __future__ import annotations

from typing import Any

from actors.agent_table import AgentTable
from reach._runtime.metrics import metrics
from reach._runtime.names import DRIVER_PREFIX, REGISTRY_NAME, REMOTE_PREFIX, SUPERVISOR_PREFIX
from reach._runtime.trail import AuditTrail
from reach.errors import AuthError
from reach.records import AgentStatus
from reach.security.guard import Guard, open_call

#: The processes that speak for the agents of others (a supervisor's children, a driver's).
_OVERSEERS = (SUPERVISOR_PREFIX, DRIVER_PREFIX)


class RegistryGate:
    """Opens the registry's signed calls and checks who makes them.

    Args:
        guard: Verifies the signatures (None: signing is off, every call is taken as signed).
        trail: Where refusals are audited.

    Attributes:
        refused: How many calls were refused for their signature or a foreign host.
    """

    def __init__(self, guard: Guard | None, trail: AuditTrail) -> None:
        self.guard = guard
        self.trail = trail
        self.refused = 0

    def open(self, principal: str, data: bytes, sig: Any, what: str) -> Any:
        """The arguments of a call signed by ``principal``; a refusal is audited and raised.

        Raises:
            AuthError: the signature does not verify.
        """
        try:
            return open_call(self.guard, principal, data, sig)
        except AuthError as exc:
            self.refused += 1
            metrics.count("reach_auth_refusals", 1, str(exc.details.get("reason", exc.code)))
            self.trail.record(principal, REGISTRY_NAME, capability=f"registry.{what}",
                              msg_type=what,
                              outcome=f"refused: {exc.details.get('reason', exc.code)}")
            raise

    def registers_its_own(self, host: str, entries: list[dict[str, Any]]) -> None:
        """Checks that ``host`` registers agents on itself only (a refusal is audited).

        Raises:
            AuthError: an entry names another host.
        """
        foreign = next((e for e in entries if e.get("host") != host), None)
        if foreign is not None:
            self.refused += 1
            self.trail.record(host, REGISTRY_NAME, capability="registry.register",
                              msg_type="register", outcome="refused: foreign_host")
            raise AuthError(
                f"host {host!r} may not register agents of host {foreign.get('host')!r}",
                details={"reason": "foreign_host", "principal": host})

    def may_deregister(self, principal: str, host: str) -> None:
        """Checks that ``principal`` may deregister the agents of ``host``.

        Raises:
            AuthError: it is another host.
        """
        if principal != host and not principal.startswith(_OVERSEERS):
            raise AuthError(f"{principal!r} may not deregister the agents of host {host!r}",
                            details={"reason": "foreign_host", "principal": principal})

    def may_mark(self, principal: str, agent_ids: list[str], to: AgentStatus,
                 table: AgentTable) -> None:
        """Checks that ``principal`` may set the status of agents to ``to``: a supervisor or
        driver may; a host, online or offline, if it holds every one of them (by ``table``).

        Raises:
            AuthError: it may not.
        """
        if not (principal.startswith(_OVERSEERS) or (
                to in (AgentStatus.ONLINE, AgentStatus.OFFLINE)
                and all((rec := table.get(i)) is not None and rec.host == principal
                        for i in agent_ids))):
            raise AuthError(f"{principal!r} may not change the status of agents",
                            details={"reason": "not_a_supervisor", "principal": principal})

    def may_set_acl(self, principal: str) -> None:
        """Checks that ``principal`` may change the ACL.

        Raises:
            AuthError: it is not a driver.
        """
        if not principal.startswith(DRIVER_PREFIX):
            raise AuthError(f"only a driver may change the ACL, not {principal!r}",
                            details={"reason": "not_a_driver", "principal": principal})

    def may_claim_nonces(self, principal: str) -> None:
        """Checks that ``principal`` may claim hello nonces.

        Raises:
            AuthError: it is not a remote agents' host.
        """
        if not principal.startswith(REMOTE_PREFIX):
            raise AuthError(f"only a remote agents' host may claim hello nonces, not "
                            f"{principal!r}", details={"reason": "not_a_remote_host",
                                                       "principal": principal})
