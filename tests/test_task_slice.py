"""A job's slice of its task set: ``env.task_ids`` and ``env.max_tasks``, applied where a job loads its tasks, so
``eval``, ``collect`` and ``tasks validate`` play the same slice; a run grows into a wider slice and refuses a
narrower one in one line; bad values are refused in one line before anything runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcp_gym.cli import main
from mcp_gym.envs import load_env_tasks
from mcp_gym.jobs.config import select_tasks
from mcp_gym.jobs.schema import ConfigError
from mcp_gym.recording import RunDirectory, load

FAST = ["env=counter", "env.transport=inprocess", "launcher.progress=false"]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_select_tasks_keeps_the_set_order_and_refuses_bad_slices() -> None:
    tasks = load_env_tasks("Counter", "test")
    ids = [t.id for t in tasks]
    assert [t.id for t in select_tasks(tasks, [ids[3], ids[1]])] == [ids[1], ids[3]]  # the set's order
    assert [t.id for t in select_tasks(tasks, None, 2)] == ids[:2]
    assert [t.id for t in select_tasks(tasks, [ids[5], ids[2], ids[0]], 2)] == [ids[0], ids[2]]  # ids, then N
    assert select_tasks(tasks, None, 10_000) == tasks
    with pytest.raises(ConfigError, match=r"unknown task id\(s\) 'nope', 'gone' \(not among the \d+ tasks of split "
                                          r"'test'\)"):
        select_tasks(tasks, [ids[0], "nope", "gone"], split="test")
    for bad in (0, -3, 2.5, True, "5"):
        with pytest.raises(ConfigError, match="env.max_tasks must be a positive integer or null"):
            select_tasks(tasks, None, bad)
    with pytest.raises(ConfigError, match="env.task_ids is empty"):
        select_tasks(tasks, [])
    with pytest.raises(ConfigError, match="env.task_ids must be a list"):
        select_tasks(tasks, ids[0])


@pytest.mark.slow
def test_eval_plays_the_slice_and_a_wider_slice_runs_only_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eval"
    base = ["eval", *FAST, "policy=oracle", "plots=false", f"out={out}"]
    ids = [t.id for t in load_env_tasks("Counter", "test")]
    assert main([*base, "env.max_tasks=2", "samples=1"]) == 0
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert (summary["tasks"], summary["episodes"]) == (2, 2)
    first = {r["episode_key"]: r["episode_id"] for r in load(out).episodes}
    assert set(first) == {f"{i}#0" for i in ids[:2]}
    identity = RunDirectory(out).manifest["metadata"]["identity"]
    assert identity["env.max_tasks"] == 2 and identity["env.task_ids"] is None

    # A wider slice, two samples each: the plan grows; the first look's episodes are kept, not rerun.
    assert main([*base, "env.max_tasks=4", "samples=2"]) == 0
    after = {r["episode_key"]: r["episode_id"] for r in load(out).episodes}
    assert len(after) == 8 and all(after[k] == v for k, v in first.items())
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert (summary["tasks"], summary["episodes"]) == (4, 8)

    # A narrower slice is another plan: refused in one line naming the key, nothing changed.
    capsys.readouterr()
    assert main([*base, "samples=2", "env.max_tasks=3"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "env.max_tasks: 4 -> 3" in line and "out=" in line
    assert len(load(out).episodes) == 8 and len(ids) > 4


def test_task_ids_resume_in_any_order_and_unknown_ids_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    base = ["collect", *FAST, "policy=oracle", "split=test", "episodes=3", f"out={out}"]
    ids = [t.id for t in load_env_tasks("Counter", "test")]
    assert main([*base, f"env.task_ids=[{ids[4]},{ids[1]}]"]) == 0
    assert sorted(r["episode_key"] for r in load(out).episodes) == sorted(
        [f"{ids[1]}#0", f"{ids[4]}#0", f"{ids[1]}#1"])  # collect's episodes= cycles the slice
    capsys.readouterr()
    assert main([*base, f"env.task_ids=[{ids[1]},{ids[4]}]"]) == 0  # the same slice: resumed, nothing to run
    assert "all 3 planned episodes are recorded" in capsys.readouterr().err
    assert len(load(out).episodes) == 3

    assert main([*base, f"env.task_ids=[{ids[1]},no-such-task]", f"out={tmp_path / 'other'}"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "env.task_ids: unknown task id(s) 'no-such-task'" in line and "split 'test'" in line
    assert not (tmp_path / "other" / "manifest.json").exists()


def test_collect_grows_into_a_wider_slice_and_refuses_a_narrower_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    base = ["collect", *FAST, "policy=oracle", "split=test", "samples=1", f"out={out}"]
    ids = [t.id for t in load_env_tasks("Counter", "test")]
    assert main([*base, "env.max_tasks=1"]) == 0
    (first,) = list(load(out).episodes)
    assert first["episode_key"] == f"{ids[0]}#0"
    assert main([*base, "env.max_tasks=2"]) == 0  # wider: only the new episode runs
    after = {r["episode_key"]: r["episode_id"] for r in load(out).episodes}
    assert set(after) == {f"{i}#0" for i in ids[:2]} and after[first["episode_key"]] == first["episode_id"]
    capsys.readouterr()
    assert main([*base, "env.max_tasks=1"]) == 2  # narrower: another plan
    line = _one_line(capsys.readouterr().err)
    assert "another plan (env.max_tasks: 2 -> 1)" in line and "env.task_ids, env.max_tasks" in line and "out=" in line
    assert len(load(out).episodes) == 2


@pytest.mark.parametrize(("value", "said"), [("0", "env.max_tasks must be a positive integer or null, not 0"),
                                             ("-1", "env.max_tasks must be a positive integer or null, not -1"),
                                             ("abc", "env.max_tasks must be an integer or null, not 'abc'"),
                                             ("2.5", "env.max_tasks must be an integer or null, not 2.5")])
def test_a_bad_max_tasks_is_refused_in_one_line(
        value: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", *FAST, "policy=oracle", f"env.max_tasks={value}", f"out={tmp_path / 'eval'}"]) == 2
    assert said in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "eval" / "manifest.json").exists()


def test_tasks_validate_checks_the_slice(tmp_path: Path) -> None:
    ids = [t.id for t in load_env_tasks("Counter", "test")]
    out = tmp_path / "validate"
    assert main(["tasks", "validate", *FAST, "split=test", f"env.task_ids=[{ids[0]},{ids[3]},{ids[5]}]",
                 "env.max_tasks=2", f"out={out}"]) == 0
    checks = json.loads((out / "validation.json").read_text())
    assert [c["task_id"] for c in checks] == [ids[0], ids[3]] and {c["status"] for c in checks} == {"passed"}


def test_tasks_generate_refuses_a_slice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tasks generate makes a task set; a slice key there would be ignored, so it is refused in one line."""
    assert main(["tasks", "generate", "env=custom", f"+env.servers.counter={sys.executable} -m mcp_gym.servers.counter",
                 "env.max_tasks=3", f"out={tmp_path / 'gen'}"]) == 2
    assert "tasks generate proposes new tasks; env.task_ids and env.max_tasks" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "gen" / "tasks.jsonl").exists()
