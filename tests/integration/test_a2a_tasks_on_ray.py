"""A2A tasks in reach's session store on a real Ray: shared by gateway replicas on two nodes, and
still there after the store's process is killed and Ray restarts it."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import Any

import pytest
import ray
from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import ListTasksRequest, Task, TaskState, TaskStatus
from ray_helpers import wait_until

import reach
from reach.a2a.server.task_store import ReachTaskStore

pytestmark = pytest.mark.integration

WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
T0 = 1_760_000_000 * 10**9


class Person(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def a_task(task_id: str, state: int = WORKING, at: int = T0) -> Task:
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    status.timestamp.FromNanoseconds(at)
    return Task(id=task_id, context_id="ctx", status=status)


@ray.remote(num_cpus=0, resources={"node_b": 1})
def replica_on_node_b(cluster: Any, owner: str, task_id: str, save: bytes | None,
                      ) -> tuple[str, bytes | None]:
    """A gateway replica on the other node: saves a task (if given), then reads one back."""
    # Imported here: what this function names at module level would be pickled with it.
    from a2a.server.context import ServerCallContext
    from a2a.types.a2a_pb2 import Task
    from test_a2a_tasks_on_ray import Person

    from reach.a2a.server.task_store import ReachTaskStore

    async def main() -> bytes | None:
        store = ReachTaskStore(cluster.a2a_tasks())
        context = ServerCallContext(user=Person(owner))
        if save is not None:
            await store.save(Task.FromString(save), context)
        task = await store.get(task_id, context)
        return None if task is None else task.SerializeToString()

    return ray.get_runtime_context().get_node_id(), asyncio.run(main())


async def test_a_task_saved_by_one_replica_is_read_and_updated_by_another_on_another_node(
    rt: Any,
) -> None:
    owner = f"owner-{uuid.uuid4().hex}"
    here = ReachTaskStore(rt.cluster.a2a_tasks())
    context = ServerCallContext(user=Person(owner))
    await here.save(a_task("shared-1"), context)

    node, seen = await replica_on_node_b.remote(rt.cluster, owner, "shared-1", None)
    assert node != ray.get_runtime_context().get_node_id()
    assert seen == a_task("shared-1").SerializeToString()

    done = a_task("shared-1", COMPLETED, T0 + 1)
    _, seen = await replica_on_node_b.remote(rt.cluster, owner, "shared-1",
                                             done.SerializeToString())
    assert seen == done.SerializeToString()
    assert await here.get("shared-1", context) == done
    listed = await here.list(ListTasksRequest(status=COMPLETED), context)
    assert [t.id for t in listed.tasks] == ["shared-1"]

    _, seen = await replica_on_node_b.remote(rt.cluster, f"{owner}-other", "shared-1", None)
    assert seen is None  # another owner's replica does not see it


async def test_tasks_survive_the_store_being_killed_and_restarted_by_ray(rt: Any) -> None:
    owner = f"owner-{uuid.uuid4().hex}"
    context = ServerCallContext(user=Person(owner))
    first = ReachTaskStore(rt.cluster.a2a_tasks())
    for n in range(5):
        await first.save(a_task(f"kept-{n}", at=T0 + n), context)

    pid = (await rt.cluster.sessions().stats())["pid"]
    os.kill(pid, signal.SIGKILL)
    # Made while the store dies and restarts: it fails at most into a retry, never for good.
    await first.save(a_task("kept-late", at=T0 + 10), context)
    await wait_until(lambda: _restarted(rt, pid), timeout_s=60)

    second = ReachTaskStore(rt.cluster.a2a_tasks())  # a replica started after the restart
    page = await second.list(ListTasksRequest(page_size=4), context)
    rest = await second.list(ListTasksRequest(page_size=4, page_token=page.next_page_token),
                             context)
    assert [t.id for t in [*page.tasks, *rest.tasks]] == [
        "kept-late", "kept-4", "kept-3", "kept-2", "kept-1", "kept-0"]
    assert (page.total_size, rest.next_page_token) == (6, "")
    assert await second.get("kept-0", context) == a_task("kept-0", at=T0)
    assert await rt.cluster.sessions().integrity() == "ok"


async def _restarted(rt: Any, old_pid: int) -> bool:
    try:
        return bool((await rt.cluster.sessions().stats())["pid"] != old_pid)
    except reach.AgentUnavailable:
        return False
