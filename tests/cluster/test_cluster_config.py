"""cluster.yaml, and the loopback variant made from it, pass the cluster launcher's own checks
(``prepare_config`` fills in the on-premise provider's defaults, ``validate_config`` checks the
result against Ray's schema) and set up what reach needs on every node."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from loopback import ROOT, LoopbackError, load_config, loopback_config
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.dashboard.modules.metrics.metrics_head import GRAFANA_DASHBOARD_OUTPUT_DIR_ENV_VAR

from reach.observe import dashboards

pytestmark = pytest.mark.cluster

RESOURCE = "reach_state"


def loopback(base: dict[str, Any] | None = None) -> dict[str, Any]:
    return loopback_config(base or load_config(), name="reach-loopback-test",
                           key=Path("/keys/id_ed25519"), token=Path("/keys/auth_token"),
                           keyring=Path("/keys/keyring.json"), python_bin=Path("/env/bin"))


def ray_start(command: str) -> list[str]:
    """The arguments of the ``ray start`` in a start command (after any ``ulimit ...;``)."""
    words = shlex.split(command.rsplit(";", 1)[-1])
    return words[words.index("start") + 1:]


def flag(args: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    assert len(values) == 1, f"expected one {name}=... in {args}"
    return values[0]


def launched(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration as `ray up` uses it, after Ray's validation."""
    prepared = prepare_config(config)
    validate_config(prepared)
    return prepared


@pytest.mark.parametrize("make", [load_config, loopback], ids=["cluster.yaml", "loopback"])
def test_configuration_passes_the_cluster_launchers_validation(make: Any) -> None:
    prepared = launched(make())

    assert prepared["provider"]["type"] == "local"
    head_type = prepared["available_node_types"][prepared["head_node_type"]]
    assert head_type["max_workers"] == len(prepared["provider"]["worker_ips"])


def test_validation_refuses_a_configuration_outside_rays_schema() -> None:
    config = load_config()
    config["head_start_commands"] = config.pop("head_start_ray_commands")  # a typo

    with pytest.raises(jsonschema.ValidationError, match="head_start_commands"):
        launched(config)


def test_only_the_head_gives_the_session_resource() -> None:
    config = load_config()
    [head_start] = [c for c in config["head_start_ray_commands"] if "--head" in c]
    [worker_start] = [c for c in config["worker_start_ray_commands"] if "start" in c.split()]

    assert json.loads(flag(ray_start(head_start), "--resources")) == {RESOURCE: 1}
    assert not any(a.startswith("--resources") for a in ray_start(worker_start))


def test_the_head_starts_the_dashboard_and_the_autoscaler() -> None:
    [head_start] = [c for c in load_config()["head_start_ray_commands"] if "--head" in c]
    args = ray_start(head_start)

    assert flag(args, "--include-dashboard") == "true"
    assert flag(args, "--dashboard-port") == "8265"
    assert flag(args, "--autoscaling-config") == "~/ray_bootstrap_config.yaml"


def test_the_head_puts_reachs_dashboard_in_the_folder_rays_grafana_provisioning_loads() -> None:
    commands = load_config()["head_start_ray_commands"]
    [head_start] = [c for c in commands if "--head" in c]
    [write] = [c for c in commands if c.startswith("reach grafana ")]
    start = shlex.split(head_start.rsplit(";", 1)[-1])
    env = dict(w.split("=", 1) for w in start[:start.index("ray")])

    assert commands.index(write) < commands.index(head_start)  # there before Ray writes its own
    folder = shlex.split(write)[2].replace("~", "$HOME", 1)
    assert env[GRAFANA_DASHBOARD_OUTPUT_DIR_ENV_VAR] == f"{folder}/{dashboards.DASHBOARDS_FOLDER}"


def test_every_node_starts_ray_with_token_authentication_and_serve_haproxy_and_gets_the_token(
) -> None:
    config = load_config()
    starts = [c for key in ("head_start_ray_commands", "worker_start_ray_commands")
              for c in config[key] if "ray start" in c]

    assert len(starts) == 2
    assert all("RAY_AUTH_MODE=token RAY_SERVE_ENABLE_HA_PROXY=1" in c for c in starts)
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


def test_every_node_gets_what_pyproject_packages_and_the_keyring_drivers_use() -> None:
    config = load_config()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    mounted = {remote.removeprefix("~/reach/"): local
               for remote, local in config["file_mounts"].items()
               if remote.startswith("~/reach/")}

    assert set(mounted) == packages | {"pyproject.toml", project["project"]["readme"]}
    assert all((ROOT / local).exists() for local in mounted.values())
    assert config["file_mounts"]["~/.reach/keyring.json"] == "./.reach/keyring.json"
    assert 'REACH_KEYRING="$HOME/.reach/keyring.json"' in config["setup_commands"][-1]


def test_setup_installs_reach_and_puts_ray_on_the_launchers_path() -> None:
    # `ray down` runs `ray stop` in a login shell: without `ray` on its PATH, Ray keeps running.
    setup = load_config()["setup_commands"]

    assert any(c.endswith("pip install --quiet ~/reach") for c in setup)
    assert '$HOME/reach-env/bin:$PATH' in setup[-1]
    assert setup[-1].rstrip().endswith(">> ~/.bashrc")


def test_loopback_variant_keeps_the_start_commands_and_targets_this_machine() -> None:
    base = load_config()
    variant = loopback(base)

    assert variant["head_start_ray_commands"] == base["head_start_ray_commands"]
    assert variant["provider"] == {"type": "local", "head_ip": "127.0.0.1", "worker_ips": []}
    assert variant["file_mounts"]["~/.ray/auth_token"] == "/keys/auth_token"
    assert variant["file_mounts"]["~/.reach/keyring.json"] == "/keys/keyring.json"
    assert variant["file_mounts"]["~/reach/reach"] == str(ROOT / "reach")
    assert 'REACH_KEYRING="$HOME/.reach/keyring.json"' in variant["setup_commands"][0]


def test_loopback_variant_refuses_a_mount_it_cannot_provide() -> None:
    base = load_config()
    base["file_mounts"]["~/models"] = "/data/models"

    with pytest.raises(LoopbackError, match="/data/models"):
        loopback(base)
