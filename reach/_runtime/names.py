"""The names of reach's Ray actors, in one place (every process looks the others up by them)."""

from __future__ import annotations

from reach.errors import ConfigError
from reach.placement import OWN_HOST_PREFIX, POOL_PREFIX

#: The Ray namespace of every reach actor.
NAMESPACE = "reach"
#: The registry (one per cluster).
REGISTRY_NAME = "reach.registry"
#: The session store (one per cluster).
STORE_NAME = "reach.sessions"
#: The trace store (one per cluster): the recent finished spans.
TRACES_NAME = "reach.traces"
#: Where the embedded default keeps the session store's database, under the current folder.
DEFAULT_SESSIONS = ".reach/sessions.db"
#: The custom resource a cluster's head node gives (see cluster.yaml): where it exists, the
#: session store is pinned to the node that has it, so that its SQLite file stays put.
SESSION_RESOURCE = "reach_state"
#: Prefixes of host names (see :mod:`reach.placement`): a host of its own (a dedicated agent's,
#: or a warm spare, which a pool whose hosts are all dead may take for several of its agents) is
#: ended once it holds no agent; a pool's named hosts last.
DEDICATED_PREFIX = OWN_HOST_PREFIX

#: Prefix of a driver's reply inbox.
INBOX_PREFIX = "reach.inbox."
#: Prefix of a driver's client ID (the sender of what a driver sends).
DRIVER_PREFIX = "driver:"
#: Prefix of the principals that calls through the A2A gateway enter reach as
#: (``a2a:<token name>``): the ACL and the audit log see them as callers of their own.
GATEWAY_PREFIX = "a2a:"
#: Prefix of supervisor names.
SUPERVISOR_PREFIX = "reach.sup."
#: Prefix of the hosts of remote agents (one per gateway replica: ``reach.remote.<replica>``).
REMOTE_PREFIX = "reach.remote."


def is_endpoint(principal: str) -> bool:
    """Whether a sender is one of reach's own processes (a driver, host, supervisor, session
    store or remote agents' host), which sign as themselves and are not agents of the
    registry. Which IDs agents may not take is another, wider rule: :func:`is_reserved`."""
    return principal.startswith((DRIVER_PREFIX, SUPERVISOR_PREFIX, DEDICATED_PREFIX, POOL_PREFIX,
                                 STORE_NAME, GATEWAY_PREFIX, REMOTE_PREFIX))


#: What no agent may be called (compared without case): every name and principal of reach's own
#: processes is under one of these (``reach.`` holds the registry, the session store, hosts,
#: pools, supervisors, inboxes and remote hosts; drivers and the gateway's callers sign as
#: ``driver:`` and ``a2a:``), and ``cap:`` addresses a capability, on the wire and in the ACL.
RESERVED_PREFIXES: tuple[str, ...] = (f"{NAMESPACE}.", DRIVER_PREFIX, GATEWAY_PREFIX, "cap:")


def reserved_prefix(agent_id: str) -> str | None:
    """The reserved prefix (of :data:`RESERVED_PREFIXES`) ``agent_id`` starts with, or None."""
    folded = agent_id.casefold()
    return next((p for p in RESERVED_PREFIXES if folded.startswith(p)), None)


def is_reserved(agent_id: str) -> bool:
    """Whether an agent may not be called ``agent_id`` (see :data:`RESERVED_PREFIXES`)."""
    return reserved_prefix(agent_id) is not None


def check_agent_ids(*agent_ids: str) -> None:
    """Refuses agent IDs reserved for reach's own processes: the one rule every entry that
    names an agent applies (spawn, a remote agent's hello, an A2A proxy, virtual agents).

    Raises:
        ConfigError: an ID starts with a reserved prefix (``details``: the first such
            ``agent_id`` and its ``prefix``).
    """
    for agent_id in agent_ids:
        prefix = reserved_prefix(agent_id)
        if prefix is not None:
            raise ConfigError(f"agent ID {agent_id!r} uses the prefix {prefix!r}, reserved for "
                              "reach's own processes", suggestion="choose another agent ID",
                              details={"setting": "agent_id", "agent_id": agent_id,
                                       "prefix": prefix})


def supervisor_name(name: str) -> str:
    """The actor name of the supervisor called ``name``."""
    return f"{SUPERVISOR_PREFIX}{name}"


__all__ = [
    "DEDICATED_PREFIX",
    "DEFAULT_SESSIONS",
    "DRIVER_PREFIX",
    "GATEWAY_PREFIX",
    "INBOX_PREFIX",
    "NAMESPACE",
    "POOL_PREFIX",
    "REGISTRY_NAME",
    "REMOTE_PREFIX",
    "RESERVED_PREFIXES",
    "SESSION_RESOURCE",
    "STORE_NAME",
    "SUPERVISOR_PREFIX",
    "TRACES_NAME",
    "check_agent_ids",
    "is_endpoint",
    "is_reserved",
    "reserved_prefix",
    "supervisor_name",
]
