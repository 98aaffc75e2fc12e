"""Calls nobody awaits (a spare's offer, a preload sent to a host in the background): their
outcome is read all the same, and a failure logged, not lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger("reach.spawner")


def read_later(call: Awaitable[Any], failing: str) -> None:
    """Reads the outcome of a call nobody awaits (a failure is logged as ``failing``, not
    lost)."""
    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("%s: %s", failing, future.exception())

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no event loop here (a synchronous driver): the call runs anyway
        return
    asyncio.ensure_future(call).add_done_callback(done)
