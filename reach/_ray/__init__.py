"""reach on Ray: the one package of ``reach`` that imports Ray (``actors/`` aside).

It implements :class:`reach.ports.cluster.Cluster`: reach's processes are Ray actors (the classes
of ``actors/``, made remote here), a port is a typed adapter of an actor handle
(:mod:`reach._ray.ports`), and every Ray error is translated into reach's error tree in one
place, :func:`~reach._ray.calls.translate`. It also starts or joins
Ray for :func:`reach.init`, feeds ``ray.util.metrics``, and answers the questions ``reach status``
asks of a running cluster.

It knows no feature: a feature's own process is a class the feature gives
(:meth:`RayCluster.start_process`), and what is served over HTTP is an application class the
feature gives (:meth:`RayCluster.serve`, on Ray Serve).
"""

from reach._ray.calls import translate
from reach._ray.cluster import RayCluster
from reach._ray.process import (
    check_address,
    is_initialized,
    job_env,
    join,
    metric_types,
    shutdown,
    start,
)
from reach._ray.serving import serve_environment, set_server_defaults
from reach._runtime.metrics import export_through

export_through(metric_types)

__all__ = ["RayCluster", "check_address", "is_initialized", "job_env", "join", "metric_types",
           "serve_environment", "set_server_defaults", "shutdown", "start", "translate"]
