"""The port of a running supervisor."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from reach.ports.data import ErrorDoc
from reach.ports.endpoint import Endpoint
from reach.records import SupervisorStatus, TaskResult
from reach.specs import TaskSpec


class SupervisorPort(Endpoint, Protocol):
    """A running supervisor."""

    def start(self) -> Awaitable[list[str]]:
        """Starts its children in order; the order."""
        ...

    def stop(self) -> Awaitable[list[str]]:
        """Stops its children in reverse order; the order."""
        ...

    def wait_gave_up(self) -> Awaitable[ErrorDoc | None]:
        """Returns when it ends: None if stopped, the error's info if it gave up."""
        ...

    def submit(self, spec: TaskSpec) -> Awaitable[str]:
        """Starts a task it owns; its ID."""
        ...

    def wait_task(self, task_id: str) -> Awaitable[TaskResult]:
        """Waits for a task's end."""
        ...

    def cancel_task(self, task_id: str) -> Awaitable[TaskResult]:
        """Cancels a task and its outstanding sub-requests."""
        ...

    def status(self) -> Awaitable[SupervisorStatus]:
        """Its state, children, restarts and tasks, with its subtree."""
        ...


__all__ = ["SupervisorPort"]
