"""Remote agents: an ordinary :class:`reach.Agent` run outside the cluster, over one WebSocket.

The whole dial-in feature. The agent's side: :mod:`reach.remote.wire` is the wire (frames, the
signed hello, close codes), shared with the gateway; :mod:`reach.remote.client` runs an agent
class as a remote agent (:func:`~reach.remote.client.serve_agent`, or ``reach connect``): a
remote agent needs reach's protocol modules and ``websockets`` only, no Ray. The cluster's side:
the gateway's WebSocket route (:mod:`~reach.remote.channel`, :mod:`~reach.remote.bridge`,
:mod:`~reach.remote.channel_server`), and the host of the agents connected through a replica
(:mod:`~reach.remote.host`, with :mod:`~reach.remote.runner` and :mod:`~reach.remote.replies`),
a process the replica starts and calls through its port (:mod:`~reach.remote.ports`).
"""
