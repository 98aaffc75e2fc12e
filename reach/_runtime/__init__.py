"""The runtime's internals: how envelopes move (transport), where agents are (directory), how a
host runs a handler (runner), how a supervisor runs tasks (tasks), where hosts go (spawner), the
session store's client (store), metrics, and the names of reach's processes.

Nothing here is public API: it talks to the cluster only through :mod:`reach.ports`.
"""
