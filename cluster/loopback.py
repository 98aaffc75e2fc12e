"""`ray up cluster.yaml` on this machine, over loopback, fenced off from everything else on it.

The cluster launcher reaches its nodes over SSH, and `ray down` runs `ray stop` on the head, which
stops every Ray process that its user can see on that machine. To bring a cluster up on one
machine that may run other Ray instances, :class:`Sandbox` starts an SSH server in namespaces of
its own (process IDs, network, mounts; this needs root): the head is 127.0.0.1 of a private
network, so Ray's default ports are free there; `ray stop` on it sees only the cluster's
processes; and killing the sandbox's first process ends every one of them. The sandbox's SSH
sessions get a home folder of their own and keep Ray's files in the sandbox's folder.

:func:`loopback_config` turns cluster.yaml into the configuration of that one-node cluster: same
start commands, this machine's reach sources copied to the head (and imported from that copy),
a fresh SSH key, Ray token and reach keyring.
"""

from __future__ import annotations

import contextlib
import copy
import getpass
import hashlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

#: The checkout this module belongs to (its cluster.yaml and reach sources).
ROOT = Path(__file__).resolve().parent.parent
HEAD_IP = "127.0.0.1"
#: Where the sandbox's SSH sessions find the reach sources that `ray up` copied (file_mounts).
REMOTE_SOURCES = "~/reach"
#: Remote paths of the mounts that are secrets made for the sandbox, not files of the checkout.
TOKEN_MOUNT = "~/.ray/auth_token"
KEYRING_MOUNT = "~/.reach/keyring.json"
SSHD = "/usr/sbin/sshd"
PACKAGES = ("openssh-server", "rsync")

# The sandbox's first process: brings up the private network's loopback, makes the machine's
# name resolve to it (Ray falls back to that name for a node's address when it cannot reach the
# internet), then becomes the SSH server (which, as process 1 of its namespace, also reaps the
# daemons `ray start` leaves).
_INIT = """
import ctypes, fcntl, os, socket, struct, sys
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP, MS_BIND = 0x8913, 0x8914, 0x1, 0x1000
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    req = struct.pack("16sH22x", b"lo", 0)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(sys.argv[1].encode(), b"/etc/hosts", None, MS_BIND, None) != 0:
    raise OSError(ctypes.get_errno(), "cannot mount the sandbox's /etc/hosts")
os.execv(sys.argv[2], sys.argv[2:])
"""
_UNSHARE = ("unshare", "--pid", "--net", "--mount", "--fork", "--mount-proc",
            "--kill-child=SIGKILL")


class LoopbackError(Exception):
    """The loopback cluster could not be set up (what failed is in the message)."""


def load_config(path: Path = ROOT / "cluster.yaml") -> dict[str, Any]:
    """The cluster configuration in ``path``, as `ray up` reads it."""
    config: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return config


def loopback_config(base: dict[str, Any], *, name: str, key: Path, token: Path, keyring: Path,
                    python_bin: Path, checkout: Path = ROOT) -> dict[str, Any]:
    """``base`` (cluster.yaml) made into a one-node cluster whose head is this machine.

    The head's start commands are kept as they are. The reach sources are mounted from
    ``checkout``, and the setup commands import them from there (with ``python_bin``'s Python and
    Ray) instead of installing reach and Ray into a new environment from the package index.

    Args:
        base: The configuration to start from.
        name: The cluster's name (Ray's launcher keys its state and SSH connections by it).
        key: The SSH private key of the sandbox's server.
        token: Ray's token file for the cluster.
        keyring: reach's keyring file for the cluster.
        python_bin: The folder of the ``python`` and ``ray`` commands to run on the head.
        checkout: The folder the relative mount sources of ``base`` are in.

    Raises:
        LoopbackError: ``base`` mounts something this function does not know how to provide.
    """
    config = copy.deepcopy(base)
    config["cluster_name"] = name
    config["provider"] = {"type": "local", "head_ip": HEAD_IP, "worker_ips": []}
    config["auth"] = {"ssh_user": getpass.getuser(), "ssh_private_key": str(key)}
    mounts: dict[str, str] = {}
    for remote, local in base.get("file_mounts", {}).items():
        if remote == TOKEN_MOUNT:
            mounts[remote] = str(token)
        elif remote == KEYRING_MOUNT:
            mounts[remote] = str(keyring)
        elif remote.startswith(REMOTE_SOURCES + "/") and not Path(local).is_absolute():
            mounts[remote] = str((checkout / local).resolve())
        else:
            raise LoopbackError(f"cluster.yaml mounts {local} at {remote}: the loopback cluster "
                                "knows how to provide reach's sources, the token and the keyring")
    config["file_mounts"] = mounts
    profile = [
        'cd "$HOME"',
        f'export PATH={shlex.quote(str(python_bin))}:"$PATH" PYTHONPATH="$HOME/reach"',
        f'export REACH_KEYRING="$HOME/{KEYRING_MOUNT.removeprefix("~/")}"',
    ]
    imported_from_copy = ("import os, reach; home = os.path.expanduser('~/reach/'); "
                          "assert reach.__file__.startswith(home), reach.__file__")
    config["setup_commands"] = [
        "printf '%s\\n' " + " ".join(shlex.quote(line) for line in profile) + " >> ~/.bashrc",
        f"python -c {shlex.quote(imported_from_copy)}",
    ]
    return config


def unavailable() -> str | None:
    """Why a sandbox cannot run on this machine, or None when it can."""
    if sys.platform != "linux":
        return "the loopback cluster needs Linux namespaces"
    if os.geteuid() != 0:
        return "the loopback cluster needs root (an SSH server and namespaces of its own)"
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "the loopback cluster needs util-linux's unshare and nsenter"
    probe = subprocess.run([*_UNSHARE, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"this machine refuses new namespaces: {probe.stderr.strip()}"
    return None


def ensure_packages() -> None:
    """Installs the SSH server and rsync (Debian's packages) when they are missing.

    Raises:
        LoopbackError: they are missing and apt-get could not install them.
    """
    if Path(SSHD).exists() and shutil.which("rsync") and shutil.which("ssh"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LoopbackError(f"cannot install {' '.join(PACKAGES)}: {done.stderr[-2000:]}")


class Sandbox:
    """An SSH server on 127.0.0.1 of private namespaces, and commands run beside it.

    Use it as a context manager: leaving it kills every process in its namespaces and removes its
    folder. Its folder holds the SSH keys, the server's configuration and log, the sessions' home
    folder (``home``) and Ray's temporary files (``ray``).
    """

    def __init__(self) -> None:
        # Short: Ray's socket paths under it must stay within the 107 bytes a Unix socket allows.
        self.root = Path(tempfile.mkdtemp(prefix="reach-up-"))
        self.home = self.root / "home"
        self.key = self.root / "id_ed25519"
        self._unshare: subprocess.Popen[bytes] | None = None
        self._init_pid = 0
        self._namespace = ""
        self._made_privsep_dir = False
        self._control_dirs: list[Path] = []

    def __enter__(self) -> Sandbox:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def namespace(self) -> str:
        """The sandbox's PID namespace, as /proc names it (``pid:[inode]``)."""
        return self._namespace

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts the SSH server and waits until it lets the sandbox's key in.

        Raises:
            LoopbackError: the server did not start, or refused the key.
        """
        self.home.mkdir(mode=0o700)
        self._keygen(self.key)
        self._keygen(self.root / "ssh_host_ed25519_key")
        authorized = self.root / "authorized_keys"
        authorized.write_text(self.key.with_suffix(".pub").read_text(encoding="utf-8"),
                              encoding="utf-8")
        config = self.root / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {HEAD_IP}",
            f"HostKey {self.root / 'ssh_host_ed25519_key'}",
            f"AuthorizedKeysFile {authorized}",
            "PidFile none",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",  # the keys live under /tmp, which anyone may write to
            "PrintMotd no",
            f'SetEnv HOME="{self.home}" RAY_TMPDIR="{self.root}"',
            "",
        ]), encoding="utf-8")
        privsep = Path("/run/sshd")
        if not privsep.exists():
            privsep.mkdir(mode=0o755, parents=True)
            self._made_privsep_dir = True
        hosts = self.root / "hosts"
        hosts.write_text(f"{HEAD_IP} localhost {socket.gethostname()}\n"
                         "::1 localhost ip6-localhost ip6-loopback\n", encoding="utf-8")
        log = (self.root / "sshd.log").open("wb")
        self._unshare = subprocess.Popen(
            [*_UNSHARE, "--", sys.executable, "-c", _INIT, str(hosts),
             SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._unshare.poll() is not None:
                raise LoopbackError(f"the SSH server exited: {self._log_tail()}")
            if not self._init_pid:
                self._init_pid = _child_of(self._unshare.pid)
                if self._init_pid:
                    self._namespace = os.readlink(f"/proc/{self._init_pid}/ns/pid")
            elif self.run(["ssh", *self.ssh_options(), f"{getpass.getuser()}@{HEAD_IP}", "true"],
                          timeout_s=10).returncode == 0:
                return
            time.sleep(0.1)
        raise LoopbackError(f"the SSH server did not let the key in within {timeout_s} s: "
                            f"{self._log_tail()}")

    def ssh_options(self) -> list[str]:
        """Options for ``ssh`` to log in to the sandbox's server with its key."""
        return ["-i", str(self.key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment without Ray's or reach's settings, plus the sandbox's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "REACH_"))}
        env.update(RAY_TMPDIR=str(self.root), TMPDIR=str(self.root))
        env.update(extra)
        return env

    def run(self, argv: Sequence[str], *, cwd: Path | None = None,
            env: dict[str, str] | None = None, timeout_s: float = 300.0
            ) -> subprocess.CompletedProcess[str]:
        """Runs a command inside the sandbox's namespaces; its output is captured (merged).

        Raises:
            LoopbackError: the sandbox is not running.
            subprocess.TimeoutExpired: the command took longer than ``timeout_s``.
        """
        if not self._init_pid:
            raise LoopbackError("the sandbox is not running")
        enter = ["nsenter", f"--target={self._init_pid}", "--net", "--pid", "--mount",
                 f"--wd={cwd or self.root}", "--"]
        return subprocess.run([*enter, *argv], env=env or self.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout_s, check=False)

    def launcher(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Runs ``ray`` (the cluster launcher) inside the sandbox, e.g. ``launcher("up", ...)``."""
        ray = Path(sys.executable).parent / "ray"
        return self.run([str(ray), *args], timeout_s=timeout_s)

    def forget_ssh_connections(self, cluster_name: str) -> None:
        """Marks the launcher's SSH connection folder for ``cluster_name`` for removal at close.

        Ray keeps it at a fixed place under /tmp (not under RAY_TMPDIR).
        """
        user = hashlib.sha256(getpass.getuser().encode()).hexdigest()[:10]
        cluster = hashlib.sha256(cluster_name.encode()).hexdigest()[:10]
        self._control_dirs.append(Path(f"/tmp/ray_ssh_{user}/{cluster}"))

    def processes(self) -> list[tuple[int, str]]:
        """Every process in the sandbox's PID namespace: (PID as seen here, command line)."""
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") != self._namespace:
                    continue
                raw = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            except OSError:  # gone meanwhile, or not ours to read
                continue
            found.append((int(entry.name), raw.replace(b"\0", b" ").decode(errors="replace")))
        return sorted(found)

    def close(self, timeout_s: float = 30.0) -> None:
        """Kills every process in the sandbox and removes its folder (and what Ray left in /tmp).

        Raises:
            LoopbackError: processes of the sandbox were still alive after ``timeout_s``.
        """
        if self._unshare is not None and self._unshare.poll() is None:
            # --kill-child: unshare's death SIGKILLs the namespace's first process, and with it
            # the kernel kills every other process of the namespace.
            self._unshare.send_signal(signal.SIGKILL)
            self._unshare.wait()
        left: list[tuple[int, str]] = []
        if self._namespace:
            deadline = time.monotonic() + timeout_s
            while (left := self.processes()) and time.monotonic() < deadline:
                time.sleep(0.1)
        for folder in self._control_dirs:
            shutil.rmtree(folder, ignore_errors=True)
            _remove_if_empty(folder.parent)
        shutil.rmtree(self.root, ignore_errors=True)
        if self._made_privsep_dir:
            _remove_if_empty(Path("/run/sshd"))
            self._made_privsep_dir = False
        self._init_pid = 0
        if left:
            raise LoopbackError(f"processes of the sandbox outlived it: {left}")

    def _keygen(self, path: Path) -> None:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "reach-loopback",
                        "-f", str(path)], check=True, capture_output=True)

    def _log_tail(self) -> str:
        try:
            return (self.root / "sshd.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


def _child_of(pid: int) -> int:
    """The PID of a child of ``pid`` (0 when it has none yet)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            # The command name (in parentheses) may hold spaces: the parent PID follows it.
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                return int(entry.name)
    return 0


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty: someone else's too
        folder.rmdir()
