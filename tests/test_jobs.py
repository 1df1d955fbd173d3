"""The ``mcp-gym`` command end to end: collect, eval, export-sft, demo, serve, inspect, multirun, Ctrl-C and resume."""

from __future__ import annotations

import itertools
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import free_port, wait_for_port
from test_policies import serve_chat

from mcp_gym.cli import main
from mcp_gym.jobs.metrics import pass_at_k
from mcp_gym.recording import RunDirectory, load

FAST = ["env=counter", "env.transport=inprocess", "launcher.progress=false"]


def _keyed_actions(run: Path) -> dict[str, list[tuple[str, str]]]:
    """episode key -> its (tool, arguments) calls, from a recording."""
    rec = load(run)
    keys = dict(zip(rec.episodes["episode_id"], rec.episodes["episode_key"], strict=True))
    out: dict[str, list[tuple[int, str, str]]] = {}
    for s in rec.steps:
        out.setdefault(keys[s["episode_id"]], []).append((s["step_index"], s["tool"], s["arguments"]))
    return {k: [(t, a) for _, t, a in sorted(v)] for k, v in out.items()}


def test_pass_at_k_matches_counting_subsets() -> None:
    for n, c, k in [(5, 0, 1), (5, 2, 1), (5, 2, 3), (6, 5, 2), (4, 4, 4), (10, 3, 5)]:
        subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
        assert math.isclose(pass_at_k(n, c, k), sum(any(s) for s in subsets) / len(subsets))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_collect_eval_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "collect"
    assert main(["collect", *FAST, "policy=oracle", "episodes=8", f"out={run}"]) == 0
    assert RunDirectory(run).is_complete() and len(load(run).episodes) == 8
    assert main(["collect", *FAST, "policy=oracle", "episodes=8", f"out={run}"]) == 0  # nothing left to do
    assert len(load(run).episodes) == 8
    assert (run / ".hydra" / "config.yaml").exists()

    ev = tmp_path / "eval"
    assert main(["eval", *FAST, "policy=oracle", "samples=2", f"out={ev}"]) == 0
    assert "pass@2" in capsys.readouterr().out  # the summary table
    report = ev / "report"
    summary = json.loads((report / "results.json").read_text())["summary"]
    assert (summary["episodes"], summary["tasks"]) == (48, 24)
    assert summary["success_rate"] == summary["pass@1"] == summary["pass@2"] == 1.0
    assert summary["tool_call_ms"]["p50"] > 0 and summary["terminations"] == {"done": 48}
    assert pq.read_table(report / "per_task.parquet").num_rows == 24
    assert all((report / f).stat().st_size > 0 for f in ("success_by_task.png", "reward_hist.png", "steps_hist.png"))

    sft = tmp_path / "sft"
    assert main(["export-sft", f"runs=[{run}]", f"out={sft}", "sft.dedupe=false"]) == 0
    rows = pq.read_table(next((sft / "data").glob("train-*.parquet")))
    assert rows.num_rows == 8 and "messages" in rows.column_names

    assert main(["diff-tools", str(run), str(ev)]) == 0  # same server, same tools
    assert "no changes" in capsys.readouterr().out


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", *FAST, "episodes=6", "demo.eval_samples=2", "demo.pass_k=[1,2]", f"out={out}"]) == 0
    table = capsys.readouterr().out
    assert "oracle" in table and "random" in table and "pass@2" in table
    for kind in ("oracle", "random"):
        assert len(load(out / f"collect-{kind}").episodes) == 6
        assert (out / f"eval-{kind}" / "report" / "results.json").exists()
    oracle = json.loads((out / "eval-oracle" / "report" / "results.json").read_text())["summary"]
    assert oracle["success_rate"] == 1.0
    assert any((out / "sft" / "data").glob("train-*.parquet"))


def test_multirun(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    assert main(["collect", "-m", *FAST, "policy=random,oracle", "episodes=3", f"hydra.sweep.dir={sweep}"]) == 0
    for i, kind in enumerate(["random", "oracle"]):
        run = sweep / f"{i}-Counter-{kind}"
        assert RunDirectory(run).manifest["metadata"]["policy"]["kind"] == kind
        assert len(load(run).episodes) == 3


def test_bad_override_fails(tmp_path: Path) -> None:
    assert main(["collect", *FAST, "no_such_key=1", f"out={tmp_path}"]) != 0
    assert main(["collect", *FAST, "policy=nope", f"out={tmp_path}"]) != 0


def test_same_seed_same_episodes_at_any_concurrency(tmp_path: Path) -> None:
    args = [*FAST, "policy=random", "episodes=12", "seed=3"]
    assert main(["collect", *args, "launcher.num_envs=1", f"out={tmp_path / 'a'}"]) == 0
    assert main(["collect", *args, "launcher.num_envs=6", f"out={tmp_path / 'b'}"]) == 0
    a, b = _keyed_actions(tmp_path / "a"), _keyed_actions(tmp_path / "b")
    assert len(a) == 12 and a == b


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcp_gym.cli", *args]


def test_interrupt_and_resume(tmp_path: Path) -> None:
    """SIGINT a collection after some episodes finished; it exits 130 keeping them, and the rerun completes the plan.

    The policy is an LLM behind a local chat-completions server answering in 20 ms, so the run takes seconds."""
    run = tmp_path / "run"
    with serve_chat(delay=0.02) as (url, script):
        cmd = _cli("collect", *FAST, "policy=openai", f"policy.base_url={url}", "policy.api_key=sk-test",
                   "episodes=60", "launcher.num_envs=2", f"out={run}")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if (run / "manifest.json").exists() and len(RunDirectory(run).done_keys()) >= 5:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, output
        done = RunDirectory(run).done_keys()
        assert 5 <= len(done) < 60, output
        assert len(load(run).episodes) == len(done)

        resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert script.problems == []
    assert f"60 of 60 planned episodes recorded ({60 - len(done)} new" in resumed.stdout
    episodes = load(run).episodes
    assert len(episodes) == 60 and sorted(episodes["episode_key"]) == sorted(RunDirectory(run).planned)
    assert all(episodes["success"])


def test_serve_and_inspect(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    server = subprocess.Popen(_cli("serve", "counter", "--transport", "http", "--port", str(port)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc=server)
        assert main(["inspect", f"http://127.0.0.1:{port}/mcp", "--json"]) == 0
        listing = json.loads(capsys.readouterr().out)
        assert listing["server"]["name"] == "mcp-gym-counter"
        assert {"add", "get_count"} <= {t["name"] for t in listing["tools"]}
        assert [r["uri"] for r in listing["resources"]] == ["counter://state"]
    finally:
        server.terminate()
        server.wait(10)
    monkeypatch.setenv("MCP_GYM_DIAGNOSTICS", "1")  # the server inherits our environment
    assert main(["inspect", f"{sys.executable} -m mcp_gym.envs.counter.server"]) == 0
    shown = capsys.readouterr().out
    assert "Tools (" in shown and "unlock_bonus" in shown and "counter://state" in shown
    assert main(["inspect", "http://127.0.0.1:1/mcp", "--timeout", "3"]) == 1


def test_ray_launcher_cleanup_suppresses_errors_but_not_ctrl_c() -> None:
    """Killing dead Ray actors may raise anything; Ctrl-C during that clean-up must still stop the job."""
    from mcp_gym.jobs.ray_launcher import _suppress

    with _suppress():
        raise RuntimeError("actor already dead")
    for stop in (KeyboardInterrupt, SystemExit):
        with pytest.raises(stop), _suppress():
            raise stop()
