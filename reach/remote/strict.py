"""The wire's strict JSON: the rules of :mod:`reach.strict_json` (the one module that holds them)
under the names :mod:`reach.remote.wire` calls, and the wire's own depth limit.

A frame is parsed with non-JSON numbers kept as markers (:func:`loads`), and each part of it is
then asked for a flaw (:func:`flaw`), so that an envelope that cannot travel is refused for its
own sender alone; :mod:`reach.remote.wire` wraps what it finds in ``CodecError``.
"""

from __future__ import annotations

from reach.strict_json import NotJson, dumps, flaw, may_hold_lone_surrogates
from reach.strict_json import loads_marked as loads

#: Levels of objects and arrays an envelope (itself the first), or any other frame, may nest.
#: Real payloads nest a few levels (an A2A message with parts and metadata: 6); 64 leaves room
#: for any honest document, and keeps what reach does with an envelope afterwards (pickling it
#: for Ray, about 2 stack frames a level against Python's limit of 1,000; validating it; storing
#: it) far from any recursion limit.
DEFAULT_MAX_DEPTH = 64

__all__ = ["DEFAULT_MAX_DEPTH", "NotJson", "dumps", "flaw", "loads",
           "may_hold_lone_surrogates"]
