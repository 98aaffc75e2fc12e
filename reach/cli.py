"""The ``reach`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``reach`` console command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="reach", description="reach: multi-agent runtime on Ray")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the demo")
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from reach import demo

        demo.run()
        return 0
    from reach import __version__

    print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
