"""The example drivers in examples/ run end to end as a user runs them: as scripts, each on a Ray
of its own that it stops at the end, and on a running two-node cluster they join."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reach.tools.customer_service import QUESTIONS, classify

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Guards against a hang only; how long a run takes is for bench/, not for a test to assert.
HANG_GUARD_S = 300
ANSWER = re.compile(r"-> cs-router -> (cs-[a-z]+)-\d+ via (\S+)\s+trace=([0-9a-f]+)$")
HOLDS = {"cs-order": "order.query", "cs-logistics": "logistics.track",
         "cs-refund": "refund.request"}


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A private temp folder for the Ray a test starts (short: Ray's socket paths live in it).

    Every process that Ray starts inherits ``RAY_TMPDIR`` naming it, which is how a test finds
    processes left behind; and Ray looks for a cluster to join only there, not in the machine's
    shared temp folder.
    """
    path = Path(tempfile.mkdtemp(prefix="reach-ex-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_example(name: str, *args: str, cwd: Path,
                ray_tmp: Path) -> subprocess.CompletedProcess[str]:
    """Runs ``examples/<name>.py`` as a script, without RAY_ADDRESS in its environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "REACH_SESSIONS")}
    env.update(RAY_TMPDIR=str(ray_tmp), PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, encoding="utf-8",
                          timeout=HANG_GUARD_S, check=False)


def processes_of(ray_tmp: Path) -> list[str]:
    """Command lines of the live processes started with RAY_TMPDIR set to ``ray_tmp``."""
    marker = f"RAY_TMPDIR={ray_tmp}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def assert_ray_stopped(ray_tmp: Path, timeout_s: float = 30.0) -> None:
    """Waits until no process of the Ray started under ``ray_tmp`` is left."""
    if not Path("/proc").is_dir():
        pytest.skip("finding leftover processes needs /proc")
    deadline = time.monotonic() + timeout_s
    while (left := processes_of(ray_tmp)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left running: {left}"


def stored_turns(db: Path, session_id: str) -> list[tuple[str, str]]:
    """(kind, sender) of a session's messages, read straight from the store's SQLite file."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT kind, sender FROM messages WHERE session_id = ? "
                            "ORDER BY seq", (session_id,)).fetchall()
    return [(str(kind), str(sender)) for kind, sender in rows]


def proofread_text(stdout: str) -> str:
    """The proofread text as printed (wrapped, indented, before its notes), in one line."""
    after = stdout.split("== proofread by pipeline-proofreader ==\n", 1)[1]
    text = after.split("\n  - ", 1)[0]
    return " ".join(text.split())


def session_of(stdout: str) -> str:
    found = re.search(r"messages kept in session (\S+)$", stdout, re.MULTILINE)
    assert found, stdout
    return found.group(1)


def test_customer_service_answers_every_question_by_capability_and_stops_its_own_ray(
    tmp_path: Path, ray_tmp: Path
) -> None:
    done = run_example("customer_service", cwd=tmp_path, ray_tmp=ray_tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == f"answered {len(QUESTIONS)}/{len(QUESTIONS)}"
    assert "supervisor customer-service: running, one_for_one, 5 children" in lines
    answers = [m.groups() for line in lines if (m := ANSWER.search(line))]
    assert [capability for _, capability, _ in answers] == [classify(q.text) for q in QUESTIONS]
    assert all(HOLDS[agent] == capability for agent, capability, _ in answers)
    assert len({trace for _, _, trace in answers}) == len(QUESTIONS)
    for q in QUESTIONS:
        assert f"[{q.customer}] {q.text}" in lines
    assert_ray_stopped(ray_tmp)


def test_content_pipeline_carries_its_state_in_a_session_that_outlives_the_run(
    tmp_path: Path, ray_tmp: Path
) -> None:
    done = run_example("content_pipeline", cwd=tmp_path, ray_tmp=ray_tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    stages = [line for line in out.splitlines() if line.startswith("== ")]
    assert stages == ["== research by pipeline-researcher ==", "== write by pipeline-writer ==",
                      "== proofread by pipeline-proofreader =="]
    final = proofread_text(out)
    assert "Actors share no memory; they communicate only by sending messages." in final
    assert "comunicate" not in final
    assert "6 messages kept in session" in out.splitlines()[-1]
    assert_ray_stopped(ray_tmp)
    # Ray is gone; the session is still on disk, where the embedded default keeps it.
    turns = stored_turns(tmp_path / ".reach" / "sessions.db", session_of(out))
    assert [kind for kind, _ in turns] == ["request", "reply"] * 3
    assert [sender for kind, sender in turns if kind == "reply"] == [
        "pipeline-researcher", "pipeline-writer", "pipeline-proofreader"]


def test_content_pipeline_carries_on_after_its_writer_is_killed_mid_draft(
    tmp_path: Path, ray_tmp: Path
) -> None:
    done = run_example("content_pipeline", "--crash-writer", cwd=tmp_path, ray_tmp=ray_tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "content-pipeline restarted pipeline-writer" in out
    assert "7 messages kept in session" in out.splitlines()[-1]
    assert_ray_stopped(ray_tmp)
    turns = stored_turns(tmp_path / ".reach" / "sessions.db", session_of(out))
    assert turns[2:5] == [("request", turns[2][1]), ("note", "pipeline-writer"),
                          ("reply", "pipeline-writer")]


def test_content_pipeline_exits_non_zero_when_a_stage_fails(
    tmp_path: Path, ray_tmp: Path
) -> None:
    done = run_example("content_pipeline", "--topic", "cooking pasta", cwd=tmp_path,
                       ray_tmp=ray_tmp)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == (
        "pipeline FAILED: ReachError: the sources say nothing about 'cooking pasta' "
        "(try a topic about actors or sessions)")
    assert_ray_stopped(ray_tmp)


def test_the_examples_join_a_running_two_node_cluster_and_run_again_on_it(
    tmp_path: Path, ray_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))  # the cluster's processes and files
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2,
                                                            "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        for name, success in (("customer_service", f"answered {len(QUESTIONS)}/"),
                              ("content_pipeline", "pipeline complete:")):
            for _ in range(2):  # the second run finds every name the first one used free again
                done = run_example(name, "--address", cluster.address, cwd=tmp_path,
                                   ray_tmp=ray_tmp)
                assert done.returncode == 0, done.stdout + done.stderr
                assert done.stdout.splitlines()[-1].startswith(success)
                assert "Connecting to existing Ray cluster" in done.stderr
    finally:
        cluster.shutdown()


A2A_ANSWER = re.compile(r"^  A2A client -> router-1 -> (\S+) via (\S+)\s+trace=([0-9a-f]+)$")


@pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                    reason="the A2A example runs the Node refund agent: node and npm are needed "
                           "(Node 20 or later on the PATH)")
def test_a2a_customer_service_is_asked_from_outside_and_refunds_go_to_the_node_agent(
    tmp_path: Path, ray_tmp: Path
) -> None:
    # Serve's HAProxy ports: reach.init picks free ones (another local Serve may hold the
    # defaults); this test's environment leaves them to it.
    done = run_example("a2a_customer_service", cwd=tmp_path, ray_tmp=ray_tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == f"answered {len(QUESTIONS)}/{len(QUESTIONS)}"
    answers = [m.groups() for line in lines if (m := A2A_ANSWER.search(line))]
    assert [capability for _, capability, _ in answers] == [classify(q.text) for q in QUESTIONS]
    for agent, capability, _ in answers:
        assert (agent == "node-refunds") == (capability == "refund.request"), agent
    refunds = [line for line in lines if line.startswith("  node-refunds: ")]
    assert len(refunds) == sum(classify(q.text) == "refund.request" for q in QUESTIONS)
    assert all(re.match(r"  node-refunds: Refund of [\d.]+ for order [A-Z]-\d{4} issued\.", line)
               for line in refunds), refunds  # the Node agent's words, not reach's RefundAgent
    assert len({trace for _, _, trace in answers}) == len(QUESTIONS)
    for q in QUESTIONS:
        assert f"[{q.customer}] {q.text}" in lines
    assert_ray_stopped(ray_tmp)
