"""Checks a reach cluster started with `ray up cluster.yaml`. Run it on the head node:

    ray submit cluster.yaml cluster/check.py

It joins the cluster (address ``auto``, as any driver on the head) and checks that exactly one
node, the head, gives the session store's resource; that the session store runs there, pinned by
that resource, with a sound SQLite file; and that the dashboard refuses a request without the
cluster's token and answers one with it. It prints what it found, ends with ``cluster ok``, and
exits with 1 at the first thing that is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import ray
from ray.util.state import list_actors

import reach
from reach._runtime.names import STORE_NAME

RESOURCE = "reach_state"
DASHBOARD = "http://127.0.0.1:8265"


class CheckFailed(Exception):
    """Something about the cluster is not as cluster.yaml sets it up."""


def head_node(resource: str) -> dict[str, Any]:
    """The head node, after checking that it, and no other node, gives ``resource``."""
    nodes = [n for n in ray.nodes() if n["Alive"]]
    heads = [n for n in nodes if "node:__internal_head__" in n["Resources"]]
    if len(heads) != 1:
        raise CheckFailed(f"expected one live head node, found {len(heads)}")
    head: dict[str, Any] = heads[0]
    givers = [n["NodeManagerAddress"] for n in nodes if n["Resources"].get(resource)]
    if givers != [head["NodeManagerAddress"]]:
        raise CheckFailed(f"{resource} should be given by the head only; given by {givers}")
    print(f"nodes: {len(nodes)}; head {head['NodeManagerAddress']} gives "
          f"{resource}={head['Resources'][resource]:g}")
    return head


async def store_health(rt: reach.Runtime) -> tuple[str, dict[str, Any]]:
    """The session store's integrity verdict and its stats."""
    store = rt.cluster.sessions()
    verdict, stats = await asyncio.wait_for(asyncio.gather(store.integrity(), store.stats()), 60)
    return str(verdict), dict(stats)


def check_store(rt: reach.Runtime, head: dict[str, Any], resource: str) -> None:
    """The session store runs on the head, requires ``resource``, and its database is sound."""
    verdict, stats = asyncio.run(store_health(rt))
    actors = list_actors(filters=[("name", "=", STORE_NAME), ("state", "=", "ALIVE")],
                         detail=True)
    if len(actors) != 1:
        raise CheckFailed(f"expected one live session store, found {len(actors)}")
    store = actors[0]
    if store.node_id != head["NodeID"]:
        raise CheckFailed(f"the session store runs on node {store.node_id}, not on the head")
    if resource not in (store.required_resources or {}):
        raise CheckFailed(f"the session store is not pinned by {resource} (the driver that "
                          f"created it did not pass session_resource={resource!r})")
    if verdict != "ok":
        raise CheckFailed(f"the session store's database is damaged: {verdict}")
    print(f"session store: on the head, pinned by {resource}, database {stats['path']} ({verdict})")


def check_dashboard(url: str) -> None:
    """The dashboard answers with the cluster's token, and refuses a request without it."""
    version = f"{url}/api/version"
    try:
        urllib.request.urlopen(version, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            raise CheckFailed(f"the dashboard answered {exc.code} without a token") from exc
    except urllib.error.URLError as exc:
        raise CheckFailed(f"no dashboard at {url}: {exc.reason}") from exc
    else:
        raise CheckFailed(f"the dashboard at {url} answers without a token")
    request = urllib.request.Request(version, headers={"Authorization": f"Bearer {token()}"})
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.URLError as exc:
        raise CheckFailed(f"the dashboard refused the cluster's token: {exc}") from exc
    print(f"dashboard: {url}, token required")


def token() -> str:
    """Ray's token, where Ray looks for it: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or "~/.ray/auth_token"
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CheckFailed(f"no Ray token at {path}: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    """Runs the checks; returns the exit status."""
    parser = argparse.ArgumentParser(description="Check a reach cluster started by ray up.")
    parser.add_argument("--address", default="auto", help="the cluster (default: auto)")
    parser.add_argument("--resource", default=RESOURCE, help="the head's session resource")
    parser.add_argument("--dashboard", default=DASHBOARD, help="the dashboard's URL on the head")
    args = parser.parse_args(argv)
    rt = reach.init(address=args.address, session_resource=args.resource, log_to_driver=False)
    try:
        head = head_node(args.resource)
        check_store(rt, head, args.resource)
        check_dashboard(args.dashboard.rstrip("/"))
    except CheckFailed as exc:
        print(f"cluster check failed: {exc}")
        return 1
    finally:
        rt.shutdown()
    print("cluster ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
