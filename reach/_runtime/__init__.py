"""The runtime's internals: how envelopes move (transport), where agents are (directory), what a
process talks with (link) and sends through (courier, the one send path), how a host runs a
handler (runner) and answers the session calls every agent answers (session_calls), how a
supervisor runs tasks (tasks), where hosts go (spawner; a packed pool's hosts: pool_hosts), the
session store's client (store), calls nobody awaits (unawaited), poison messages as callers report
them (and the answers that clear them) and hosts refuse them (poison), metrics, and the names of
reach's processes.

Nothing here is public API: it talks to the cluster only through :mod:`reach.ports`, and
imports nothing of the client's layer above it (client, sessions, supervision, context).
"""
