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
@pytest.mark.slow  # the fast lane keeps test_eval_counts_a_graded_episode_cut_off_after_its_work_as_success (same flow)
def test_validate_passes_a_workspace_benchmark_that_eval_scores_full(tmp_path: Path) -> None:
    tasks = fs_benchmark(tmp_path / "bench", [copy_task(i, f"text {i}") for i in range(2)])
    out = tmp_path / "validate"
    assert main(["tasks", "validate", "env=custom", FS, f"env.tasks={tasks}", f"out={out}"]) == 0
    checks = json.loads((out / "validation.json").read_text())
    assert [c["status"] for c in checks] == ["passed"] * 2
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


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_validate_fails_a_solution_whose_call_failed_even_if_its_answer_grades_right(tmp_path: Path) -> None:
    """A second server prefixes every tool name (``fs__read_file``): the unprefixed solution's call fails, and the
    oracle's submitted answer still matches. Before, validate said "passed" (and the eval 100 %)."""
    row = {"id": "read", "prompt": "What does in.txt say?", "answer": "hello",
           "solution": [{"tool": "read_file", "arguments": {"path": "{workspace}/in.txt"}}]}
    tasks = fs_benchmark(tmp_path / "bench", [row])
    second = f'+env.servers.fs2="{sys.executable} {FS_SERVER} {{workspace}}"'
    out = tmp_path / "validate"
    assert main(["tasks", "validate", "env=custom", FS, second, f"env.tasks={tasks}", f"out={out}"]) == 1
    [check] = json.loads((out / "validation.json").read_text())
    assert check["status"] == "failed" and check["failed_call"]["tool"] == "read_file"
    assert "unknown tool 'read_file'" in check["reason"] and "a call of the solution failed" in check["reason"]


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


# -- items 2 and 3: graders off the event loop, bounded in time, given the episode -------------------------------------
GRADER_MODULE = '''
import asyncio, json, time
from pathlib import Path


def check(ctx):
    """A sync grader of one parameter: the EpisodeContext."""
    start = time.time()
    time.sleep(float(ctx.data.get("sleep", 0)))
    if "meet" in ctx.data:  # wait (bounded) until another grade has started: only graders that overlap get past it
        meet = Path(ctx.data["meet"])
        (meet / ctx.task.id).touch()
        deadline = time.monotonic() + 30
        while len(list(meet.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    with ctx.path(ctx.data["log"]).open("a") as f:  # a data path, relative to the task file
        f.write(json.dumps({"task": ctx.task.id, "start": start, "end": time.time(), "workspace": str(ctx.workspace),
                            "servers": list(ctx.servers), "task_dir": str(ctx.task_dir),
                            "termination": ctx.termination, "calls": [s["tool"] for s in ctx.transcript]}) + "\\n")
    out = ctx.workspace / ctx.data["file"]
    return {"passed": out.exists() and out.read_text() == ctx.data["text"], "reason": f"checked {out.name}"}


async def check_async(ctx):
    await asyncio.sleep(float(ctx.data.get("sleep", 0)))
    return True


def legacy(task, answer, state):
    return answer == task.answer
'''


def graded_task(i: int, **data: Any) -> dict[str, Any]:
    row = copy_task(i, f"text {i}")
    row.pop("grader")
    row["data"] = {"file": f"out{i}.txt", "text": f"text {i}", "log": "grades.jsonl", **data}
    return row


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_sync_graders_overlap_and_see_the_episode(tmp_path: Path) -> None:
    (tmp_path / "meet").mkdir()
    tasks = fs_benchmark(tmp_path / "bench", [graded_task(i, meet=str(tmp_path / "meet")) for i in range(4)])
    (tmp_path / "bench" / "bench_grader.py").write_text(GRADER_MODULE)  # next to the task file, not on sys.path
    out = tmp_path / "eval"
    assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "env.grader=bench_grader:check", "policy=oracle",
                 "samples=1", "launcher.num_envs=4", "launcher.share_servers=null", "launcher.max_connecting=4",
                 f"out={out}", *RUN]) == 0
    assert json.loads((out / "report" / "results.json").read_text())["summary"]["success_rate"] == 1.0
    grades = [json.loads(line) for line in (tmp_path / "bench" / "grades.jsonl").read_text().splitlines()]
    assert len(grades) == 4
    g = grades[0]
    assert g["servers"] == ["fs"] and g["task_dir"] == str((tmp_path / "bench").resolve())
    assert g["termination"] == "submit" and g["calls"] == ["read_file", "write_file", "submit"]
    assert "mcp-gym-ws-" in g["workspace"]
    # each grade waits until another has started: in worker threads they overlap; on the event loop they ran one
    # after the other (the first waited out its 30 s alone: no other episode ran meanwhile). It used to be a 2 s
    # sleep per grade, which episodes ending over 2 s apart on a loaded machine did not overlap either.
    most = max(sum(o["start"] < x["start"] < o["end"] for o in grades) + 1 for x in grades)
    assert most >= 2, grades


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_a_grader_past_its_timeout_is_a_failed_grade(tmp_path: Path) -> None:
    rows = [graded_task(0, sleep=10), graded_task(1, sleep=10), graded_task(2)]
    rows[1]["grader"] = {"kind": "python", "function": "bench_grader:check_async", "timeout": 0.5}  # task override
    # the old (task, answer, state) signature, with a timeout only a hang meets: under grader_timeout=1 its grade
    # (a state read from the server, a worker thread) had to end within 1 s, which a loaded machine need not do
    rows[2]["grader"] = {"kind": "python", "function": "bench_grader:legacy", "timeout": 300}
    rows[2]["answer"] = "done"
    rows[2]["solution"].append({"tool": "submit", "arguments": {"answer": "done"}})
    for folder, its_rows in (("untrusted", rows[1:2]), ("bench", rows)):  # tasks: bench's
        tasks = fs_benchmark(tmp_path / folder, its_rows)
        (tmp_path / folder / "bench_grader.py").write_text(GRADER_MODULE)
    args = ["tasks", "validate", "env=custom", FS, "env.grader=bench_grader:check", "env.grader_timeout=1"]
    # a task's own grader from the task file's folder: refused unless trusted (one task shows it)
    out = tmp_path / "untrusted" / "validate"
    assert main([*args, f"env.tasks={tmp_path / 'untrusted' / 'tasks.jsonl'}", f"out={out}"]) == 1
    checks = {c["task_id"]: c for c in json.loads((out / "validation.json").read_text())}
    assert checks["copy-1"]["status"] == "error" and "env.trust_task_code=true" in checks["copy-1"]["reason"]
    out = tmp_path / "validate"
    assert main([*args, f"env.tasks={tasks}", "env.trust_task_code=true", f"out={out}"]) == 1
    checks = {c["task_id"]: c for c in json.loads((out / "validation.json").read_text())}
    assert checks["copy-0"]["status"] == "failed"
    assert checks["copy-0"]["reason"] == "grader timed out after 1 s (grader_timeout)"
    assert checks["copy-1"]["reason"] == "grader timed out after 0.5 s (grader_timeout)"
    assert checks["copy-2"]["status"] == "passed"


# -- newcomer: a server that keeps state across episodes gets a one-time warning ---------------------------------------
def test_a_stateful_server_without_reset_warns_once(tmp_path: Path) -> None:
    import warnings

    from mcp_gym import MCPEnv, Stdio
    from mcp_gym._stateful import README_SECTION, StatefulServerWarning

    sqlite_server = str(ROOT / "tests" / "_sqlite_server.py")
    create = {"tool": "execute", "arguments": {"sql": "CREATE TABLE IF NOT EXISTS t (x)"}}
    env = MCPEnv({"db": Stdio(sys.executable, [sqlite_server, str(tmp_path / "shared.db")])}, ["a task"])
    try:
        env.reset(seed=0)
        with pytest.warns(StatefulServerWarning, match="server 'db' has no mcp_gym_reset tool") as caught:
            env.step(create)
        assert README_SECTION in str(caught[0].message)
        with warnings.catch_warnings():
            warnings.simplefilter("error", StatefulServerWarning)
            env.reset(seed=1)
            env.step(create)  # once per server
    finally:
        env.close()
    restarted = MCPEnv({"db": Stdio(sys.executable, [sqlite_server, str(tmp_path / "own.db")])}, ["a task"],
                       reset_mode="restart")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", StatefulServerWarning)
            restarted.reset(seed=0)
            restarted.step(create)  # a new process per episode: nothing carries over
    finally:
        restarted.close()


# -- item 6: budgets of turns and tool calls, recorded; a cut-off episode is graded as it stands -----------------------
def notes_server() -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("notes")
    notes: list[str] = []

    @server.tool()
    def note(text: str) -> str:
        """Keep a note."""
        notes.append(text)
        return f"{len(notes)} notes"

    return server


def two_notes(ctx: Any) -> bool:
    """Passes when the episode kept at least two notes (whether or not it submitted)."""
    return sum(s["tool"] == "note" for s in ctx.transcript) >= 2


def test_max_turns_counts_model_replies_and_is_recorded(tmp_path: Path) -> None:
    from mcp_gym import InProcess, MCPEnv, RecordTrajectories
    from mcp_gym.recording import load

    env = RecordTrajectories(MCPEnv(InProcess(notes_server()), ["keep notes"], max_turns=2, max_steps=50,
                                    grader=two_notes), tmp_path / "run", policy="scripted")
    try:
        env.reset(seed=0)
        note = {"tool": "note", "arguments": {"text": "x"}}
        for turn, calls in ((0, 3), (1, 2)):  # two replies of 3 and 2 calls: all run
            for _ in range(calls):
                obs, reward, terminated, truncated, info = env.step({**note, "turn": turn})
                assert not truncated and info["error"] is None
        obs, reward, terminated, truncated, info = env.step({**note, "turn": 2})  # a third reply: not executed
        assert truncated and info["termination"] == "max_turns" and info["error"]["kind"] == "budget"
        assert info["summary"]["turns"] == 2 and info["summary"]["tool_calls"] == 5
        assert info["success"] is True and info["grade"]["passed"]  # cut off, graded as it stands
    finally:
        env.close()
    ep = load(tmp_path / "run").episodes[0]
    assert (ep["termination"], ep["success"], ep["length"]) == ("max_turns", True, 6)
    assert json.loads(ep["metadata"])["budget"] == {"max_steps": 50, "max_turns": 2, "max_tool_calls": None,
                                                    "steps": 6, "turns": 2, "tool_calls": 5}


def test_max_tool_calls_counts_calls_that_reached_a_server_and_unmarked_steps_are_turns() -> None:
    from mcp_gym import InProcess, MCPEnv

    env = MCPEnv(InProcess(notes_server()), ["keep notes"], max_tool_calls=2, grader=two_notes)
    try:
        env.reset(seed=0)
        assert env.step({"tool": "nope", "arguments": {}})[4]["error"]["kind"] == "unknown_tool"  # not a call
        assert not env.step({"tool": "note", "arguments": {"text": "a"}})[3]
        *_, truncated, info = env.step({"tool": "note", "arguments": {"text": "b"}})
        assert truncated and info["termination"] == "max_tool_calls" and info["summary"]["tool_calls"] == 2
        assert info["summary"]["turns"] == 3 and info["success"] is True
    finally:
        env.close()
    env = MCPEnv(InProcess(notes_server()), ["keep notes"], max_turns=1, grader=two_notes)
    try:
        env.reset(seed=0)
        *_, truncated, info = env.step({"tool": "note", "arguments": {"text": "a"}})  # unmarked: a turn per step
        assert truncated and info["termination"] == "max_turns" and info["success"] is False
    finally:
        env.close()


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_eval_counts_a_graded_episode_cut_off_after_its_work_as_success(tmp_path: Path) -> None:
    tasks = fs_benchmark(tmp_path / "bench", [copy_task(0, "a")])  # 2 calls, then the oracle's submit
    out = tmp_path / "validate"
    assert main(["tasks", "validate", "env=custom", FS, f"env.tasks={tasks}", "env.max_steps=2", f"out={out}"]) == 0
    ev = tmp_path / "eval"
    assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "env.max_steps=2", "policy=oracle", "samples=1",
                 f"out={ev}", *RUN]) == 0
    summary = json.loads((ev / "report" / "results.json").read_text())["summary"]
    assert summary["success_rate"] == 1.0
    from mcp_gym.recording import load

    assert load(ev).episodes["termination"] == ["max_steps"]


def test_grader_paths_are_taken_from_the_task_file_folder(tmp_path: Path) -> None:
    import sqlite3

    row = copy_task(0, "a")
    row["grader"] = {"kind": "all", "of": [row["grader"], {"kind": "sqlite", "db": "reference.db",
                                                           "query": "SELECT n FROM t", "rows": [[7]]}]}
    tasks = fs_benchmark(tmp_path / "bench", [row])
    with sqlite3.connect(tmp_path / "bench" / "reference.db") as con:
        con.execute("CREATE TABLE t (n)")
        con.execute("INSERT INTO t VALUES (7)")
    out = tmp_path / "validate"  # run from another folder: the db is found beside the task file, not in the cwd
    assert main(["tasks", "validate", "env=custom", FS, f"env.tasks={tasks}", f"out={out}"]) == 0


@pytest.mark.thirdparty
def test_npm_memory_without_its_own_file_warns_and_with_a_workspace_does_not(tmp_path: Path) -> None:
    import warnings

    from conftest import npm_bin

    from mcp_gym import MCPEnv, StatefulServerWarning, Stdio

    create = {"tool": "create_entities", "arguments": {"entities": [
        {"name": "Alice", "entityType": "person", "observations": ["likes tea"]}]}}
    memory = npm_bin("mcp-server-memory")
    shared = MCPEnv({"memory": Stdio(memory, env={"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")})}, ["remember"],
                    call_timeout=20)
    try:
        shared.reset(seed=0)
        with pytest.warns(StatefulServerWarning, match="tool 'create_entities' may have changed its state"):
            shared.step(create)
    finally:
        shared.close()
    own = MCPEnv({"memory": Stdio(memory, env={"MEMORY_FILE_PATH": "{workspace}/m.jsonl"})}, ["remember"],
                 call_timeout=20)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", StatefulServerWarning)
            own.reset(seed=0)
            assert own.step(create)[4]["error"] is None
    finally:
        own.close()
