"""A2A 1.0, both ways, laid out as the official ``a2a-sdk`` is.

- :mod:`reach.a2a.server`: every reach agent an A2A agent (cards, the JSON-RPC binding on the
  SDK's request handler, the executor that turns A2A messages into reach requests and tasks, the
  task store, parts and errors). The gateway (:mod:`reach.gateway`) mounts it.
- :mod:`reach.a2a.client`: a remote A2A agent as a reach agent (``rt.connect_a2a``), with the
  models it reads and answers and the mapping of A2A's tasks and errors onto reach's.
"""
