"""Porting a benchmark to mcp-gym without friction (issue 27): ``tasks validate`` plays the filled task like ``eval``,
graders off the event loop and bounded in time, the grader's episode context, budgets, and the newcomer's crashes.

The filesystem-style server is ``tests/servers/fs_server.py`` (absolute paths inside the served directory, like npm
``mcp-server-filesystem``), started per episode on ``{workspace}``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from mcp_gym.cli import main

FS_SERVER = ROOT / "tests" / "servers" / "fs_server.py"
FS = f'+env.servers.fs="{sys.executable} {FS_SERVER} {{workspace}}"'
RUN = ["launcher.progress=false", "plots=false"]


def fs_benchmark(folder: Path, rows: list[dict[str, Any]]) -> Path:
    """A benchmark in a folder: ``tasks.jsonl`` and an initial folder ``initial/`` (``fixture``) holding ``in.txt``."""
    (folder / "initial").mkdir(parents=True)
    (folder / "initial" / "in.txt").write_text("hello", encoding="utf-8")
    tasks = folder / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"fixture": "initial", **r}) + "\n" for r in rows), encoding="utf-8")
    return tasks


def copy_task(i: int, text: str) -> dict[str, Any]:
    """Read ``in.txt``, write ``out<i>.txt``: graded on the final file tree."""
    return {"id": f"copy-{i}", "prompt": f"Write {text!r} to out{i}.txt in {{workspace}}.",
            "grader": {"kind": "files", "expect": {f"out{i}.txt": text}},
            "solution": [{"tool": "read_file", "arguments": {"path": "{workspace}/in.txt"}},
                         {"tool": "write_file", "arguments": {"path": f"{{workspace}}/out{i}.txt", "content": text}}]}


# -- item 1: tasks validate plays the filled task, as eval does --------------------------------------------------------
def test_validate_passes_a_workspace_benchmark_that_eval_scores_full(tmp_path: Path) -> None:
    tasks = fs_benchmark(tmp_path / "bench", [copy_task(i, f"text {i}") for i in range(4)])
    out = tmp_path / "validate"
    assert main(["tasks", "validate", "env=custom", FS, f"env.tasks={tasks}", f"out={out}"]) == 0
    checks = json.loads((out / "validation.json").read_text())
    assert [c["status"] for c in checks] == ["passed"] * 4
    ev = tmp_path / "eval"
    assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "policy=oracle", "samples=1", f"out={ev}", *RUN]) == 0
    assert json.loads((ev / "report" / "results.json").read_text())["summary"]["success_rate"] == 1.0


def test_validate_names_the_failing_call_and_the_limit_that_cut_a_solution(tmp_path: Path) -> None:
    broken = copy_task(0, "x")
    broken["solution"][1]["arguments"]["path"] = "/etc/out0.txt"  # outside the workspace: the server refuses it
    long = copy_task(1, "y")
    long["solution"] = [long["solution"][0]] * 5 + long["solution"]  # 7 calls, max_steps 4
    tasks = fs_benchmark(tmp_path / "bench", [broken, long])
    out = tmp_path / "validate"
    assert main(["tasks", "validate", "env=custom", FS, f"env.tasks={tasks}", "env.max_steps=4", f"out={out}"]) == 1
    checks = {c["task_id"]: c for c in json.loads((out / "validation.json").read_text())}
    bad = checks["copy-0"]
    assert bad["status"] == "failed" and bad["limit"] is None
    assert bad["failed_call"]["step"] == 2 and bad["failed_call"]["tool"] == "write_file"
    assert "Access denied" in bad["failed_call"]["error"] and "first failed call: step 2 write_file" in bad["reason"]
    cut = checks["copy-1"]
    assert cut["status"] == "failed" and cut["limit"] == "max_steps after 4 of 7 solution calls"
    assert "cut short by max_steps" in cut["reason"]


# -- newcomer: a server given as {command:, env:} without args ---------------------------------------------------------
def test_a_command_with_env_and_no_args_starts(tmp_path: Path) -> None:
    from mcp_gym.client.specs import Stdio, normalise_servers

    spec = normalise_servers({"fs": {"command": f"{sys.executable} {FS_SERVER} /tmp", "env": {"MODE": "1"}}})["fs"]
    assert isinstance(spec, Stdio) and list(spec.args) == [str(FS_SERVER), "/tmp"] and spec.env == {"MODE": "1"}
    tasks = fs_benchmark(tmp_path / "bench", [copy_task(0, "z")])
    server = f'+env.servers.fs={{command: "{sys.executable} {FS_SERVER} {{workspace}}", env: {{MODE: "1"}}}}'
    out = tmp_path / "validate"
    assert main(["tasks", "validate", "env=custom", server, f"env.tasks={tasks}", f"out={out}"]) == 0
    with pytest.raises(ValueError, match="env is for command-line"):
        normalise_servers({"api": {"url": "https://host/mcp", "env": {"K": "v"}}})
