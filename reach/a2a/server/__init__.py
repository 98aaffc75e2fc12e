"""The A2A server: reach's agents as A2A 1.0 agents, on the official ``a2a-sdk``.

:mod:`~reach.a2a.server.cards` writes agent cards from capabilities and descriptions,
:mod:`~reach.a2a.server.intake` checks JSON-RPC bodies, :mod:`~reach.a2a.server.handler` and
:mod:`~reach.a2a.server.executor` map A2A calls onto reach requests and tasks,
:mod:`~reach.a2a.server.task_store` keeps A2A tasks in the session store, and
:mod:`~reach.a2a.server.errors` carries reach's severity into A2A errors.
"""
