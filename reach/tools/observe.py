"""``reach observe``: the URL of the observer (:mod:`reach.observe`, a live web page of the
cluster on the gateway) with a token, the gateway started when none runs."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from reach import runtime
from reach.errors import ReachError
from reach.web.auth import token_for


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds the command to the ``reach`` parser's subcommands."""
    observe = sub.add_parser("observe", help="print the URL of the observer (a live web page "
                             "of the cluster on the gateway) with a token, starting the gateway "
                             "when none runs")
    observe.add_argument("--address", default=None, help="Ray cluster address, e.g. auto")
    observe.add_argument("--host", default="127.0.0.1",
                         help="address the HTTP proxy listens on, if the gateway is started")
    observe.add_argument("--port", type=int, default=None,
                         help="its port, if the gateway is started (default 8000)")
    observe.add_argument("--name", default="observer",
                         help="the token's name (calls with it enter reach as a2a:NAME; a "
                              "running gateway lets only its observers' names in)")


def observer_at(port: int) -> str | None:
    """The base URL of a gateway serving the observer on this cluster's HTTP port, if one does
    (its page answers, without a token)."""
    import httpx  # noqa: PLC0415 - loaded by the one command that probes HTTP

    url = f"http://127.0.0.1:{port}"
    try:
        found = httpx.get(f"{url}/observe", timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return None
    return url if found else None


def main(args: argparse.Namespace) -> int:
    """Runs ``reach observe``; returns the exit status."""
    from reach import _ray  # noqa: PLC0415 - Ray loads where a command joins it

    try:
        rt = runtime.init(address=args.address, log_to_driver=False)
    except ReachError as exc:
        print(f"reach observe: {one_line(exc)}", file=sys.stderr)
        return 2
    try:
        port = rt.cluster.http_port()
        url = observer_at(port) if port is not None else None
        if url is None:  # no gateway runs: start one
            url = rt.start_gateway(host=args.host, port=args.port, observers=(args.name,))
        guard = rt.cluster.guard()
        if guard is None:
            print(f"observer: {url}/observe  (signing is off: no token needed)")
        else:
            token = token_for(guard.keyring, args.name)
            print(f"observer: {url}/observe#token={token}")
            print(f"  token ({args.name}): {token}")
            print("  the page keeps the token in the tab and sends it only in a header; the "
                  "part after '#' never reaches a server")
        return serve_here(rt)
    except ReachError as exc:
        print(f"reach observe: {one_line(exc)}", file=sys.stderr)
        return 2
    finally:
        if rt.owns_ray:
            _ray.shutdown()


def serve_here(rt: runtime.Runtime) -> int:
    """What a command that started a gateway does next: returns at once when it joined a
    running cluster (the gateway keeps running there), else serves on this machine's own Ray
    until interrupted. Its exit status."""
    if not rt.owns_ray:
        return 0
    print("serving on this machine's own Ray until interrupted (Ctrl-C)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)
    return 0


def one_line(error: Exception) -> str:
    """An error as one line of a command's output: its message, then its suggestion."""
    suggestion = getattr(error, "suggestion", "")
    return f"{str(error).rstrip('.')}; {suggestion}" if suggestion else str(error)


__all__ = ["add_parser", "main", "observer_at", "one_line", "serve_here"]
