"""The benchmarks as modules of the package, and `reach bench` running them with live progress."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import reach.tools
from reach.bench import BENCHMARKS, run_benchmark, seed_scenario, tracing, turns
from reach.bench.progress import Meter
from reach.bench.results import folder, write
from reach.errors import ConfigError
from reach.tools import benchchart, cli
from reach.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: Each benchmark's command-line flags as they were when the benchmarks were scripts in bench/,
#: and the --out every one of them has now.
FLAGS = {
    "codec": ["--quick"],
    "trace_store": ["--spans", "--batch", "--quick"],
    "seed_scenario": ["--messages", "--inflight", "--address", "--quick", "--rounds",
                      "--contestant"],
    "registry_scale": ["--agents", "--tags", "--hosts", "--queries", "--address", "--quick"],
    "chaos": ["--tasks", "--inflight", "--kill-every", "--address", "--quick"],
    "sessions": ["--messages", "--store-messages", "--callers", "--per-call", "--reads",
                 "--session-messages", "--address", "--quick"],
    "io_bound": ["--requests", "--inflight", "--address", "--quick"],
    "restart": ["--restarts", "--address", "--logs", "--probe-every", "--quick", "--scenario",
                "--crashes", "--crash-every"],
    "gateway": ["--requests", "--clients", "--replicas", "--address", "--no-outbound", "--quick"],
    "remote_agent": ["--requests", "--clients", "--agents", "--address", "--agent-nice",
                     "--quick"],
    "tracing": ["--messages", "--inflight", "--address", "--quick", "--rounds", "--contestant"],
}


def test_every_benchmark_is_a_module_of_the_package_with_a_main() -> None:
    assert set(FLAGS) == set(BENCHMARKS)
    for name in BENCHMARKS:
        module = importlib.import_module(f"reach.bench.{name}")
        assert Path(module.__file__ or "").parent == ROOT / "reach" / "bench", name
        assert callable(module.main), name


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_keeps_its_flags_and_takes_a_results_folder(
    name: str, capsys: pytest.CaptureFixture[str],
) -> None:
    module = importlib.import_module(f"reach.bench.{name}")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    usage = capsys.readouterr().out
    for flag in [*FLAGS[name], "--out"]:
        assert flag in usage, (name, flag)


def test_the_agents_ray_workers_import_come_from_one_installed_module() -> None:
    from reach.bench import agents, gateway, remote_agent

    assert gateway.EchoAgent is remote_agent.EchoAgent is agents.EchoAgent
    assert agents.EchoAgent.__module__ == "reach.bench.agents"


def test_the_repository_entry_point_runs_the_package_module() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "restart.py"), "--help"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert "--probe-every" in out
    assert "--out" in out


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_repository_entry_point_runs_its_own_benchmark_and_holds_no_code_of_its_own(
    name: str,
) -> None:
    source = (ROOT / "bench" / f"{name}.py").read_text(encoding="utf-8")
    assert f'run_benchmark("{name}", sys.argv[1:], out=RESULTS)' in source
    assert "def " not in source
    assert "class " not in source


def test_the_codec_benchmark_runs_without_starting_ray(tmp_path: Path) -> None:
    code = ("import sys, ray, reach.bench.codec as b; "
            "status = b.main(['--quick', '--out', sys.argv[1]]); "
            "print(status, ray.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert out.strip().splitlines()[-1] == "0 False"
    assert list(tmp_path.rglob("*.json")), "the benchmark wrote no figures"


def test_an_unknown_benchmark_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as raised:
        run_benchmark("nonsense", [])
    assert raised.value.details["setting"] == "benchmark"


def test_reach_bench_help_lists_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    usage = " ".join(capsys.readouterr().out.split())
    assert f"benchmarks, in order: {', '.join(BENCHMARKS)}" in usage
    assert "--address" in usage
    assert "--out" in usage


def test_reach_bench_runs_the_codec_benchmark_from_the_package_in_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--only", "codec", "--quick", "--out", "tmp"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "[1/1] codec: python -m reach.bench.codec --quick --out tmp"
    rates = [line for line in out if "µs per envelope (" in line and "envelopes/s)" in line]
    assert len(rates) == 12, "each case's three timings are said as they are measured"
    assert rates[0].split()[0].endswith("s"), "each streamed line shows the elapsed time"
    assert out[-2].startswith("[1/1] codec: done in ")
    assert out[-1] == f"chart: {Path('tmp') / 'quick' / 'chart.png'}"
    written = json.loads((tmp_path / "tmp" / "quick" / "codec.json").read_text(encoding="utf-8"))
    assert list(written["cases"]) == ["single", "batch 1", "batch 10", "batch 100"]
    assert written["repeats"] == 2
    results, problems = benchchart.load(tmp_path / "tmp" / "quick")
    assert problems == []
    assert set(results) == {"codec"}
    assert not (tmp_path / "tmp" / "codec.json").exists(), "a quick run keeps to quick/"


def fake_benchmarks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **bodies: str) -> None:
    """Benchmarks named as reach's are, in a package of their own that ``reach bench`` runs."""
    package = tmp_path / "fakebench"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    for name, body in bodies.items():
        (package / f"{name}.py").write_text(textwrap.dedent(body), encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(cli, "BENCH_PACKAGE", "fakebench")


def test_a_failing_benchmark_is_reported_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_benchmarks(tmp_path, monkeypatch,
                    codec="import sys\nprint('about to fail')\nsys.exit(3)\n",
                    sessions="print('sessions ran')\n")
    out = tmp_path / "results"
    assert main(["bench", "--only", "sessions", "codec", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("[")] == [
        "[1/2] codec", "[1/2] codec", "[2/2] sessions", "[2/2] sessions"], "in bench order"
    assert any(line.endswith("about to fail") for line in lines)
    assert any("codec: FAILED (3) in " in line for line in lines)
    assert any(line.endswith("sessions ran") for line in lines)
    assert "reach bench: failed: codec" in captured.err
    assert (out / "chart.png").read_bytes().startswith(b"\x89PNG")


ECHO_ADDRESS = "import os\nprint('address', os.environ['RAY_ADDRESS'])\n"


@pytest.mark.parametrize(("given", "seen"), [([], "local"), (["--address", "auto"], "auto")])
def test_each_benchmark_runs_on_a_ray_of_its_own_unless_an_address_is_given(
    given: list[str], seen: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake_benchmarks(tmp_path, monkeypatch, chaos=ECHO_ADDRESS)
    assert main(["bench", "--only", "chaos", "--out", str(tmp_path / "r"), *given]) == 0
    assert any(line.endswith(f"address {seen}") for line in capsys.readouterr().out.splitlines())


def test_chart_only_runs_nothing_and_draws_the_results_there_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    (out / "codec.json").write_text(json.dumps({"cases": {"single": {
        "reach_us": 13.0, "reach_schema_us": 20.0, "pickle_us": 4.0}}}), encoding="utf-8")
    assert main(["bench", "--chart-only", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"chart: {out / 'chart.png'}\n"
    assert (out / "chart.png").read_bytes().startswith(b"\x89PNG")


def test_without_matplotlib_the_benchmarks_run_and_the_chart_is_skipped_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_benchmarks(tmp_path, monkeypatch, codec="print('codec ran')\n")
    monkeypatch.delattr(reach.tools, "benchchart")  # as if never imported, and matplotlib absent
    monkeypatch.delitem(sys.modules, "reach.tools.benchchart")
    for name in ("matplotlib", "matplotlib.axes"):
        monkeypatch.setitem(sys.modules, name, None)
    out = tmp_path / "results"
    assert main(["bench", "--only", "codec", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert any(line.endswith("codec ran") for line in captured.out.splitlines())
    assert "chart skipped: it needs matplotlib" in captured.err
    assert "pip install 'reach[bench]'" in captured.err
    assert not (out / "chart.png").exists()
    assert main(["bench", "--chart-only", "--out", str(out)]) == 2, "the chart was all asked"


def test_an_unknown_benchmark_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--only", "nonsense"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_results_of_a_quick_run_go_to_the_quick_subfolder(tmp_path: Path) -> None:
    assert folder(tmp_path, quick=False) == tmp_path
    assert folder(tmp_path, quick=True) == tmp_path / "quick"
    args = argparse.Namespace(out=tmp_path, quick=True)
    path = write(args, "codec", {"text": "无线"}, ensure_ascii=False)
    assert path == tmp_path / "quick" / "codec.json"
    assert path.read_text(encoding="utf-8") == '{\n  "text": "无线"\n}\n'
    ascii_path = write(argparse.Namespace(out=tmp_path, quick=False), "x", {"text": "无线"})
    assert ascii_path.read_text(encoding="utf-8") == '{\n  "text": "\\u65e0\\u7ebf"\n}\n'


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_meter_says_its_rate_once_a_report_is_due_and_not_before() -> None:
    clock, lines = FakeClock(), []
    meter = Meter("packed", total=1000, every_s=2.0, clock=clock, out=lines.append)
    meter.add(100)
    clock.now += 1.0
    meter.add(100)
    assert lines == []
    clock.now += 1.0
    meter.add(200)
    assert lines == ["  packed: 400/1,000 done, 200 msg/s now, 200 msg/s overall"]
    clock.now += 2.0
    meter.add(200)
    assert lines[-1] == "  packed: 600/1,000 done, 100 msg/s now, 150 msg/s overall"


async def test_a_watched_meter_reports_a_stall_instead_of_falling_silent() -> None:
    lines: list[str] = []
    said = asyncio.Event()

    def out(line: str) -> None:
        lines.append(line)
        said.set()

    meter = Meter("stuck", unit="tasks/s", every_s=0.05, out=out)
    async with meter.watching():
        await asyncio.wait_for(said.wait(), timeout=10)
    assert lines[0] == "  stuck: 0 done, 0 tasks/s now, 0 tasks/s overall"


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the machine's CPU is read there")
def test_the_machine_s_cpu_time_grows_with_work_done_in_any_process() -> None:
    before = seed_scenario.machine_cpu_s()
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.3"
                    "\nwhile time.process_time() < end: pass"], check=True)
    after = seed_scenario.machine_cpu_s()
    assert before is not None
    assert after is not None
    assert after - before >= 0.25  # the child's 0.3 s, whichever core ran it


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="processes are read under /proc")
def test_each_process_s_cpu_is_read_by_its_name() -> None:
    before = seed_scenario.processes_cpu_s()
    with subprocess.Popen([sys.executable, "-c", "import sys, time\nend = time.process_time()"
                           " + 0.3\nwhile time.process_time() < end: pass\nprint('burnt', "
                           "flush=True)\nsys.stdin.read()"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline() == "burnt\n"
        after = seed_scenario.processes_cpu_s()
        child.stdin.close()
    assert before[os.getpid()][0] == after[os.getpid()][0] == "driver"
    name, cpu = after[child.pid]
    assert name == os.path.basename(sys.executable)
    assert cpu >= 0.29
    assert seed_scenario.cpu_by_process(before, after, 1000)[name] >= 290


def test_cpu_by_process_counts_what_each_kind_used_per_message_the_most_first() -> None:
    before = {1: ("AgentHost", 1.0), 2: ("raylet", 5.0), 3: ("AgentHost", 2.0)}
    after = {1: ("AgentHost", 1.25), 3: ("AgentHost", 2.5), 4: ("TraceStore", 1.0)}
    # 2 ended (not counted), 4 started meanwhile (counted from nothing)
    assert list(seed_scenario.cpu_by_process(before, after, 1000).items()) == [
        ("TraceStore", 1000.0), ("AgentHost", 750.0)]


def test_without_proc_stat_the_machine_s_cpu_time_is_not_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*_args: object, **_kwargs: object) -> None:
        raise FileNotFoundError("/proc/stat")

    monkeypatch.setattr("builtins.open", missing)
    assert seed_scenario.machine_cpu_s() is None


def test_the_means_of_an_even_number_of_alternating_rounds_cancel_a_steady_drift(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Three identical contestants on a machine that slows by 1% with every round run: the
    # best rounds favour whoever runs first; the means of 4 rounds in alternating order are
    # equal, those of 3 nearly so.
    slot = iter(range(100))

    def run_contestant(name: str, *_: object, **__: object) -> dict[str, float]:
        return {"msgs_per_s": 10_000 * (1 - 0.01 * next(slot)), "p50_ms": 1.0, "p95_ms": 2.0,
                "p99_ms": 3.0}

    async def settle() -> None:
        return None

    monkeypatch.setattr(seed_scenario, "run_contestant", run_contestant)
    monkeypatch.setattr(seed_scenario, "settle", settle)
    names = ("off", "one", "all")
    for rounds, most_apart in ((4, 1e-9), (3, 70.0)):
        slot = iter(range(100))
        args = argparse.Namespace(rounds=rounds)
        got = asyncio.run(seed_scenario.best_rounds(names, "addr", args))
        assert got["off"]["msgs_per_s"] == 10_000  # it ran first
        assert got["all"]["msgs_per_s"] < got["one"]["msgs_per_s"] < 10_000
        means = [got[name]["mean_msgs_per_s"] for name in names]
        assert max(means) - min(means) <= most_apart, means
        assert [len(got[name]["rounds_msgs_per_s"]) for name in names] == [rounds] * 3


def test_each_turn_s_cost_is_against_off_s_of_the_same_seconds_whatever_the_speed() -> None:
    # A machine whose speed moves from turn to turn, up and down, and holds within one:
    # contestants costing 2% and 12% cost that in every turn, in msg/s and in CPU a message.
    speeds = [1.0, 0.82, 1.12, 0.9, 0.95, 1.05]
    off = [10_000 * speed for speed in speeds]
    for cost in (0.02, 0.12):
        costs = turns.paired_costs([rate * (1 - cost) for rate in off], off)
        assert costs == pytest.approx([cost] * 6)
        cpu = [60 / speed for speed in speeds]
        assert turns.paired_costs([us * (1 + cost) for us in cpu], cpu,
                                  more_is_better=False) == pytest.approx([cost] * 6)
    with pytest.raises(ValueError, match=r"shorter|longer"):
        turns.paired_costs([1.0], [1.0, 2.0])


class _Machine:
    """The turns started, and the machine's speed, which moves from one turn to the next."""

    def __init__(self) -> None:
        self.started: list[tuple[str, float | None]] = []
        self.speeds = iter([1.0, 0.8, 1.1, 0.9] * 100)
        self.now = 1.0


_MACHINE = _Machine()


class _Child:
    """A contestant's child driver, in a test: its turns' msg/s as the machine's speed and its
    cost make them."""

    def __init__(self, cmd: list[str]) -> None:
        self.name = cmd[cmd.index("--contestant") + 1]
        self.cost = {"off": 0.0, "one": 0.02, "all": 0.12, "again": 0.0}[self.name]
        self.answers: list[dict[str, object]] = [{"ready": True}]
        self.ended = False

    def begin(self, seconds: float | None = None) -> None:
        _MACHINE.started.append((self.name, seconds))
        if self.name == "off":  # the reference starts first: the speed of this moment
            _MACHINE.now = next(_MACHINE.speeds)
        now = _MACHINE.now
        self.answers.append({"msgs_per_s": 10_000 * now * (1 - self.cost),
                             "machine_cpu_us": 250.0, "processes_cpu_us": {"raylet": 1.0},
                             "driver_cpu_us": 60 / now * (1 + self.cost),
                             "hosts_cpu_us": 60 / now * (1 + self.cost),
                             "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0})

    def answer(self) -> dict[str, object]:
        return self.answers.pop(0)

    def end(self) -> None:
        self.ended = True


def test_off_runs_beside_each_other_contestant_and_each_costs_what_it_costs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    children: list[_Child] = []

    def child(cmd: list[str]) -> _Child:
        children.append(_Child(cmd))
        return children[-1]

    async def settle() -> None:
        return None

    monkeypatch.setattr(turns, "Child", child)
    monkeypatch.setattr(turns, "settle", settle)
    monkeypatch.setattr(tracing, "CONTESTANTS", ("off", "one", "all", "again"))
    _MACHINE.started.clear()
    args = argparse.Namespace(rounds=2, turns=3, seconds=2.5, messages=5000, inflight=10)
    got = asyncio.run(turns.side_by_side(tracing.CONTESTANTS, "addr", args, module="m",
                                         show=lambda *_: None))
    assert len(children) == 8  # 4 a round
    assert all(child.ended for child in children)
    # In each turn, off starts beside each other contestant, in alternating order.
    started = _MACHINE.started
    pairs = [(started[i][0], started[i + 1][0]) for i in range(0, len(started), 2)]
    assert pairs[:6] == [("off", "one"), ("off", "all"), ("off", "again"),
                         ("off", "again"), ("off", "all"), ("off", "one")]
    assert {seconds for _, seconds in started} == {2.5}
    assert [len(got[name]["turns"]) for name in ("one", "all", "again")] == [6, 6, 6]
    assert len(got["off"]["turns_msgs_per_s"]) == 18
    # The whole machine's figures are both contestants' together: neither's, left out.
    assert not any(key in turn for name in ("one", "all", "again")
                   for turn in (*got[name]["turns"], *got["off"]["beside"][name])
                   for key in turns.MACHINE_FIGURES)
    tracing.compare(got)
    for name, cost in (("one", 0.02), ("all", 0.12), ("again", 0.0)):
        assert got[name]["cost_vs_off"] == pytest.approx(cost, abs=1e-4)
        assert got[name]["costs_vs_off"] == pytest.approx([cost] * 6, abs=1e-4)
        low, high = got[name]["cost_interval"]
        assert low <= got[name]["mean_cost_vs_off"] <= high
        assert got[name]["cpu_cost_vs_off"] == pytest.approx(cost, abs=1e-4)


def test_a_child_driver_measures_a_turn_for_each_line_it_is_told_until_its_input_ends(
        tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import asyncio
        from reach.bench.turns import serve

        async def measure(turn, seconds):
            return {"turn": turn, "seconds": seconds}

        asyncio.run(serve(measure))
        print("ended")
    """), encoding="utf-8")
    child = turns.Child([sys.executable, str(script)])
    assert child.answer() == turns.READY
    child.begin(1.5)
    assert child.answer() == {"turn": 0, "seconds": 1.5}
    child.begin()
    assert child.answer() == {"turn": 1, "seconds": None}
    child.end()
    assert child.proc.returncode == 0


def test_a_child_driver_that_fails_is_an_error_saying_what_it_said(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text("import sys\nprint('starting')\nsys.exit('no cluster here')\n",
                      encoding="utf-8")
    child = turns.Child([sys.executable, str(script)])
    with pytest.raises(subprocess.CalledProcessError) as caught:
        child.answer()
    assert "no cluster here" in caught.value.stderr
    child.end()


def test_a_round_that_answers_and_then_fails_is_an_error_all_the_same(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text("import sys\nprint('{\"msgs_per_s\": 1.0}', flush=True)\n"
                      "sys.exit('closing failed')\n", encoding="utf-8")
    child = turns.Child([sys.executable, str(script)])
    answered = child.answer()
    assert answered == {"msgs_per_s": 1.0}
    with pytest.raises(subprocess.CalledProcessError) as caught:
        child.end(answered)
    assert "closing failed" in caught.value.stderr


