"""The version of reach (one place; ``reach.__version__`` and the gateway's cards read it)."""

__version__ = "0.3.1"
