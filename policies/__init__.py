"""Pure decisions of reach: restart strategies, retry, routing choice, capability matching.

Nothing here imports ray or does I/O; time and randomness are passed in, so every policy is a pure
function that a unit test exercises in microseconds. Of reach, policies know the protocol core
only (errors, records): import-linter's contracts keep it so.
"""

# Load order, not a dependency: policies build on reach's protocol core and reach's runtime builds
# on policies, so whichever package a program imports first, reach's own ``__init__`` must run
# first (it loads its core, then policies, then the runtime, in that order). No module of
# policies imports anything of reach but the core.
import reach  # noqa: F401
