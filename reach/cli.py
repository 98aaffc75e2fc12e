"""The ``reach`` command."""

from __future__ import annotations

import argparse
import asyncio
import sys


def _demo(args: argparse.Namespace) -> int:
    from reach import demo

    print("== envelopes: built, validated, encoded, decoded, refused ==")
    demo.run()
    if args.protocol_only:
        return 0
    import ray

    from reach import customer_service, runtime

    print("\n== customer service on Ray: a router hands questions to agents by capability ==")
    rt = runtime.init(address=args.address, log_to_driver=False)
    try:
        asyncio.run(customer_service.run(rt))
    finally:
        rt.shutdown()
        ray.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``reach`` console command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="reach", description="reach: multi-agent runtime on Ray")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the demo (starts a local Ray unless --address)")
    demo.add_argument("--address", default=None, help="Ray cluster address, e.g. auto")
    demo.add_argument("--protocol-only", action="store_true", help="skip the Ray part")
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    from reach import __version__

    print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
