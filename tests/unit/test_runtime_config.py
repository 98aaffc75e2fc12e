"""RuntimeConfig: reach's settings as one frozen value, validated, with the ones given named."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import reach
from reach.errors import ConfigError
from reach.runtime import RuntimeConfig


def test_a_config_is_frozen_and_names_the_settings_that_differ_from_the_defaults() -> None:
    cfg = RuntimeConfig(heartbeat_interval_s=2.0, spares=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.spares = 3  # type: ignore[misc]
    assert cfg.given() == ["heartbeat_interval_s", "spares"]
    assert RuntimeConfig().given() == []


def test_the_deployments_own_settings_are_the_registrys_and_the_stores() -> None:
    assert set(RuntimeConfig.DEPLOYMENT) == {
        "heartbeat_interval_s", "heartbeat_misses", "session_path", "session_resource",
        "session_options", "poison_after", "trace_store_bytes"}
    assert set(RuntimeConfig.DEPLOYMENT) <= {f.name for f in dataclasses.fields(RuntimeConfig)}


def test_limits_carry_hops_timeout_and_spares() -> None:
    limits = RuntimeConfig(max_hops=4, default_timeout_ms=500, spares=2).limits
    assert (limits.max_hops, limits.default_timeout_ms, limits.spares) == (4, 500, 2)
    assert limits.max_spares == RuntimeConfig().max_spares == 4
    assert RuntimeConfig(max_spares=8).limits.max_spares == 8


@pytest.mark.parametrize(("setting", "value"), [
    ("heartbeat_interval_s", 0.0), ("heartbeat_misses", 0), ("max_hops", 0),
    ("default_timeout_ms", -1), ("spares", -1), ("poison_after", 0), ("max_spares", -1),
    ("trace_store_bytes", 0)])
def test_a_setting_out_of_range_is_a_config_error_naming_it(setting: str, value: float) -> None:
    with pytest.raises(ConfigError, match=str(value)):
        RuntimeConfig(**{setting: value})


def test_security_without_signing_needs_no_keyring(tmp_path: Path) -> None:
    cfg = RuntimeConfig(sign=False, keyring=tmp_path / "absent.json")
    assert cfg.security().keyring is None
    assert cfg.security().sign is False


def test_security_with_a_missing_explicit_keyring_is_an_auth_error(tmp_path: Path) -> None:
    with pytest.raises(reach.AuthError):
        RuntimeConfig(keyring=tmp_path / "absent.json").security()


def test_the_config_is_public() -> None:
    assert reach.RuntimeConfig is RuntimeConfig
