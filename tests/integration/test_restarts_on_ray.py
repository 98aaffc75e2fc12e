"""Restarts that do not wait for a process, on a real Ray: a dedicated agent takes a warm spare,
a packed agent moves to its pool's live host while the dead one is started again under its name,
a pool with no live host takes a warm spare for its agents while its hosts are started again, a
closing driver's notifications still leave, a restarted child supervisor replaces its orphan,
and epochs outlive a registry restart.

The Ray cluster is shared by the whole integration session: every agent, pool and supervisor
here has a name of its own (``rr-`` prefix), and each test stops what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import pytest
import ray
from ray_helpers import wait_until
from support_agents import Info, Life, Recorder, Text, Worker

import reach
from reach import ChildSpec, Intensity, SupervisorSpec
from reach._runtime.names import (
    INBOX_PREFIX,
    NAMESPACE,
    POOL_PREFIX,
    REGISTRY_NAME,
    supervisor_name,
)
from reach._runtime.spawner import shape_key
from reach.placement import OWN_HOST_PREFIX

pytestmark = pytest.mark.integration

FAST = reach.Backoff(base_s=0.01, cap_s=0.05)
#: Restarts in these tests are few and deliberate: the intensity is never what stops them.
GENEROUS = Intensity(20, 10)


def tree(name: str, *children: ChildSpec | SupervisorSpec) -> SupervisorSpec:
    return SupervisorSpec(name, children=children, intensity=GENEROUS, backoff=FAST, seed=1)


def pool_hosts(pool: str, size: int) -> list[str]:
    return [f"{POOL_PREFIX}{pool}.{i}" for i in range(size)]


async def life(rt: Any, agent_id: str) -> Life:
    reply = await rt.client.request(agent_id, {}, "test.life.ask@1.0", returns=Life,
                                    timeout_ms=20_000)
    return reply.value


async def changed(rt: Any, agent_id: str, before: Life) -> Life:
    """Waits until the agent answers from a new incarnation."""

    async def new() -> Life | None:
        try:
            now = await life(rt, agent_id)
        except (reach.AgentUnavailable, reach.AgentNotFound, reach.RequestTimeout):
            return None
        return now if now.token != before.token else None

    found: Life = await wait_until(new, timeout_s=30)
    return found


async def record(rt: Any, agent_id: str) -> reach.AgentRecord:
    rec: reach.AgentRecord | None = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None, agent_id
    return rec


async def recorded(sup: Any, *children: str) -> tuple[Any, ...]:
    """The supervisor's restart records once they name every one of ``children``: a restart is
    recorded as its child's start returns, a moment after the registry shows the child back."""
    async def named() -> tuple[Any, ...] | None:
        records: tuple[Any, ...] = (await sup.status()).restarts
        return records if {r.child for r in records} >= set(children) else None

    found: tuple[Any, ...] = await wait_until(named)
    return found


async def pid_of(rt: Any, host: str) -> int:
    return int((await rt.cluster.host(host).info())["pid"])


def sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


async def running_again(rt: Any, host: str, dead_pid: int) -> dict[str, Any] | None:
    """The info of a host started again under ``host``'s name; None while only the dead one is
    known by it (or none is)."""
    rt.cluster.forget(host)  # the port cached in this driver is the dead process's
    try:
        info: dict[str, Any] = await rt.cluster.host(host).info()
    except reach.AgentUnavailable:
        return None
    return info if info["pid"] != dead_pid else None


async def stop(sup: reach.SupervisorRef) -> None:
    """Stops a supervision tree (cleanup: a tree that already ended is left as it is)."""
    with contextlib.suppress(reach.ReachError, TimeoutError):
        await asyncio.wait_for(sup.stop(), timeout=30)


def end_pool(rt: Any, pool: str, size: int) -> None:
    """Ends a pool's hosts (they outlive their agents and supervisors otherwise)."""
    for name in pool_hosts(pool, size):
        rt.cluster.forget(name)
        with contextlib.suppress(reach.AgentUnavailable):
            rt.cluster.kill(rt.cluster.host(name))


async def test_a_dedicated_agents_restart_takes_the_warm_spare_offered_for_its_shape(
    rt: Any
) -> None:
    shape = shape_key(reach.Dedicated())

    async def offered() -> list[str]:
        """The spares of the agent's shape, on any node (its own node's are taken first)."""
        spares = await rt.cluster.registry().spares()
        return [h for key, hosts in spares.items() if key.endswith(f" {shape}") for h in hosts]

    sup = await rt.supervise(tree("rr-spare", ChildSpec(Worker, "rr-spare-1")))
    try:
        spares = await wait_until(offered)
        before = await life(rt, "rr-spare-1")
        # The processes running before the kill (this test's Ray runs on this machine): a
        # spare's among them. (Which spare the restart takes cannot be told ahead: one may be
        # starting on the supervisor's node, which the restart would take first.)
        running = {int(pid) for pid in os.listdir("/proc") if pid.isdigit()}
        sigkill(await pid_of(rt, (await record(rt, "rr-spare-1")).host))

        after = await changed(rt, "rr-spare-1", before)
        taken = (await record(rt, "rr-spare-1")).host
        assert after.pid in running  # a process started ahead of the restart, not for it
        assert after.pid != before.pid
        (restart,) = await recorded(sup, "rr-spare-1")
        assert restart.placement is reach.RestartPlacement.DEDICATED

        async def refilled() -> list[str]:  # a new spare of the shape takes the taken one's place
            return [h for h in await offered() if h not in spares]

        assert await wait_until(refilled)

        async def withdrawn() -> bool:  # the taken one is offered no more (the registry learns
            return taken not in await offered()  # it from the host's next heartbeat, at worst)

        await wait_until(withdrawn)
    finally:
        await stop(sup)


async def test_a_packed_agent_whose_host_is_killed_moves_to_its_pools_live_host_at_once(
    rt: Any
) -> None:
    pool = "rr-move"
    sup = await rt.supervise(tree(
        pool, ChildSpec(Worker, "rr-move-1", placement=reach.Packed(pool=pool, size=2))))
    try:
        before = await life(rt, "rr-move-1")
        dead = (await record(rt, "rr-move-1")).host
        (live,) = [h for h in pool_hosts(pool, 2) if h != dead]
        live_pid = await pid_of(rt, live)
        dead_pid = await pid_of(rt, dead)
        sigkill(dead_pid)

        after = await changed(rt, "rr-move-1", before)
        assert (await record(rt, "rr-move-1")).host == live  # moved: no new process awaited
        assert after.pid == live_pid
        (restart,) = await recorded(sup, "rr-move-1")
        assert restart.placement is reach.RestartPlacement.PACKED

        # The dead host is started again under its name, empty, in the background.
        again = await wait_until(lambda: running_again(rt, dead, dead_pid))
        assert again["agents"] == {}
        assert await rt.cluster.host(dead).count() == 0
    finally:
        await stop(sup)
        end_pool(rt, pool, 2)


async def test_the_agents_of_a_pool_whose_hosts_all_died_come_back_at_once_on_a_warm_spare(
    rt: Any
) -> None:
    pool, ids = "rr-all", ["rr-all-1", "rr-all-2"]
    sup = await rt.supervise(tree(
        pool, *(ChildSpec(Worker, i, placement=reach.Packed(pool=pool, size=2)) for i in ids)))
    spare = ""
    try:
        before = {i: await life(rt, i) for i in ids}
        hosts = pool_hosts(pool, 2)
        assert {(await record(rt, i)).host for i in ids} == set(hosts)  # one on each

        async def offered() -> list[str]:  # a Packed pool's hosts have a Dedicated()'s shape
            spares = await rt.cluster.registry().spares()
            shape = shape_key(reach.Dedicated())
            return [h for k, names in spares.items() if k.endswith(f" {shape}") for h in names]

        await wait_until(offered)
        dead_pids = {h: await pid_of(rt, h) for h in hosts}
        running = {int(pid) for pid in os.listdir("/proc") if pid.isdigit()}
        for pid in dead_pids.values():  # back to back: no live host is left to move to
            sigkill(pid)

        after = {i: await changed(rt, i, before[i]) for i in ids}
        (spare,) = {(await record(rt, i)).host for i in ids}  # both on one spare
        assert spare.startswith(OWN_HOST_PREFIX)
        assert {a.pid for a in after.values()} <= running  # started ahead, not for the restart
        assert not set(dead_pids.values()) & {a.pid for a in after.values()}
        assert spare not in await offered()
        restarts = await recorded(sup, *ids)
        assert sorted(r.child for r in restarts) == ids
        assert {r.placement for r in restarts} == {reach.RestartPlacement.PACKED}
        for host, pid in dead_pids.items():  # the pool's hosts, started again meanwhile
            await wait_until(lambda host=host, pid=pid: running_again(rt, host, pid))
    finally:
        await stop(sup)
        end_pool(rt, pool, 2)
    if spare:  # its last agent stopped: the spare ended with it

        async def ended() -> bool:
            rt.cluster.forget(spare)
            try:
                await rt.cluster.host(spare).count()
            except reach.AgentUnavailable:
                return True
            return False

        await wait_until(ended)


async def test_closing_a_runtime_lets_the_notifications_it_queued_reach_the_agent(
    rt: Any
) -> None:
    agent, count = "rr-close-1", 200
    await rt.spawn(Recorder, agent, placement=reach.Packed(pool="rr-close", size=1))
    second = reach.Runtime(rt.cluster, rt.limits)  # a second driver, in this process
    try:
        for i in range(count):
            await second.client.notify(agent, Text(text=str(i)))
        assert second.transport.queued() > 0  # still in this driver when it closes
        await second.close()
        assert second.transport.queued() == 0

        reply = await rt.client.request(agent, {}, "test.whoami@1.0", returns=Info)
        assert sorted(reply.value.seen, key=int) == [str(i) for i in range(count)]
    finally:
        rt.cluster.kill(rt.cluster.endpoint(f"{INBOX_PREFIX}{second.driver_id}"))
        with contextlib.suppress(reach.ReachError):
            await rt.stop(agent)
        end_pool(rt, "rr-close", 1)


async def test_a_killed_child_supervisor_is_restarted_and_replaces_its_orphaned_packed_child(
    rt: Any
) -> None:
    inner = SupervisorSpec("rr-nest-in", intensity=GENEROUS, backoff=FAST, children=[
        ChildSpec(Worker, "rr-nest-1", placement=reach.Packed(pool="rr-nest", size=1))])
    sup = await rt.supervise(tree("rr-nest", inner))
    try:
        before = await life(rt, "rr-nest-1")
        first = await record(rt, "rr-nest-1")
        # Its process ends; its agent lives on, an orphan on its pool host.
        ray.kill(ray.get_actor(supervisor_name("rr-nest-in"), namespace=NAMESPACE))

        async def parent_restarted_it() -> bool:
            return [r.child for r in (await sup.status()).restarts] == ["rr-nest-in"]

        await wait_until(parent_restarted_it)
        (restart,) = (await sup.status()).restarts
        assert restart.placement is reach.RestartPlacement.SUPERVISOR
        await changed(rt, "rr-nest-1", before)  # the orphan was replaced by a new incarnation
        now = await record(rt, "rr-nest-1")
        assert now.status is reach.AgentStatus.ONLINE
        assert now.epoch > first.epoch
        assert now.host == first.host  # the same pool host: only the agent was replaced
        reply = await rt.client.request("rr-nest-1", Text(text="hi"), returns=Text)
        assert reply.value.text == "rr-nest-1:hi"
    finally:
        await stop(sup)
        end_pool(rt, "rr-nest", 1)


async def test_an_agents_epoch_grows_across_a_registry_restart_that_forgot_it(rt: Any) -> None:
    sup = await rt.supervise(tree("rr-epoch", ChildSpec(Worker, "rr-epoch-1")))
    try:
        before = await life(rt, "rr-epoch-1")
        old = await record(rt, "rr-epoch-1")
        pid = await pid_of(rt, old.host)
        registry = rt.cluster.registry()
        incarnation = (await registry.stats())["incarnation"]
        # Ray restarts the registry, empty; the agent's host dies before it could re-register
        # the agent there, so only its supervisor remembers the epoch.
        ray.kill(ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE), no_restart=False)
        sigkill(pid)

        await changed(rt, "rr-epoch-1", before)

        async def online() -> reach.AgentRecord | None:
            rec = await registry.lookup("rr-epoch-1")
            return rec if rec is not None and rec.status is reach.AgentStatus.ONLINE else None

        new = await wait_until(online)
        assert (await registry.stats())["incarnation"] != incarnation  # it did restart
        assert new.host != old.host
        assert new.epoch > old.epoch
    finally:
        await stop(sup)

        async def recovered() -> bool:  # later tests find a registry that knows what is unknown
            return await rt.cluster.registry().lookup("rr-epoch-no-such-agent") is None

        await wait_until(recovered)
