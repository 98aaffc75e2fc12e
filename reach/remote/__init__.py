"""Remote agents: an ordinary :class:`reach.Agent` run outside the cluster, over one WebSocket.

:mod:`reach.remote.wire` is the wire (frames, the signed hello, close codes), shared with the
gateway; :mod:`reach.remote.client` runs an agent class as a remote agent
(:func:`~reach.remote.client.serve_agent`, or ``reach connect``). Nothing here imports Ray: a
remote agent needs reach's protocol modules and ``websockets`` only.
"""
