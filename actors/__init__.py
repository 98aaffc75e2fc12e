"""reach's processes as plain classes (the Ray seam makes them Ray actors; the fake cluster runs
them in one loop): thin adapters that decode, call a policy, do the effect and reply."""

# Load order, not a dependency: actors build on reach's runtime and reach's seam builds on the
# actors, so whichever package a program imports first, reach's own ``__init__`` must run first
# (it loads the layers from the bottom up).
import reach  # noqa: F401
