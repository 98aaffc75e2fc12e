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
#: Prefixes of host names: a dedicated host lives and dies with its one agent; pool hosts last.
DEDICATED_PREFIX = "reach.host."
POOL_PREFIX = "reach.pool."


def supervisor_name(name: str) -> str:
    """The actor name of the supervisor called ``name``."""
    return f"reach.sup.{name}"


def is_dedicated(host: str) -> bool:
    """Whether a host is dedicated to one agent (and so is killed when that agent stops)."""
    return host.startswith(DEDICATED_PREFIX)
