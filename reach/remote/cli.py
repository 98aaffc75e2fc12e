"""``reach connect`` and ``reach agent-secret``: a remote agent from the command line.

``reach connect --gateway URL module:Class --id ID --token TOKEN`` runs an ordinary agent class
as a remote agent until interrupted (then it says goodbye). Its signing secret comes from
``--secret HEX`` (or ``REACH_AGENT_SECRET``), else is derived from a keyring file (``--keyring``,
or ``REACH_KEYRING``); the token from ``--token`` (or ``REACH_TOKEN``). ``reach agent-secret
ID`` prints an agent's secret from the deployment's keyring, for an operator to hand to the
agent's owner (it lets its holder connect as that agent, and as no other).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
from pathlib import Path

from reach.agent import Agent
from reach.errors import AuthError, ConfigError
from reach.remote.client import serve_agent
from reach.remote.wire import FINAL_CODES, CloseCode, agent_secret
from reach.security.keys import Keyring


def load_agent_class(target: str) -> type[Agent]:
    """The agent class named ``module:Class`` (the current folder importable).

    Raises:
        ConfigError: the target is not ``module:Class``, cannot be imported, or is no Agent.
    """
    module_name, colon, name = target.partition(":")
    if not colon or not module_name or not name:
        raise ConfigError(f"the agent must be named module:Class, got {target!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {target}: {exc}") from exc
    if not (isinstance(found, type) and issubclass(found, Agent)):
        raise ConfigError(f"{target} is not a reach.Agent subclass")
    return found


def read_secret(agent_id: str, secret_hex: str | None, keyring: str | None) -> bytes | None:
    """The agent's secret: given as hex, else derived from a keyring file, else None (a
    deployment with signing off).

    Raises:
        ConfigError: the hex is not 32 bytes.
        AuthError: the keyring file cannot be read.
    """
    if secret_hex:
        try:
            secret = bytes.fromhex(secret_hex)
        except ValueError as exc:
            raise ConfigError(f"--secret is not hex: {exc}") from exc
        if len(secret) != 32:
            raise ConfigError(f"--secret must be 32 bytes (64 hex digits), got {len(secret)}")
        return secret
    if keyring:
        return agent_secret(Keyring.load(Path(keyring).expanduser()).master, agent_id)
    return None


def main_connect(argv: list[str] | None = None) -> int:
    """``reach connect``: runs an agent class as a remote agent; returns the exit status (0
    after goodbye, 1 when the gateway refused it or closed for good, 2 for bad arguments)."""
    parser = argparse.ArgumentParser(prog="reach connect",
                                     description="Run an agent class as a remote agent through "
                                                 "a reach gateway's WebSocket channel.")
    parser.add_argument("target", metavar="module:Class", help="the reach.Agent subclass")
    parser.add_argument("--gateway", required=True, help="the gateway's URL (http(s) or ws(s))")
    parser.add_argument("--id", required=True, dest="agent_id", help="the agent's ID")
    parser.add_argument("--token", default=os.environ.get("REACH_TOKEN"),
                        help="the gateway's bearer token (reach token NAME); or REACH_TOKEN")
    parser.add_argument("--secret", default=os.environ.get("REACH_AGENT_SECRET"),
                        help="the agent's secret as hex (reach agent-secret ID); or "
                             "REACH_AGENT_SECRET")
    parser.add_argument("--keyring", default=os.environ.get("REACH_KEYRING"),
                        help="derive the secret from this keyring file instead")
    parser.add_argument("--once", action="store_true",
                        help="do not reconnect after the connection breaks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        cls = load_agent_class(args.target)
        secret = read_secret(args.agent_id, args.secret, args.keyring)
    except (ConfigError, AuthError) as exc:
        print(f"reach connect: {exc}", file=sys.stderr)
        return 2
    try:
        code = asyncio.run(_connect(args.gateway, cls, args.agent_id, token=args.token,
                                    secret=secret, reconnect=not args.once))
    except AuthError as exc:
        print(f"reach connect: refused: {exc}", file=sys.stderr)
        return 1
    return 0 if code == CloseCode.NORMAL else 1 if code in FINAL_CODES else 0


async def _connect(gateway: str, cls: type[Agent], agent_id: str, *, token: str | None,
                   secret: bytes | None, reconnect: bool) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return await serve_agent(gateway, cls, agent_id, token=token, secret=secret,
                             reconnect=reconnect, stop=stop)


def main_secret(argv: list[str] | None = None) -> int:
    """``reach agent-secret ID``: prints an agent's secret (hex) from the keyring."""
    parser = argparse.ArgumentParser(prog="reach agent-secret",
                                     description="Print the signing secret of an agent ID, "
                                                 "derived from the deployment's keyring.")
    parser.add_argument("agent_id")
    parser.add_argument("--keyring", default=os.environ.get("REACH_KEYRING", ".reach/keyring.json"))
    args = parser.parse_args(argv)
    try:
        secret = read_secret(args.agent_id, None, args.keyring)
    except AuthError as exc:
        print(f"reach agent-secret: {exc}", file=sys.stderr)
        return 2
    assert secret is not None
    print(secret.hex())
    return 0


__all__ = ["load_agent_class", "main_connect", "main_secret", "read_secret"]
