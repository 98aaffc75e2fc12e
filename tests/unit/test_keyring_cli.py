"""``reach keyring``: creates the deployment's keyring once, owner-only, and rotates it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from reach.security.keys import Keyring
from reach.tools.cli import main


def test_keyring_is_created_once_then_reused_and_rotated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "state" / "keyring.json"
    assert main(["keyring", str(path)]) == 0
    first = Keyring.load(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert main(["keyring", str(path)]) == 0
    assert Keyring.load(path).master == first.master  # not regenerated
    assert main(["keyring", str(path), "--rotate"]) == 0
    rotated = Keyring.load(path)
    assert rotated.master == first.master
    assert rotated.current != first.current
    assert set(first.data_keys) < set(rotated.data_keys)
    assert str(path) in capsys.readouterr().out


def test_an_unreadable_keyring_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keyring.json"
    path.write_text("not a keyring", encoding="utf-8")
    assert main(["keyring", str(path)]) == 2
    assert "cannot read the keyring" in capsys.readouterr().err
