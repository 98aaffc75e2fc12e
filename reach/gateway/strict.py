"""The gateway's limits on JSON; the rules themselves are :mod:`reach.strict_json`'s.

What the gateway reads from outside (a request body, by :mod:`reach.gateway.intake`) nests at
most :attr:`~reach.gateway.options.GatewayOptions.max_json_depth` levels (at most 32), and what it
keeps in a task (a reply in a data part, checked by :func:`check_json`) at most
:data:`MAX_VALUE_DEPTH`.

Why depth is bounded so low: A2A's messages are protobuf, whose decoder takes at most 100 levels
of nested messages, and each level of a JSON object in a data part is three of them (a Value, a
Struct, a map entry) under the four or five of the task and response around it. A task holding
a data part nested 33 objects deep is made, stored and then can never be decoded again.
"""

from __future__ import annotations

from typing import Any

from reach.strict_json import check

#: Most levels of arrays and objects in a value reach puts in a data part (a reply): a task
#: holding 33 levels of objects cannot be decoded (see the module's docstring).
MAX_VALUE_DEPTH = 28


def check_json(data: Any, what: str) -> None:
    """Checks that reach's own data is JSON a task can keep: :func:`reach.strict_json.check`
    at most :data:`MAX_VALUE_DEPTH` levels deep.

    Args:
        data: The data.
        what: What it is, for the error's message (``"the agent's reply"``).

    Raises:
        CodecError: it is not (``details["path"]`` is where, ``details["rule"]`` is
            ``"json_number"``, ``"json_type"`` or ``"depth"``).
    """
    check(data, what, max_depth=MAX_VALUE_DEPTH)


__all__ = ["MAX_VALUE_DEPTH", "check_json"]
