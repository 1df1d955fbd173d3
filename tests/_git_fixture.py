"""The git fixture of the mcp-server-git tests and benchmarks (tests/test_generate.py, scripts/bench/benchmark_eval.py
``--bench git``): a repository with three commits on ``main`` at a fixed date, a changed tracked file and an untracked
one, so that every git tool has something to show."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

DATE = "2026-01-02T03:04:05Z"
"""The commits' author and committer date."""


def make_git_repo(repo: Path) -> Path:
    """Make the fixture repository at ``repo`` (which must not exist); returns it."""
    repo.mkdir()
    git = ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.com", "-C", str(repo)]
    env = {"GIT_AUTHOR_DATE": DATE, "GIT_COMMITTER_DATE": DATE, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    for i, name in enumerate(["alpha.txt", "beta.txt", "gamma.txt"]):
        (repo / name).write_text(f"{name} line {i}\n")
        subprocess.run([*git, "add", name], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"add {name}"], check=True, env=env)
    (repo / "delta.txt").write_text("not tracked yet\n")
    (repo / "alpha.txt").write_text("alpha changed\n")
    return repo
