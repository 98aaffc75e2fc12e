"""Prometheus and promtool for the dashboard's test: found on the PATH, or installed with apt-get
(Debian's ``prometheus``, which brings both) where they are missing and this runs as root, as
node_tools.py installs node and npm. Debian's package also enables a Prometheus service; where
no init system runs (a container), none starts, and the test starts its own anyway.

A test needing them is marked :data:`needs_prometheus`. It is skipped where they cannot be had
only outside CI: in CI (``CI`` set) it runs and fails, since a skip there would hide that the
suite did not test what it claims to.

:class:`Prometheus` runs one, on a free loopback port, with a configuration this module writes:
it scrapes the targets of a file-based service discovery file, as Ray's own configuration does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from apt_tools import IN_CI, apt_install

PACKAGES = ("prometheus",)


def _find() -> tuple[str | None, str | None]:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        apt_install(PACKAGES)
    return shutil.which("prometheus"), shutil.which("promtool")


PROMETHEUS, PROMTOOL = _find()

#: Skips a test where Prometheus cannot be had, except in CI, where it runs (and fails).
needs_prometheus = pytest.mark.skipif(
    (PROMETHEUS is None or PROMTOOL is None) and not IN_CI,
    reason="prometheus and promtool are needed (Debian's prometheus package; installed with "
    "apt-get when missing, which needs root)")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``promtool ARGS``; its output is captured (merged)."""
    assert PROMTOOL is not None, "promtool is not installed"
    return subprocess.run([PROMTOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=60, check=False)


def write_config(folder: Path, *, rules: Path, scrape_s: float = 1.0) -> Path:
    """Writes a Prometheus configuration to ``folder``: every target listed in
    ``folder/targets.json`` (see :func:`write_targets`) scraped each ``scrape_s`` seconds as job
    ``ray``, and the alerting rules in ``rules`` evaluated as often. Returns its path."""
    targets = folder / "targets.json"
    if not targets.exists():
        write_targets(targets, [])
    config = {
        "global": {"scrape_interval": f"{scrape_s:g}s", "evaluation_interval": f"{scrape_s:g}s",
                   "scrape_timeout": f"{scrape_s:g}s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "ray", "file_sd_configs": [
            {"files": [str(targets)], "refresh_interval": f"{scrape_s:g}s"}]}],
    }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def write_targets(path: Path, targets: list[str]) -> None:
    """Writes a file-based service discovery file listing ``targets`` (``host:port``), in the
    form of the one Ray's dashboard writes (``prom_metrics_service_discovery.json``)."""
    path.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": targets}]),
                    encoding="utf-8")


class Prometheus:
    """A Prometheus server of this test's own, on a free port of loopback.

    Use it as a context manager: leaving it stops the server (and kills it if it lingers).
    """

    def __init__(self, config: Path, data: Path, port: int) -> None:
        self.config, self.data, self.port = config, data, port
        self.url = f"http://127.0.0.1:{port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log = data.parent / "prometheus.log"

    def __enter__(self) -> Prometheus:
        assert PROMETHEUS is not None, "prometheus is not installed"
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def _wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                pytest.fail(f"prometheus exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"prometheus was not ready within {timeout_s} s: {self.log_tail()}")

    def log_tail(self) -> str:
        """The end of the server's log."""
        try:
            return self._log.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of an answer of Prometheus's HTTP API, e.g. ``api("query", query=...)``
        (``/api/v1/query``); fails the test on an error answer."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why in the body
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            pytest.fail(f"prometheus refused {url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]
