"""A new user's run on third-party PyPI servers mcp-gym was never tried on (PyPI ``mcp-server-git`` per episode on a
fixture repository): a job none of whose episodes ran fails in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.thirdparty

BIN = Path(sys.executable).parent


def _server(name: str) -> str:
    """A PyPI server of the test extra, or a skip saying it is missing."""
    found = shutil.which(name) or BIN / name
    if not Path(found).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return str(found)


def _repo(path: Path) -> Path:
    """A one-commit git repository with an untracked ``notes.txt``: the fixture of a commit task."""
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "a@b.c"], ["config", "user.name", "A"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "README.md").write_text("hello\n")
    subprocess.run(["git", "add", "."], cwd=path, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=path, check=True)
    (path / "notes.txt").write_text("new file\n")
    return path


def test_an_eval_none_of_whose_episodes_ran_exits_1_naming_the_first_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Tasks with a ``fixture`` on a server whose command line names no ``{workspace}``: every episode fails to run.
    Before, the job printed an empty table and exited 0; now its last line says so, with the first error."""
    git = _server("mcp-server-git")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = _repo(tmp_path / "fixture" / "repo")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "commit", "prompt": "Commit notes.txt.", "fixture": "fixture/repo", "answer": "ok"}\n'
                     '{"id": "log", "prompt": "Last commit message?", "fixture": "fixture/repo", "answer": "init"}\n')
    from mcp_gym.cli import main

    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HYDRA_FULL_ERROR", "0")
        code = main(["eval", "env=custom", f'+env.servers.git="{git} --repository {repo}"', f"env.tasks={tasks}",
                     "policy=oracle", "samples=1", "launcher.progress=false", f"out={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mcp-gym eval: all 2 episodes of this run failed to run (none recorded); first error: "
                           "ValueError: task '"), err
    assert last.endswith("' has a fixture but no server command line names {workspace}"), err
    assert not list((tmp_path / "run").glob("episodes/*.parquet"))
