"""First-hour potholes of issue 14: ``mcp-gym inspect`` on partial and replay servers, CLI user errors,
``sample()`` on a real third-party server, loading a run with ``datasets``, eval plot labels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import pyarrow as pa
import pytest
from conftest import bound_socket
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from mcp_gym import InProcess, MCPEnv, Stdio
from mcp_gym.cassette import cassette_path
from mcp_gym.cli import HIDDEN_NOTE, main
from mcp_gym.envs import load_env_tasks
from mcp_gym.servers.counter import make_server
from mcp_gym.spaces import ToolCallSpace

BAD_SERVER = str(Path(__file__).parent / "servers" / "bad_server.py")


def test_inspect_server_refusing_resource_templates(capsys: pytest.CaptureFixture[str]) -> None:
    """A server that declares resources but answers resources/templates/list with "method not found"."""
    target = f"{sys.executable} {BAD_SERVER} --resources"
    assert main(["inspect", target, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in listing["tools"]] == ["echo"]
    assert [r["uri"] for r in listing["resources"]] == ["bad://one"]
    assert listing["resource_templates"] == [] and "resource_templates" in listing["unavailable"]
    assert main(["inspect", target]) == 0
    shown = capsys.readouterr()
    assert "bad://one" in shown.out and "resource templates: not listed by the server" in shown.out
    assert "Traceback" not in shown.out + shown.err


class _Style(BaseModel):
    bold: bool = False


def _shape(style: _Style, size: int | None, align: Literal["left", "right"], rows: list[list[str]],
           flag: Annotated[bool | str, Field(json_schema_extra={"type": ["boolean", "string"]})] = False) -> str:
    """Shape some cells."""
    return "ok"


def test_inspect_names_the_type_of_every_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Arguments whose schema is a ``$ref`` (a model), a list of types, an ``anyOf`` or an enum are shown by what they
    are, as excel-mcp-server's ``settings*: WorkbookSettings`` and sequential-thinking's ``boolean|string``; they were
    ``any`` and ``['boolean', 'string']``."""
    server = MCPServer("shapes")
    server.tool(name="shape")(_shape)
    monkeypatch.setenv("COLUMNS", "400")
    env = MCPEnv(InProcess(server, record=tmp_path), tasks=["Shape."])
    env.reset(seed=0)
    env.close()
    assert main(["inspect", str(next(tmp_path.glob("*.jsonl")))]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "style*: _Style, size*: integer|null, align*: string, rows*: array, flag: boolean|string" in shown, shown


def test_inspect_replay_marks_hidden_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorded cassette inspects like its server; the hidden episode-control tools are marked."""
    monkeypatch.setenv("COLUMNS", "400")  # rich's table width: no wrapping inside the asserted cells
    env = MCPEnv(InProcess(make_server(), record=tmp_path), tasks=load_env_tasks("counter")[:1])
    env.reset(seed=0)
    env.close()
    cassette = cassette_path(tmp_path, "server")
    if not cassette.exists():
        cassette = next(tmp_path.glob("*.jsonl"))
    assert main(["inspect", str(cassette)]) == 0
    shown = capsys.readouterr()
    assert "Traceback" not in shown.out + shown.err
    assert "add" in shown.out
    assert f"mcp_gym_reset {HIDDEN_NOTE}" in shown.out and f"mcp_gym_state {HIDDEN_NOTE}" in shown.out
    assert f"get_count {HIDDEN_NOTE}" not in shown.out
    assert main(["inspect", str(cassette), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    hidden = {t["name"] for t in listing["tools"] if t.get("hidden")}
    assert hidden == {"mcp_gym_reset", "mcp_gym_state"}
    assert {"add", "get_count"} <= {t["name"] for t in listing["tools"]}


# -- CLI user errors ----------------------------------------------------------------------------------------------
def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcp_gym.cli", *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **env})


def test_version() -> None:
    from mcp_gym._version import __version__

    done = _cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"mcp-gym {__version__}"


@pytest.mark.slow
def test_one_run_as_a_string_and_a_missing_run(tmp_path: Path) -> None:
    run = tmp_path / "collect"
    assert main(["collect", "env=counter", "policy=oracle", "episodes=2", f"out={run}"]) == 0
    sft = tmp_path / "sft"
    assert main(["export-sft", f"runs={run}", f"out={sft}", "sft.dedupe=false"]) == 0  # a string: one run
    assert next((sft / "data").glob("train-*.parquet")).stat().st_size > 0
    missing = tmp_path / "no-such-run"
    done = _cli("export-sft", f"runs={missing}", f"out={tmp_path / 'sft2'}", HYDRA_FULL_ERROR="0")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"mcp-gym export-sft: no recorded run at '{missing}' (a run directory holds manifest.json, steps/ and "
        "episodes/)")
    full = _cli("export-sft", f"runs={missing}", f"out={tmp_path / 'sft2'}", HYDRA_FULL_ERROR="1")
    assert full.returncode != 0 and "Traceback" in full.stderr and "FileNotFoundError" in full.stderr


def test_unreachable_endpoint_names_the_url(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # through main in this process; a job's one-line failure as a process: tests/test_newcomer.py (item 9)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    capsys.readouterr()
    with bound_socket() as held:  # never listening: nothing listens on its port, and nothing else can start to
        url = f"http://127.0.0.1:{held.getsockname()[1]}/v1"
        code = main(["eval", "env=counter", "policy=openai", "policy.model=m", f"policy.base_url={url}",
                     "policy.retries=0", "samples=1", f"out={tmp_path / 'ev'}"])
    stderr = capsys.readouterr().err
    assert code == 1 and "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("mcp-gym eval: ") and f"{url}/chat/completions" in last and "policy.base_url" in last


# -- sample(): plausible values, fixed arguments ------------------------------------------------------------------
def test_sample_prefers_schema_values_and_small_numbers() -> None:
    space = ToolCallSpace({"t": {"type": "object", "required": ["mode", "n", "path", "k"], "properties": {
        "mode": {"type": "string", "default": "fast"}, "n": {"type": "integer"},
        "path": {"type": "string", "examples": ["/a", "/b"]}, "k": {"type": "string", "enum": ["x", "y"]}}}}, seed=0)
    calls = [space.sample()["arguments"] for _ in range(200)]
    assert sum(c["mode"] == "fast" for c in calls) > 120
    assert sum(c["path"] in ("/a", "/b") for c in calls) > 120
    assert sum(0 <= c["n"] <= 10 for c in calls) > 120
    assert all(c["k"] in ("x", "y") for c in calls)
    fixed = space.sample(fixed={"path": "/abs", "unknown": 1})["arguments"]
    assert fixed["path"] == "/abs" and "unknown" not in fixed
    space.sample_fixed = {"mode": "slow"}
    assert all(space.sample()["arguments"]["mode"] == "slow" for _ in range(20))


def test_random_calls_to_mcp_server_git_mostly_succeed_with_repo_path_fixed(tmp_path: Path) -> None:
    """PyPI mcp-server-git: every tool needs ``repo_path``; random values fail, the fixed one makes calls work."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "hello.txt").write_text("hello\n")
    subprocess.run([*git, "add", "hello.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    env = MCPEnv({"git": Stdio("mcp-server-git", ["--repository", str(repo)])}, tasks=["explore"], call_timeout=60.0)
    try:
        env.reset(seed=0)
        tools = [n for n in env.action_space.tool_names if n != "submit"]
        env.action_space.seed(0)
        successes = {}
        for label, fixed in (("random", {}), ("fixed", {"repo_path": str(repo)})):
            ok = 0
            for i in range(60):
                action = env.action_space.sample(mask=tools, fixed=fixed)
                assert label == "random" or action["arguments"]["repo_path"] == str(repo)
                _, _, terminated, truncated, info = env.step(action)
                ok += info.get("error") is None
                if terminated or truncated:
                    env.reset(seed=i)
            successes[label] = ok
    finally:
        env.close()
    assert successes["random"] <= 5 and successes["fixed"] >= 20, successes  # measured: 0 and 31 of 60


# -- a run directory is a Hugging Face dataset -----------------------------------------------------------------------
def test_run_directory_loads_with_datasets(tmp_path: Path) -> None:
    import datasets

    from mcp_gym.recording import load

    run = tmp_path / "run"
    assert main(["collect", "env=counter", "env.transport=inprocess", "policy=oracle", "episodes=3",
                 "launcher.progress=false", f"out={run}"]) == 0
    assert (run / "README.md").read_text().startswith("---\nconfigs:")
    rec = load(run)
    # in-progress files start with "." and must not be read (a torn one would break the whole load)
    (run / "steps" / ".part-zzz-0.parquet").write_bytes(b"PAR1 torn, no footer")
    (run / "episodes" / ".part-zzz-0.parquet.tmp").write_bytes(b"PAR1 torn")
    cache = str(tmp_path / "hf-cache")
    steps = datasets.load_dataset(str(run), "steps", split="train", cache_dir=cache)
    episodes = datasets.load_dataset(str(run), "episodes", split="train", cache_dir=cache)
    assert len(episodes) == len(rec.episodes) == 3 and len(steps) == len(rec.steps) > 3
    assert sorted(episodes["episode_key"]) == sorted(rec.episodes["episode_key"])
    assert set(steps["episode_id"]) == set(episodes["episode_id"])
    # datasets keys its cache by the card (patterns, not files): a run that grew must not load stale
    from mcp_gym.recording import RecordTrajectories

    task = load_env_tasks("counter")[0]
    env = RecordTrajectories(MCPEnv(InProcess(make_server()), tasks=[task]), run, policy="oracle")
    env.reset(seed=5)
    for call in task.solution:
        env.step(dict(call))
    env.close()
    assert len(load(run).episodes) == 4
    again = datasets.load_dataset(str(run), "episodes", split="train", cache_dir=cache)
    assert len(again) == 4


# -- eval plots -------------------------------------------------------------------------------------------------------
def test_eval_plots_name_env_and_policy_with_integer_step_ticks(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    from PIL import Image

    from mcp_gym.jobs.report import figures, plot_label
    from mcp_gym.recording import load

    ev = tmp_path / "eval"
    assert main(["eval", "env=counter", "env.transport=inprocess", "policy=oracle", "samples=1",
                 "launcher.progress=false", f"out={ev}"]) == 0
    config = json.loads((ev / "report" / "results.json").read_text())["config"]
    label = plot_label(config)
    assert label == "Counter · oracle" or ("oracle" in label and "?" not in label)
    for name in ("success_by_task", "reward_hist", "steps_hist"):  # the written PNGs carry the titles
        assert label in Image.open(ev / "report" / f"{name}.png").text["Title"]
    rec = load(ev)

    episodes = pa.Table.from_pylist(list(rec.episodes))
    figs = figures([{"task_id": "t", "success_rate": 1.0}], episodes, label)
    try:
        assert all(label in f.axes[0].get_title() for f in figs.values())
        for name in ("reward_hist", "steps_hist"):
            fig = figs[name]
            fig.canvas.draw()
            yticks = fig.axes[0].get_yticks()
            assert all(float(t).is_integer() for t in yticks), (name, yticks)
        xticks = figs["steps_hist"].axes[0].get_xticks()
        assert all(float(t).is_integer() for t in xticks), xticks
    finally:
        for f in figs.values():
            plt.close(f)
