"""The names of reach's Ray actors, in one place (every process looks the others up by them)."""

from __future__ import annotations

#: The Ray namespace of every reach actor.
NAMESPACE = "reach"
#: The registry (one per cluster).
REGISTRY_NAME = "reach.registry"
#: The session store (one per cluster).
STORE_NAME = "reach.sessions"
#: Where the embedded default keeps the session store's database, under the current folder.
DEFAULT_SESSIONS = ".reach/sessions.db"
#: The custom resource a cluster's head node gives (see cluster.yaml): where it exists, the
#: session store is pinned to the node that has it, so that its SQLite file stays put.
SESSION_RESOURCE = "reach_state"
#: Where the embedded default keeps the deployment's keyring, under the current folder.
DEFAULT_KEYRING = ".reach/keyring.json"
#: Prefixes of host names: a dedicated host lives and dies with its one agent; pool hosts last.
DEDICATED_PREFIX = "reach.host."
POOL_PREFIX = "reach.pool."


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
    registry."""
    return principal.startswith((DRIVER_PREFIX, SUPERVISOR_PREFIX, DEDICATED_PREFIX, POOL_PREFIX,
                                 STORE_NAME, GATEWAY_PREFIX, REMOTE_PREFIX))


def supervisor_name(name: str) -> str:
    """The actor name of the supervisor called ``name``."""
    return f"{SUPERVISOR_PREFIX}{name}"


def is_dedicated(host: str) -> bool:
    """Whether a host is dedicated to one agent (and so is killed when that agent stops)."""
    return host.startswith(DEDICATED_PREFIX)
