"""The ``reach`` command: ``demo``, ``gateway``, ``observe``, ``token``, ``connect``,
``agent-secret``, ``status``, ``bench``, ``audit``, ``keyring``, ``grafana`` and ``version``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO

from reach import runtime
from reach._runtime.names import DEFAULT_SESSIONS
from reach._version import __version__
from reach.bench import BENCHMARKS
from reach.bench.results import DEFAULT_OUT, folder
from reach.errors import AuthError, ConfigError, ReachError, StorageError
from reach.observe import dashboards
from reach.remote.cli import main_connect, main_secret
from reach.runtime import Runtime
from reach.security.guard import resolve_keyring
from reach.security.keys import Keyring
from reach.tools import audit, customer_service, demo, observe
from reach.web.auth import token_for

# Ray loads only in the commands that join a cluster (``_ray``, ``status``): ``reach connect``,
# ``token`` and ``agent-secret`` run where there is no Ray; matplotlib (``benchchart``) is an
# extra. Those imports are made where a command needs them.

#: A benchmark silent for this long gets a line saying it is still running.
QUIET_S = 15.0
#: The package whose modules ``reach bench`` runs, one ``python -m`` process each.
BENCH_PACKAGE = "reach.bench"


def _demo(args: argparse.Namespace) -> int:

    print("== envelopes: built, validated, encoded, decoded, refused ==")
    demo.run()
    if args.protocol_only:
        return 0
    from reach import _ray  # noqa: PLC0415 - Ray loads where a command joins it

    print("\n== customer service on Ray: a router hands questions to agents by capability ==")
    rt = runtime.init(address=args.address, log_to_driver=False)
    try:
        asyncio.run(_customer_service(rt))
    finally:
        _ray.shutdown()
    return 0


async def _customer_service(rt: Runtime) -> None:
    """Runs the customer service demo, then closes the runtime in the same event loop (so
    that what it sent leaves and its reply poller ends)."""

    try:
        await customer_service.run(rt)
    finally:
        await rt.close()


def _status(args: argparse.Namespace) -> int:
    from reach import _ray  # noqa: PLC0415 - Ray loads where a command joins it
    from reach.tools import status  # noqa: PLC0415 - Ray loads where a command joins it

    try:
        address = status.connect(args.address)
    except ReachError as exc:
        print(f"reach status: {_one_line(exc)}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(status.gather(status.find_cluster(), address=address,
                                           letters=args.letters))
    except ReachError as exc:
        print(f"reach status: {_one_line(exc)}", file=sys.stderr)
        return 2
    finally:
        _ray.shutdown()
    if args.json:
        print(json.dumps(asdict(report), ensure_ascii=False, indent=2))
    else:
        print(status.format_status(report, limit=args.limit))
    return 0


_one_line = observe.one_line


def _bench(args: argparse.Namespace) -> int:
    results = folder(args.out, args.quick)
    names = [n for n in BENCHMARKS if n in (args.only or BENCHMARKS)]
    failed = []
    if not args.chart_only:
        where = args.address or os.environ.get("RAY_ADDRESS") or "a local Ray of each one's own"
        print(f"reach bench: {len(names)} benchmark(s) on {where}; results in {results}",
              flush=True)
        for i, name in enumerate(names, 1):
            command = _bench_command(name, args)
            print(f"[{i}/{len(names)}] {name}: python {' '.join(command[1:])}", flush=True)
            code, took = _run(command, name, args.address)
            print(f"[{i}/{len(names)}] {name}: {'done' if code == 0 else f'FAILED ({code})'} "
                  f"in {took:.1f} s", flush=True)
            if code != 0:
                failed.append(name)
    chart = _chart(results, args.quick, required=args.chart_only)
    if failed:
        print(f"reach bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return chart


def _bench_command(name: str, args: argparse.Namespace) -> list[str]:
    """The command line that runs benchmark ``name`` from the package."""
    return [sys.executable, "-m", f"{BENCH_PACKAGE}.{name}", *(["--quick"] if args.quick else []),
            "--out", str(args.out)]


def _chart(results: Path, quick: bool, *, required: bool) -> int:
    """Draws the chart of the results in ``results``; 0, or 2 when it cannot (matplotlib is
    missing) and the chart was all that was asked for."""
    try:
        from reach.tools import benchchart  # matplotlib is an extra: only the chart needs it  # noqa: PLC0415 - matplotlib is an extra
    except ImportError as exc:
        print(f"reach bench: chart skipped: it needs matplotlib ({exc}); "
              "pip install 'reach[bench]'", file=sys.stderr)
        return 2 if required else 0
    figures, problems = benchchart.load(results)
    for problem in problems:
        print(f"reach bench: unreadable results: {problem}", file=sys.stderr)
    title = "reach benchmarks" + (" (quick run: small sizes, rough figures)" if quick else "")
    print(f"chart: {benchchart.draw(figures, results / 'chart.png', title=title)}")
    return 0


def _run(command: list[str], name: str, address: str | None) -> tuple[int, float]:
    """Runs one benchmark, streaming its output with the elapsed time; (status, secs)."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if address:
        env["RAY_ADDRESS"] = address
    # A benchmark starts a Ray of its own unless RAY_ADDRESS names a cluster: Ray's default,
    # joining whatever cluster started last on this machine, would measure (and disturb) that.
    if not env.get("RAY_ADDRESS"):
        env["RAY_ADDRESS"] = "local"
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            encoding="utf-8", errors="replace", env=env)
    lines: queue.Queue[str | None] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    try:
        while True:
            try:
                line = lines.get(timeout=QUIET_S)
            except queue.Empty:
                print(f"  {time.monotonic() - started:7.1f}s  ({name} still running)", flush=True)
                continue
            if line is None:
                return proc.wait(), time.monotonic() - started
            print(f"  {time.monotonic() - started:7.1f}s  {line.rstrip()}", flush=True)
    finally:
        if proc.poll() is None:  # interrupted: the benchmark does not outlive the command
            proc.terminate()
            proc.wait()


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _audit(args: argparse.Namespace) -> int:

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


def _keyring(args: argparse.Namespace) -> int:

    try:
        path = resolve_keyring(args.path, create=True)
        ring = Keyring.load(path)
        if args.rotate:
            ring.rotate()
            ring.save(path)
    except AuthError as exc:
        print(f"reach keyring: {exc}", file=sys.stderr)
        return 2
    print(f"{path}  (current data key {ring.current}, {len(ring.data_keys)} in all)")
    return 0


def _gateway(args: argparse.Namespace) -> int:
    from reach import _ray  # noqa: PLC0415 - Ray loads where a command joins it

    try:
        rt = runtime.init(address=args.address, log_to_driver=False)
    except ReachError as exc:
        print(f"reach gateway: {_one_line(exc)}", file=sys.stderr)
        return 2
    try:
        if args.demo_agents:
            asyncio.run(customer_service.spawn_agents(rt))
        url = rt.start_gateway(host=args.host, port=args.port, replicas=args.replicas,
                               public_url=args.public_url, auth=not args.no_auth,
                               proxy_location="EveryNode" if args.every_node else "HeadOnly")
        print(f"A2A gateway at {url}  (A2A 1.0, JSON-RPC binding)")
        print(f"  router card:  {url}/.well-known/agent-card.json")
        print(f"  agent cards:  {url}/agents/<agent-id>/.well-known/agent-card.json")
        if not args.no_auth:
            print("  calls need 'Authorization: Bearer <token>': reach token <name> prints one")
        return observe.serve_here(rt)
    except ReachError as exc:
        print(f"reach gateway: {_one_line(exc)}", file=sys.stderr)
        return 2
    finally:
        if rt.owns_ray:
            _ray.shutdown()


def _grafana(args: argparse.Namespace) -> int:

    try:
        dashboard, rules = dashboards.write(args.folder)
    except OSError as exc:
        print(f"reach grafana: {exc}", file=sys.stderr)
        return 2
    print(f"Grafana dashboard:  {dashboard}  (put it in a dashboards folder Grafana provisions, "
          "or import it)")
    print(f"Prometheus rules:   {rules}  (add it to rule_files in the Prometheus configuration)")
    return 0


def _token(args: argparse.Namespace) -> int:

    try:
        ring = Keyring.load(resolve_keyring(args.keyring, create=args.keyring is None))
        print(token_for(ring, args.name))
    except (AuthError, ConfigError) as exc:
        print(f"reach token: {_one_line(exc)}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``reach`` console command; returns the exit status."""
    given = sys.argv[1:] if argv is None else argv
    if given[:1] in (["connect"], ["agent-secret"]):  # they parse their own options (no Ray)

        return (main_connect if given[0] == "connect" else main_secret)(given[1:])
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
    status = sub.add_parser("status", help="show agents, supervisors, tasks and dead letters "
                            "of a running cluster (never starts one)")
    status.add_argument("--address", default=None,
                        help="Ray cluster address (default: RAY_ADDRESS, else this machine's)")
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    status.add_argument("--limit", type=int, default=50, help="agents listed (0: all)")
    status.add_argument("--letters", type=int, default=5, help="last dead letters shown")
    bench = sub.add_parser(
        "bench", help="run the benchmarks (modules of reach.bench) and chart their results",
        description="Runs the benchmarks one after the other, each a process of its own "
        "(python -m reach.bench.NAME), streaming their progress, then charts their results. "
        "Each starts a Ray of its own unless --address (or RAY_ADDRESS) names a cluster.",
        epilog=f"benchmarks, in order: {', '.join(BENCHMARKS)} (python -m reach.bench.NAME "
        "--help lists one's own options)")
    bench.add_argument("--quick", action="store_true",
                       help="small sizes; results go to the quick/ subfolder of --out")
    bench.add_argument("--only", nargs="+", choices=list(BENCHMARKS), metavar="NAME",
                       help=f"run only these ({', '.join(BENCHMARKS)})")
    bench.add_argument("--chart-only", action="store_true",
                       help="run nothing: draw the chart from the results there are")
    bench.add_argument("--out", type=Path, default=DEFAULT_OUT,
                       help=f"results folder (default: {DEFAULT_OUT} under the current folder)")
    bench.add_argument("--address", default=None,
                       help="run against this Ray cluster, e.g. auto (default: RAY_ADDRESS, "
                       "else a local Ray of each benchmark's own)")
    keyring = sub.add_parser("keyring", help="create the deployment's keyring if missing and "
                             "print its path (copy that file to every node of a cluster)")
    keyring.add_argument("path", nargs="?", default=None,
                         help="default: REACH_KEYRING, else .reach/keyring.json")
    keyring.add_argument("--rotate", action="store_true",
                         help="add a new data key and make it current (old ones still decrypt)")
    gateway = sub.add_parser("gateway", help="serve every agent as an A2A 1.0 agent over HTTP "
                             "(a Ray Serve application; starts a local Ray unless --address)")
    gateway.add_argument("--address", default=None, help="Ray cluster address, e.g. auto")
    gateway.add_argument("--host", default="127.0.0.1", help="address the HTTP proxy listens on")
    gateway.add_argument("--port", type=int, default=8000)
    gateway.add_argument("--replicas", type=int, default=1)
    gateway.add_argument("--public-url", default=None, help="base URL written into agent cards")
    gateway.add_argument("--no-auth", action="store_true", help="accept calls without a token")
    gateway.add_argument("--every-node", action="store_true",
                         help="an HTTP proxy on every node (a real cluster), not the head only")
    gateway.add_argument("--demo-agents", action="store_true",
                         help="spawn the demo's customer-service agents first")
    observe.add_parser(sub)
    token = sub.add_parser("token", help="print the gateway bearer token of a caller NAME "
                           "(derived from the keyring; calls with it enter reach as a2a:NAME)")
    token.add_argument("name")
    token.add_argument("--keyring", default=None,
                       help="default: REACH_KEYRING, else .reach/keyring.json")
    sub.add_parser("connect", help="run an agent class as a remote agent through a gateway's "
                   "WebSocket (reach connect --gateway URL module:Class --id ID --token TOKEN "
                   "--secret HEX; see reach connect --help)")
    sub.add_parser("agent-secret", help="print an agent's signing secret, derived from the "
                   "keyring (what a remote agent signs its hello with)")
    grafana = sub.add_parser("grafana", help="write reach's Grafana dashboard and Prometheus "
                             "alerting rules to FOLDER (dashboards/reach.json, "
                             "prometheus/reach-alerts.yml)")
    grafana.add_argument("folder", type=Path)
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    commands = {"demo": _demo, "status": _status, "bench": _bench, "audit": _audit,
                "keyring": _keyring, "gateway": _gateway, "observe": observe.main, "token": _token,
                "grafana": _grafana}
    if args.command in commands:
        return commands[args.command](args)

    print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
