"""A whole reach cluster in one event loop, on virtual time: the runtime's logic tested in ms.

As httpx ships ``MockTransport`` and trio an ``autojump_clock``, reach ships :class:`FakeCluster`:
an implementation of :class:`~reach.ports.cluster.Cluster` whose processes (hosts, registry,
session store, supervisors, inboxes) are the real classes of ``actors/``, run as objects in the
test's own event loop. Calls between them go through the same ports as on Ray (typed adapters of
:mod:`reach.testing.ports` and :mod:`reach.testing.store_ports`), with their arguments and
results copied by pickling (as a process boundary would), and with Ray's failure semantics:
a killed process fails the calls pending on it and every watch of it at once; the registry and the
store come back empty after a restart delay (as Ray restarts them), and calls made while they
restart wait for them; a host stays dead, its name free for whoever starts it again.

:func:`run` drives a test scenario on a :class:`VirtualLoop`, whose clock jumps to the next timer
whenever nothing is ready to run: a 30-second deadline, a heartbeat expiry or a restart backoff
costs no wall time, and the runtime reads the same virtual time through :mod:`reach.clock`. The
session store keeps SQLite in memory, on the loop's own thread (no thread pool to wait for).

Example::

    def test_a_request_reaches_a_packed_agent() -> None:
        async def scenario(fake: FakeCluster) -> None:
            rt = fake.runtime()
            await rt.spawn(EchoAgent, "echo-1", placement=reach.Packed())
            reply = await rt.client.request("echo-1", Ping(text="hi"))
            assert reply.value.text == "hi"

        run(scenario)
"""

from reach._runtime.virtual_time import EPOCH, VirtualClock, VirtualLoop
from reach.testing.cluster import FakeCluster
from reach.testing.scenario import eventually, run

__all__ = ["EPOCH", "FakeCluster", "VirtualClock", "VirtualLoop", "eventually", "run"]
