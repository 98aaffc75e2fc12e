"""The ``reach`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from reach.names import DEFAULT_SESSIONS


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




def _audit(args: argparse.Namespace) -> int:
    from reach import audit
    from reach.errors import StorageError

    try:
        if args.action == "verify":
            verdict = audit.verify(args.path)
            if verdict.ok:
                print(f"audit log intact: {verdict.records} records")
                return 0
            print(f"audit log TAMPERED: the first broken record is #{verdict.first_broken} "
                  f"(of {verdict.records})")
            return 1
        for rec in audit.records(args.path, args.trace, args.agent):
            print(json.dumps(rec, ensure_ascii=False, sort_keys=True))
        return 0
    except StorageError as exc:
        print(f"reach audit: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``reach`` console command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="reach", description="reach: multi-agent runtime on Ray")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the demo (starts a local Ray unless --address)")
    demo.add_argument("--address", default=None, help="Ray cluster address, e.g. auto")
    demo.add_argument("--protocol-only", action="store_true", help="skip the Ray part")
    audit = sub.add_parser("audit", help="verify or show the audit log")
    audit.add_argument("action", choices=["verify", "show"])
    audit.add_argument("--path", default=DEFAULT_SESSIONS, help="the session store database")
    audit.add_argument("--trace", default=None, help="show one trace's records")
    audit.add_argument("--agent", default=None, help="show one agent's records")
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "audit":
        return _audit(args)
    from reach import __version__

    print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
