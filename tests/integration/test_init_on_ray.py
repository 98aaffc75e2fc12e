"""reach.init against a running deployment: the settings it cannot apply are named, and inside an
event loop its checks of the cluster run on the loop and are awaited by ``async with``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support_agents import Echo, Text

import reach
from reach.security.keys import Keyring

pytestmark = pytest.mark.integration


async def test_a_driver_joining_a_deployment_is_told_which_of_its_settings_are_ignored(
    rt: Any,
) -> None:
    with pytest.warns(UserWarning, match="^reach.init ignored") as warned:
        again = reach.init(heartbeat_interval_s=1.5, session_path="elsewhere.db",
                           max_hops=8, log_to_driver=False)
    try:
        await again.ready()
        said = [str(w.message) for w in warned]
        assert ("reach.init ignored heartbeat_interval_s, session_path: this driver joined a "
                "running deployment, which keeps its own") in said
        assert "reach.init ignored log_to_driver: Ray already runs in this process" in said
        assert not any("max_hops" in s for s in said)  # a driver's own setting applies
        assert again.limits.max_hops == 8
        await rt.spawn(Echo, "init-join-echo", placement=reach.Packed(pool="init"))
        reply = await again.client.request("init-join-echo", Text(text="hi"), timeout_ms=10_000)
        assert reply.value.text == "init-join-echo:hi"
    finally:
        await again.close()


#: A driver that joins with a keyring of its own from inside an event loop: ``async with``
#: raises the refusal that init's checks met on the loop.
IN_A_LOOP = '''
import asyncio, reach
async def main():
    try:
        async with reach.init() as rt:
            print("joined")
    except reach.AuthError as exc:
        print(f"AuthError {exc.details.get('reason')}: {exc.message}")
        raise SystemExit(3) from None
asyncio.run(main())
'''


async def test_inside_an_event_loop_a_keyring_mismatch_is_raised_by_async_with(
    rt: Any, cluster: Any, tmp_path: Path,
) -> None:
    other = tmp_path / "other-keyring.json"
    Keyring.generate().save(other)
    for keyring, status, last in [
        (other, 3, "AuthError bad_signature: this driver's keyring does not match the cluster's"),
        (Path(rt.transport.codec.guard.config.keyring), 0, "joined"),
    ]:
        env = {**os.environ, "RAY_ADDRESS": cluster.address, "REACH_KEYRING": str(keyring)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", IN_A_LOOP, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
        text = out.decode("utf-8", "replace")
        assert proc.returncode == status, text[-3000:]
        # Ray's own log lines may come after what the driver printed.
        assert any(line.startswith(last) for line in text.splitlines()), text[-3000:]
