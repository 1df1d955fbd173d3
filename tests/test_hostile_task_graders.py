"""A task file's ``grader`` naming code (``"module:function"``, ``{kind: python, function: ...}``): before, any
installed module was imported (its top-level code run) and any callable reachable from it called with the episode,
whatever ``env.trust_task_code`` said; only a module in the task file's own folder needed trust. A task file naming
``sys:exit`` hung ``mcp-gym eval`` for good (the grader's thread raised SystemExit). Now loading a task file refuses
a grader outside mcp-gym's own public functions unless the job trusts the task file's code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_gym.tasks import TaskDataError, load_task_source, load_tasks


def _tasks(folder: Path, *graders: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "Say hi", "answer": "hi", "grader": g}) + "\n"
                            for i, g in enumerate(graders)))
    return path


def test_eval_refuses_a_task_file_whose_grader_is_any_installed_function(tmp_path: Path) -> None:
    """Run as the user runs it, in its own process, bounded (before: it never ended)."""
    tasks = _tasks(tmp_path / "bench", "sys:exit")
    server = f'+env.servers.c="{sys.executable} -m mcp_gym.servers.counter"'
    try:
        done = subprocess.run([sys.executable, "-m", "mcp_gym.cli", "eval", "env=custom", server,
                               f"env.tasks={tasks}", "policy=oracle", "samples=1", f"out={tmp_path / 'out'}",
                               "launcher.progress=false", "plots=false"],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("mcp-gym eval did not end within 120 s with a task grader 'sys:exit'")
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert "task 't0'" in line and str(tasks) in line and "grader 'sys:exit'" in line
    assert "env.trust_task_code=true" in line


@pytest.mark.parametrize("grader", [
    "sys:exit", "builtins:exit", "os:system", "subprocess:getoutput", "os.path:os.system",
    {"kind": "python", "function": "faulthandler:_sigsegv"},
    {"kind": "all", "of": ["exact", {"kind": "python", "function": "shutil:rmtree"}]},
    ["exact", "pip.__main__:main"],
    "mcp_gym.graders.answers:os.system",  # an attribute path through a module's imports
    "mcp_gym.jobs._untrusted:_who",  # a private helper
])
def test_a_task_file_may_name_no_code_outside_mcp_gym(tmp_path: Path, grader: object) -> None:
    path = _tasks(tmp_path, grader)
    for load in (load_task_source, load_tasks):
        with pytest.raises(TaskDataError, match="imports and runs code outside mcp-gym") as e:
            load(path)
        assert "\n" not in str(e.value) and "'t0'" in str(e.value) and str(path) in str(e.value)
    assert load_task_source(path, trust_code=True)[0].grader == grader  # a task file you trust


@pytest.mark.parametrize("grader", [
    "mcp_gym._wsdir:sweep",  # a private module's public function (it removes workspaces: round 10)
    "mcp_gym.cli:main", "mcp_gym.tasks:save_tasks", "mcp_gym.jobs.bfcl:gt_call", "mcp_gym.envs.bfcl.check:load_bfcl",
    "mcp_gym.envs.bfcl.forked:close_all", "mcp_gym.graders._shared:release", "mcp_gym:load_tasks",
    {"kind": "any", "of": ["exact", {"kind": "python", "function": "mcp_gym.servers.bfcl:main"}]},
])
def test_a_task_file_may_name_only_mcp_gym_s_grader_modules(tmp_path: Path, grader: object) -> None:
    """Round 10: any public function of any mcp-gym module was allowed (called as ``fn(task, answer, state)``); only
    ``mcp_gym.graders[.x]`` and ``mcp_gym.envs.<env>.grade`` are now, unless the task file is trusted."""
    path = _tasks(tmp_path, grader)
    with pytest.raises(TaskDataError, match="a task file may name mcp_gym.graders.* and mcp_gym.envs.<env>.grade") as e:
        load_task_source(path)
    named = grader if isinstance(grader, str) else "mcp_gym.servers.bfcl:main"
    assert "\n" not in str(e.value) and "task 't0'" in str(e.value) and f"grader {named!r}" in str(e.value)
    assert load_task_source(path, trust_code=True)[0].grader == grader


def test_an_empty_mcp_gym_folder_beside_the_task_file_does_not_pass_for_its_own_module(tmp_path: Path) -> None:
    """Loading left any grader whose top module was a folder beside the task file to grading; grading imports from
    the task file's folder only a ``.py`` or a package's ``__init__.py``, so an empty ``mcp_gym/`` folder had
    ``mcp_gym._wsdir:sweep`` imported from mcp-gym itself, unchecked."""
    path = _tasks(tmp_path, "mcp_gym._wsdir:sweep")
    (tmp_path / "mcp_gym").mkdir()
    with pytest.raises(TaskDataError, match="'mcp_gym._wsdir:sweep'"):
        load_tasks(path)


def test_mcp_gym_s_own_graders_and_kinds_load(tmp_path: Path) -> None:
    """BFCL's imported task files name ``mcp_gym.envs.bfcl.grade:verify``; kinds name no code."""
    path = _tasks(tmp_path, "mcp_gym.envs.bfcl.grade:verify", "mcp_gym.graders.state:wrapped_json", "exact",
                  {"kind": "regex", "pattern": "h."},
                  {"kind": "any", "of": ["exact", {"kind": "python", "function": "mcp_gym.envs.bfcl.grade:verify"}]})
    assert len(load_task_source(path)) == 5


def test_a_grader_beside_the_task_file_is_left_to_trust_task_code(tmp_path: Path) -> None:
    """MCPMark's imported ``mcpmark_grader:verify``: loading keeps it; grading refuses it without trust (and says
    why: ``tests/test_imports_untrusted.py``)."""
    path = _tasks(tmp_path, "mygrader:check")
    (tmp_path / "mygrader.py").write_text("def check(task, answer, state):\n    return True\n")
    assert load_tasks(path)[0].grader == "mygrader:check"


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_a_trusted_grader_that_calls_sys_exit_fails_its_grade_and_the_job_ends(tmp_path: Path) -> None:
    """A benchmark's verify.py ported as a function often ends with ``sys.exit(0 if ok else 1)``; run with trust, it
    is a grading error naming the call, and the job ends (before: SystemExit ended the job's loop and eval waited for
    good)."""
    tasks = _tasks(tmp_path / "bench", "verify_port:verify")
    (tmp_path / "bench" / "verify_port.py").write_text(
        "import sys\n\ndef verify(task, answer, state):\n    sys.exit(0 if answer == 'hi' else 1)\n")
    server = f'+env.servers.c="{sys.executable} -m mcp_gym.servers.counter"'
    try:
        done = subprocess.run([sys.executable, "-m", "mcp_gym.cli", "eval", "env=custom", server,
                               f"env.tasks={tasks}", "env.trust_task_code=true", "policy=oracle", "samples=1",
                               f"out={tmp_path / 'out'}", "launcher.progress=false", "plots=false"],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("mcp-gym eval did not end within 120 s with a grader calling sys.exit")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "verifier verify_port:verify called sys.exit(0) on task 't0'" in done.stderr
