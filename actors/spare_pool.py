"""The registry's warm spares: empty hosts waiting for an agent's restart.

An empty dedicated host offers itself, with its node and shape, again with each heartbeat (so a
restarted registry learns it anew); a restart claims one of the shape it needs, on the node it
asks for if one is there, else on any node. A host taken, given agents, or gone is a spare no
more.
"""

from __future__ import annotations

from collections.abc import Callable


class SparePool:
    """The spares offered: host name -> (node, shape)."""

    def __init__(self) -> None:
        self.offered: dict[str, tuple[str, str]] = {}

    def offer(self, host: str, node: str, shape: str) -> None:
        """Adds (or renews) a host's offer."""
        self.offered[host] = (node, shape)

    def drop(self, host: str) -> None:
        """Withdraws a host's offer, if it made one."""
        self.offered.pop(host, None)

    def claim(self, shape: str, node: str | None, fresh: Callable[[str], bool]) -> str | None:
        """Takes a spare of ``shape`` for which ``fresh`` holds: on ``node`` if one is there,
        else on any node. Its name, or None."""
        fits = [h for h, (_, s) in self.offered.items() if s == shape and fresh(h)]
        if not fits:
            return None
        here = [h for h in fits if self.offered[h][0] == node]
        taken = (here or fits)[0]
        del self.offered[taken]
        return taken

    def by_place(self) -> dict[str, list[str]]:
        """The spares, as ``{"<node> <shape>": [host names]}`` (hosts sorted by name)."""
        out: dict[str, list[str]] = {}
        for host, (node, shape) in sorted(self.offered.items()):
            out.setdefault(f"{node} {shape}", []).append(host)
        return out
