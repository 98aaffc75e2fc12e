"""`ray up` for real, on this machine: the cluster launcher brings up a head node over SSH from a
loopback variant of cluster.yaml, drivers join it with ``address="auto"``, and `ray down` stops
it, leaving no Ray process behind.

The SSH server and the cluster run in namespaces of their own (see cluster/loopback.py): the
head is 127.0.0.1 of a private network with Ray's default ports, and `ray stop`, which `ray down`
runs on the head, sees only the cluster's processes, not other Ray instances on the machine.
The tests share one cluster and run in file order: the last one tears it down.
"""

from __future__ import annotations

import re
import secrets
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import loopback
import pytest
import yaml

from reach.observe import dashboards

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = loopback.ROOT
DRIVER = ROOT / "examples" / "customer_service.py"
CHECK = ROOT / "cluster" / "check.py"
#: Guards against a hang only; how long a step takes is for bench/, not for a test to assert.
HANG_GUARD_S = 300
#: What `ray down` prints (and ignores) when `ray stop` failed on the head.
STOP_FAILED = "Exception occurred when stopping the cluster Ray runtime"


@dataclass
class Head:
    """A cluster brought up by `ray up` in a sandbox, and its configuration file."""

    box: loopback.Sandbox
    config: Path
    down: bool = False

    def launcher(self, command: str, *args: str) -> str:
        """Runs ``ray <command> <options> <config> <args>``; returns its output (it must succeed).
        """
        options = ["--log-style", "record", "--log-color", "false"]
        if command in ("up", "down"):
            options.append("-y")
        done = self.box.launcher(command, *options, str(self.config), *args,
                                 timeout_s=HANG_GUARD_S)
        assert done.returncode == 0, f"ray {command} failed:\n{done.stdout[-6000:]}"
        return done.stdout


def new_keyring(path: Path) -> None:
    """Makes a reach keyring at ``path`` (as the operator does before `ray up`)."""
    from reach.security.guard import resolve_keyring

    resolve_keyring(path, create=True)


def ray_processes(box: loopback.Sandbox) -> list[str]:
    """Command lines of the sandbox's processes other than its SSH server and clients."""
    return [cmd for _, cmd in box.processes() if not cmd.startswith(("sshd:", "ssh:", "ssh "))]


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    reason = loopback.unavailable()
    if reason:
        pytest.skip(reason)
    loopback.ensure_packages()
    with loopback.Sandbox() as box:
        name = f"reach-loopback-{secrets.token_hex(4)}"
        box.forget_ssh_connections(name)
        token = box.root / "auth_token"
        token.write_text(secrets.token_hex(32), encoding="utf-8")
        keyring = box.root / "keyring.json"
        new_keyring(keyring)
        config = box.root / "cluster.yaml"
        variant = loopback.loopback_config(
            loopback.load_config(), name=name, key=box.key, token=token, keyring=keyring,
            python_bin=Path(sys.executable).parent)
        config.write_text(yaml.safe_dump(variant, sort_keys=False), encoding="utf-8")
        cluster = Head(box, config)
        cluster.launcher("up", "--no-config-cache", "--disable-usage-stats")
        yield cluster
        if not cluster.down:
            box.launcher("down", "-y", str(config), timeout_s=HANG_GUARD_S)
    # Leaving the sandbox killed whatever was left of the cluster, and checked that it is gone.


def test_ray_up_starts_a_head_that_gives_the_session_resource_behind_token_auth(
    head: Head
) -> None:
    out = head.launcher("submit", str(CHECK))

    assert "cluster ok" in out, out[-4000:]
    assert re.search(r"nodes: 1; head 127\.0\.0\.1 gives reach_state=1", out), out[-4000:]
    assert "session store: on the head, pinned by reach_state" in out, out[-4000:]
    assert "dashboard: http://127.0.0.1:8265, token required" in out, out[-4000:]


def test_the_heads_grafana_provisioning_loads_reachs_dashboard_beside_rays(head: Head) -> None:
    folder = head.box.home / "reach-metrics" / dashboards.DASHBOARDS_FOLDER
    grafana = head.box.root / "ray" / "session_latest" / "metrics" / "grafana"
    # Ray's dashboard writes its Grafana files a moment after `ray start` returns.
    deadline = time.monotonic() + HANG_GUARD_S
    while not (folder / "default_grafana_dashboard.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)

    assert (folder / "default_grafana_dashboard.json").exists(), sorted(folder.glob("*"))
    assert (folder / "reach.json").read_text(encoding="utf-8") == dashboards.dashboard_text()
    provisioning = grafana / "provisioning" / "dashboards" / "default.yml"
    providers = yaml.safe_load(provisioning.read_text(encoding="utf-8"))["providers"]
    assert [p["options"]["path"] for p in providers] == [str(folder)]


def test_customer_service_driver_joins_with_address_auto_and_every_question_is_answered(
    head: Head
) -> None:
    if not DRIVER.exists():
        pytest.skip(f"{DRIVER.relative_to(ROOT)} does not exist yet")
    work = head.box.root / "driver"
    work.mkdir(exist_ok=True)
    # As a user logged in to the head runs it: a cluster of `ray up` checks Ray's token, and
    # reach signs with the keyring that cluster.yaml copied there.
    env = head.box.env(RAY_AUTH_MODE="token",
                       RAY_AUTH_TOKEN_PATH=str(head.box.home / ".ray" / "auth_token"),
                       REACH_KEYRING=str(head.box.home / ".reach" / "keyring.json"),
                       PYTHONIOENCODING="utf-8")
    done = head.box.run([sys.executable, str(DRIVER), "--address", "auto"], cwd=work, env=env,
                        timeout_s=HANG_GUARD_S)

    assert done.returncode == 0, done.stdout[-6000:]
    answered = re.findall(r"^answered (\d+)/(\d+)$", done.stdout, re.MULTILINE)
    assert len(answered) == 1, done.stdout[-6000:]
    assert int(answered[0][0]) == int(answered[0][1]) > 0
    assert "Connecting to existing Ray cluster at address: 127.0.0.1:6379" in done.stdout


def test_customer_service_driver_runs_on_the_head_through_ray_submit(head: Head) -> None:
    if not DRIVER.exists():
        pytest.skip(f"{DRIVER.relative_to(ROOT)} does not exist yet")
    out = head.launcher("submit", str(DRIVER), "--", "--address", "auto")

    answered = re.findall(r"^answered (\d+)/(\d+)\s*$", out, re.MULTILINE)
    assert len(answered) == 1, out[-6000:]
    assert int(answered[0][0]) == int(answered[0][1]) > 0


def test_ray_down_stops_every_ray_process_of_the_cluster(head: Head) -> None:
    running = ray_processes(head.box)
    assert any("gcs_server" in cmd for cmd in running), running
    assert any("raylet" in cmd for cmd in running), running

    out = head.launcher("down")
    head.down = True

    # `ray down` ignores a failed `ray stop` on the head (say, `ray` missing from the PATH of
    # the launcher's shells), and then the on-premise provider leaves the head's Ray running.
    assert STOP_FAILED not in out, out[-4000:]
    assert "Stopped all" in out, out[-4000:]
    deadline = time.monotonic() + 60
    while (left := ray_processes(head.box)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left running after ray down: {left}"
