"""Envs as packages: ``mcp-gym envs new`` scaffolds an installable env; installed envs are found through the
``mcp_gym.envs`` entry-point group by ``mcp-gym envs list``, ``env=NAME`` jobs and ``gymnasium.make``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import gymnasium as gym
import pytest
from conftest import start_server, stop_process

from mcp_gym.cli import main
from mcp_gym.envs import make_env, register_all
from mcp_gym.envs.packages import installed_envs, list_envs, scaffold
from mcp_gym.tasks import load_tasks

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def _declare(site: Path, dist: str, entry_points: dict[str, str]) -> None:
    """Declare installed-package metadata in ``site`` (a folder on sys.path), as pip's install would."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[mcp_gym.envs]\n{lines}")


@pytest.fixture
def demo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scaffolded ``demo-env`` made importable and declared (its package folder on sys.path, with dist-info)."""
    root = scaffold("demo-env", tmp_path)
    _declare(root, "demo-env", {"demo-env": "demo_env"})
    monkeypatch.syspath_prepend(str(root))
    yield root
    for mod in [m for m in sys.modules if m == "demo_env" or m.startswith("demo_env.")]:
        del sys.modules[mod]
    gym.registry.pop("mcp_gym/demo-env-v0", None)


def test_a_scaffolded_package_is_valid(tmp_path: Path) -> None:
    root = scaffold("demo-env", tmp_path)
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert names == ["README.md", "demo_env/__init__.py", "demo_env/server.py", "demo_env/tasks.jsonl",
                     "demo_env/tasks.py", "pyproject.toml", "tests/test_demo_env.py"]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == "demo-env"
    assert project["entry-points"]["mcp_gym.envs"] == {"demo-env": "demo_env"}
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "E,F,W,I,UP,B,SIM",
                           "--line-length", "120", str(root)], capture_output=True, text=True, timeout=120)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    tasks = load_tasks(root / "demo_env" / "tasks.jsonl")
    assert len(tasks) == 6 and all(t.solution and t.answer for t in tasks)
    assert {t.id for t in tasks} == {f"demo-env-{i:03d}" for i in range(6)}


def test_envs_new_refuses_a_bad_name_or_an_existing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "new", "Demo_Env", "--dir", str(tmp_path)]) == 2
    assert "env name 'Demo_Env'" in capsys.readouterr().err
    assert main(["envs", "new", "counter", "--dir", str(tmp_path)]) == 2
    assert "mcp-gym's own envs" in capsys.readouterr().err
    assert main(["envs", "new", "custom", "--dir", str(tmp_path)]) == 2
    assert main(["envs", "new", "demo-env", "--dir", str(tmp_path)]) == 0
    assert main(["envs", "new", "demo-env", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_an_installed_env_is_found_and_its_oracle_succeeds(demo_env: Path) -> None:
    assert installed_envs()["demo-env"].package == "demo-env 0.1.0"
    register_all()
    env = gym.make("mcp_gym/demo-env-v0")  # in-process server
    try:
        successes = 0
        for task in env.unwrapped.tasks:
            obs, info = env.reset(options={"task_id": task.id})
            for call in task.solution:
                obs, reward, terminated, truncated, info = env.step(dict(call))
            successes += bool(info["success"])
        assert successes == len(env.unwrapped.tasks) == 6
        obs, info = env.reset(options={"task_id": "demo-env-000"})
        *_, info = env.step({"tool": "submit", "arguments": {"answer": "41"}})  # a wrong answer fails
        assert info["success"] is False
    finally:
        env.close()
    envs = gym.make_vec("mcp_gym/demo-env-v0", num_envs=2)  # Gymnasium's vector entry point finds it too
    try:
        obs, info = envs.reset(seed=0)
        assert len(obs["task"]) == 2 and all("times" in t for t in obs["task"])
    finally:
        envs.close()


def test_env_name_runs_an_installed_env_as_a_job(demo_env: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eval"
    assert main(["eval", "env=demo-env", "env.transport=inprocess", "policy=oracle", f"out={out}"]) == 0
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert (summary["tasks"], summary["success_rate"]) == (2, 1.0)  # eval's split: test


def test_mcp_gym_serve_runs_an_installed_envs_server_over_http(demo_env: Path) -> None:
    pythonpath = os.pathsep.join(p for p in sys.path if p)
    proc, port = start_server([sys.executable, "-m", "mcp_gym.cli", "serve", "demo-env", "--transport", "http",
                               "--port", "0"], env={**os.environ, "PYTHONPATH": pythonpath})
    try:
        env = make_env("demo-env", url=f"http://127.0.0.1:{port}/mcp")
        try:
            for task in env.tasks:
                env.reset(options={"task_id": task.id})
                for call in task.solution:
                    *_, info = env.step(dict(call))
                assert info["success"], task.id
        finally:
            env.close()
    finally:
        stop_process(proc)


def test_a_broken_entry_point_is_one_line_and_the_others_are_listed(
        demo_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _declare(tmp_path / "broken", "broken-env", {"broken": "no_such_module_here"})
    monkeypatch.syspath_prepend(str(tmp_path / "broken"))
    rows, errors = list_envs()
    assert {"counter", "demo-env"} <= {r["env"] for r in rows}
    assert [r["tasks"] for r in rows if r["env"] == "demo-env"] == [6]
    assert len(errors) == 1 and "broken" in errors[0] and "broken-env 0.1.0" in errors[0]
    assert "no_such_module_here" in errors[0] and "\n" not in errors[0]
    assert main(["envs", "list"]) == 1
    out, err = capsys.readouterr()
    assert "demo-env 0.1.0" in out and "mcp_gym/Counter-v0" in out and "broken" not in out
    assert err.count("\n") == 1 and "package broken-env 0.1.0" in err
    with pytest.raises(ValueError, match="package broken-env 0.1.0"):
        make_env("broken")


def test_a_shadowed_or_twice_declared_name_is_reported(demo_env: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _declare(tmp_path / "other", "other-env", {"demo-env": "demo_env", "counter": "demo_env"})
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "other")])  # found after demo-env
    assert installed_envs()["demo-env"].package == "demo-env 0.1.0"  # the first found is used
    rows, errors = list_envs()
    assert [r["source"] for r in rows if r["env"] == "counter"] == [rows[0]["source"]]  # the bundled one only
    assert sorted(errors) == [
        "installed env 'counter' (package other-env 0.1.0, entry point counter = 'demo_env'): the name is mcp-gym's "
        "own env; the installed one is ignored",
        "installed env 'demo-env' (package other-env 0.1.0, entry point demo-env = 'demo_env'): also declared by "
        "package demo-env 0.1.0, which is used"]


@pytest.mark.slow
def test_envs_new_demo_env_installed_into_a_fresh_venv(tmp_path: Path) -> None:
    """The docs' worked example: scaffold, install into a fresh venv beside mcp-gym, list, eval with the oracle at
    100 % (its server a stdio subprocess), and the package's own test passes."""
    assert main(["envs", "new", "demo-env", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "demo-env"
    home = tmp_path / "venv"
    venv.create(home, with_pip=True)
    python = home / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    # mcp-gym and its dependencies: this interpreter's site-packages (with its editable mcp-gym), added as site dirs;
    # all of them, in order: a venv made with --system-site-packages has its dependencies in the system's
    parents = [sysconfig.get_paths()["purelib"], *(p for p in sys.path if Path(p).name in ("site-packages",
                                                                                          "dist-packages"))]
    adds = "; ".join(f"site.addsitedir({p!r})" for p in dict.fromkeys(parents) if Path(p).is_dir())
    (Path(site) / "mcp_gym_parent.pth").write_text(f"import site; {adds}\n")
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(root)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-2000:]

    def run(*args: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=300, cwd=cwd)

    listed = run("-m", "mcp_gym.cli", "envs", "list")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("demo-env "))
    assert row.split() == ["demo-env", "mcp_gym/demo-env-v0", "demo-env", "0.1.0", "6", "stdio"]
    ev = run("-m", "mcp_gym.cli", "eval", "env=demo-env", "policy=oracle", f"out={tmp_path / 'eval'}")
    assert ev.returncode == 0, ev.stderr[-2000:]
    summary = json.loads((tmp_path / "eval" / "report" / "results.json").read_text())["summary"]
    assert (summary["tasks"], summary["success_rate"]) == (2, 1.0)  # eval's split: test
    own = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=root)
    assert own.returncode == 0, own.stdout[-3000:]
    assert "2 passed" in own.stdout
