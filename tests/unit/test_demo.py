"""The demo shows the protocol at work, refusals included, and the CLI runs it."""

from __future__ import annotations

import pytest

from reach import __version__
from reach.tools import demo
from reach.tools.cli import main


def test_the_demo_round_trips_an_envelope_and_refuses_every_bad_input(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = demo.run()
    assert "decoded   equal to the original: True" in lines
    refused = [line for line in lines if line.startswith("refused")]
    assert len(refused) == 5, refused
    kinds = " ".join(refused)
    for name in ("CodecError", "ProtocolError", "SchemaIncompatible"):
        assert f": {name}: " in kinds
    assert any("bad utf-8: CodecError" in line for line in refused)
    assert any("oversize : CodecError" in line for line in refused)
    assert any("error     arrives typed: AgentNotFound (fatal)" in line for line in lines)
    assert capsys.readouterr().out.splitlines() == lines


def test_the_demo_appends_to_a_given_list() -> None:
    out = ["before"]
    assert demo.run(out) is out
    assert out[0] == "before"
    assert len(out) > 5


def test_the_cli_protocol_demo_returns_zero(capsys: pytest.CaptureFixture[str]) -> None:
    # Plain `reach demo` goes on to start Ray; unit tests stay without Ray.
    assert main(["demo", "--protocol-only"]) == 0
    out = capsys.readouterr().out
    assert "equal to the original: True" in out
    assert "refused   malformed: CodecError" in out


def test_the_cli_version_command_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == __version__


def test_the_cli_without_a_command_exits_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "usage: reach" in capsys.readouterr().err
