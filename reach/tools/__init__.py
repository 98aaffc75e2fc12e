"""The ``reach`` command and what it shows: the demo (:mod:`~reach.tools.demo`, with the
customer-service agents of :mod:`~reach.tools.customer_service`), ``reach status``
(:mod:`~reach.tools.status`), ``reach audit`` (:mod:`~reach.tools.audit`) and the benchmarks'
chart (:mod:`~reach.tools.benchchart`, the only module that needs matplotlib)."""
