"""What a benchmark run reports (issue 27): success and pass^k per task tag, the requested split recorded for tasks
without one, the ``noop`` baseline, and every episode's grade and reason in the viewer.

The benchmark is a filesystem-style one (``tests/servers/fs_server.py``, like npm ``mcp-server-filesystem``, started per
episode on ``{workspace}``): an initial folder (``fixture``) and a ``files`` grader on the final tree."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from test_benchmarks import FS, FS_SERVER, RUN
from test_benchmarks import fs_benchmark as benchmark
from test_viewer import browser  # noqa: F401 - the headless Chromium fixture

from mcp_gym.cli import main
from mcp_gym.recording import read_tables
from mcp_gym.tasks import load_task_source

pytestmark = pytest.mark.xdist_group("reports")  # one worker: `graded_run`, `one_task_run` (job runs) made once


def write_task(i: int, text: str, written: str | None = None, tags: list[str] | None = None) -> dict[str, Any]:
    """Write ``text`` to ``out<i>.txt``, graded on the final tree; the reference solution writes ``written``."""
    row: dict[str, Any] = {
        "id": f"write-{i}", "prompt": f"Read in.txt, then write {text!r} to out{i}.txt in {{workspace}}.",
        "grader": {"kind": "files", "expect": {f"out{i}.txt": text}},
        "solution": [{"tool": "read_file", "arguments": {"path": "{workspace}/in.txt"}},
                     {"tool": "write_file", "arguments": {"path": f"{{workspace}}/out{i}.txt",
                                                          "content": text if written is None else written}}]}
    if tags is not None:
        row["tags"] = tags
    return row


def results(out: Path) -> dict[str, Any]:
    return json.loads((out / "report" / "results.json").read_text(encoding="utf-8"))


# -- item 8: reports per tag, the requested split, the noop baseline -------------------------------------------------
@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_eval_reports_success_and_pass_hat_k_per_tag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = benchmark(tmp_path / "bench", [write_task(0, "a", tags=["easy", "copy"]), write_task(1, "b", tags=["easy"]),
                                           write_task(2, "c", written="wrong", tags=["hard"]), write_task(3, "d")])
    out = tmp_path / "eval"
    assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "policy=oracle", "samples=2", f"out={out}",
                 *RUN]) == 0
    summary, per_task = results(out)["summary"], results(out)["per_task"]
    assert summary["success_rate"] == 0.75
    assert summary["by_tag"] == {
        "copy": {"tasks": 1, "episodes": 2, "success_rate": 1.0, "pass@1": 1.0, "pass^1": 1.0, "pass@2": 1.0,
                 "pass^2": 1.0},
        "easy": {"tasks": 2, "episodes": 4, "success_rate": 1.0, "pass@1": 1.0, "pass^1": 1.0, "pass@2": 1.0,
                 "pass^2": 1.0},
        "hard": {"tasks": 1, "episodes": 2, "success_rate": 0.0, "pass@1": 0.0, "pass^1": 0.0, "pass@2": 0.0,
                 "pass^2": 0.0}}
    assert {t["task_id"]: t["tags"] for t in per_task} == {"write-0": ["copy", "easy"], "write-1": ["easy"],
                                                           "write-2": ["hard"], "write-3": []}
    table = capsys.readouterr().out
    assert "tag easy" in table and "tag hard" in table and "pass^2 0.0% (1 task)" in table


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_a_split_run_records_tasks_without_a_split_as_that_split(tmp_path: Path) -> None:
    rows = [write_task(0, "a"), {**write_task(1, "b"), "split": "train"}, {**write_task(2, "c"), "split": "test"}]
    tasks = benchmark(tmp_path / "bench", rows)
    assert [(t.id, t.split) for t in load_task_source(tasks, "test")] == [("write-0", "test"), ("write-2", "test")]
    assert [(t.id, t.split) for t in load_task_source(tasks, "train")] == [("write-0", "train"), ("write-1", "train")]
    out = tmp_path / "eval"
    assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "split=test", "policy=oracle", "samples=1",
                 f"out={out}", *RUN]) == 0
    recorded = {e["task_id"]: json.loads(e["task"])["split"] for e in read_tables(out)[1].to_pylist()}
    assert recorded == {"write-0": "test", "write-2": "test"}


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_noop_policy_is_the_do_nothing_baseline(tmp_path: Path) -> None:
    tasks = benchmark(tmp_path / "bench", [write_task(0, "a"), write_task(1, "b")])
    out = tmp_path / "eval"
    assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "policy=noop", "samples=1", f"out={out}", *RUN]) == 0
    summary = results(out)["summary"]
    assert summary["success_rate"] == 0.0 and summary["steps_mean"] == 1.0
    assert summary["terminations"] == {"submit": 2}
    steps = read_tables(out)[0].to_pylist()
    assert [(s["tool"], json.loads(s["arguments"])) for s in steps] == [("submit", {"answer": ""})] * 2


# -- item 4: the viewer shows every episode's grade and the grader's reason -----------------------------------------
@pytest.fixture(scope="module")
def graded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An oracle eval of a tagged benchmark: ``write-0`` passes, ``write-2`` writes the wrong text (a failed grade),
    ``write-4`` is graded by ``all`` of two graders, one failing."""
    root = tmp_path_factory.mktemp("graded")
    both = {**write_task(4, "e", tags=["hard"]), "grader": {"kind": "all", "of": [
        {"kind": "files", "expect": {"out4.txt": "e"}}, {"kind": "files", "expect": {"missing.txt": "x"}}]}}
    tasks = benchmark(root / "bench", [write_task(0, "a", tags=["easy"]), write_task(2, "c", "wrong", ["hard"]), both])
    out = root / "eval"
    assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "policy=oracle", "samples=1", f"out={out}",
                 *RUN]) == 0
    return out


def test_view_carries_each_episodes_grade_and_reason(graded_run: Path, tmp_path: Path) -> None:
    from test_viewer import embedded

    from mcp_gym.viewer import write_view

    data = embedded(write_view([graded_run], tmp_path / "page.html").read_text(encoding="utf-8"))
    grades = {e["task"]: e["grade"] for e in data["episodes"]}
    assert grades["write-0"]["passed"] is True and grades["write-0"]["score"] == 1.0
    assert grades["write-2"]["passed"] is False and "out2.txt == 'c'" in grades["write-2"]["reason"]
    assert {e["task"]: e["tags"] for e in data["episodes"]} == {"write-0": ["easy"], "write-2": ["hard"],
                                                                 "write-4": ["hard"]}
    assert set(data["runs"][0]["summary"]["by_tag"]) == {"easy", "hard"}


def test_view_says_why_an_episode_is_ungraded(tmp_path: Path) -> None:
    from mcp.server.mcpserver import MCPServer
    from test_viewer import embedded

    from mcp_gym import InProcess, MCPEnv, RecordTrajectories
    from mcp_gym.viewer import write_view

    server = MCPServer("echo")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    broken = {"kind": "python", "function": "json:loads"}  # called as (task, answer, state): raises TypeError
    env = RecordTrajectories(MCPEnv({"s": InProcess(server)}, [{"id": "t", "prompt": "p", "answer": "a"}],
                                    grader=broken), tmp_path / "run", policy="scripted")
    env.reset(seed=0)
    _, _, _, _, info = env.step({"tool": "submit", "arguments": {"answer": "a"}})
    env.close()
    assert info["error"]["kind"] == "verifier_error"
    (episode,) = embedded(write_view([tmp_path / "run"], tmp_path / "page.html").read_text())["episodes"]
    assert episode["grade"]["ungraded"] is True and episode["grade"]["reason"] == info["error"]["message"]


@pytest.mark.browser
def test_browser_shows_the_grade_reason_of_every_episode(graded_run: Path, browser: Any, tmp_path: Path) -> None:  # noqa: F811
    import html

    from test_viewer import artifact, rows

    from mcp_gym.recording import read_tables
    from mcp_gym.viewer import write_view

    page = write_view([graded_run], tmp_path / "page.html")
    episodes = {e["task_id"]: e["episode_id"] for e in read_tables(graded_run)[1].to_pylist()}
    dom = browser(page)
    assert len(dom.find("td", class_="gradecol")) == 3  # every row has its grade
    steps = [s for s in read_tables(graded_run)[0].to_pylist() if s["terminated"] or s["truncated"]]
    reasons = {s["episode_id"]: json.loads(s["info"])["grade"]["reason"] for s in steps}
    for eid, reason in reasons.items():
        assert html.escape(reason, quote=False)[:200] in dom.html, (eid, reason)  # in the table
    assert [a["data-tag"] for a in dom.find("tr", class_="tagrow")] == ["easy", "hard"]  # the summary per tag
    assert set(rows(browser(page, "tag=hard"))) == {episodes["write-2"], episodes["write-4"]}

    opened = browser(page, f"episode={episodes['write-4']}", screenshot=artifact(tmp_path, "viewer-grade.png"))
    (box,) = opened.find("div", class_="gradebox")
    assert "bad" in (box["class"] or "").split()
    assert len(opened.find("ul", class_="parts")) == 1 and "missing.txt" in opened.html  # each member's reason


@pytest.fixture(scope="module")
def one_task_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """``(task file, run, what it printed)`` of an oracle eval of one task (``write-0``), two samples, each episode on
    a server of its own; the tests below only read it."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("one-task")
    tasks = benchmark(root / "bench", [write_task(0, "a")])
    out = root / "eval"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["eval", "env=custom", FS, f"env.tasks={tasks}", "policy=oracle", "samples=2", f"out={out}",
                     *RUN]) == 0
    return tasks, out, printed.getvalue()


# -- item 5: the episode's workspace path is {workspace} in what the agent sees and what is recorded ----------------
def test_episodes_of_one_task_export_identical_examples(one_task_run: tuple[Path, Path, str]) -> None:
    import pyarrow as pa

    from mcp_gym import MCPEnv
    from mcp_gym.sft import build, replay

    tasks, out, _ = one_task_run
    steps, episodes = read_tables(out)
    texts = [v for table in (steps, episodes) for col in table.columns if pa.types.is_string(col.type)
             for v in col.to_pylist() if v]
    assert not [t for t in texts if "mcp-gym-ws-" in t]  # no per-episode temp path anywhere in the recording
    assert {json.loads(s["arguments"])["path"] for s in steps.to_pylist() if s["tool"] == "read_file"} == {
        "{workspace}/in.txt"}
    prompts = {e["task_prompt"] for e in episodes.to_pylist()}
    assert prompts == {"Read in.txt, then write 'a' to out0.txt in {workspace}."}

    examples = build([out], dedupe=False)
    assert len(examples) == 2
    first = examples[0]
    for ex in examples:
        assert (ex["messages"], ex["tools"]) == (first["messages"], first["tools"])
    assert "{workspace}/out0.txt" in json.dumps(first["messages"])
    assert len(build([out])) == 1  # deduplicated: one behaviour, one example

    # Replayed in a new episode (another workspace), the example's {workspace} is that episode's path.
    env = MCPEnv({"fs": f"{sys.executable} {FS_SERVER} {{workspace}}"}, load_task_source(tasks))
    try:
        obs, _ = env.reset(seed=0, options={"task_id": "write-0"})
        assert "{workspace}" in obs["task"] and str(env.workspace) not in obs["task"]  # what the model sees
        assert replay(first, env) == 1.0
        assert (env.workspace / "out0.txt").read_text() == "a"
    finally:
        env.close()


# -- item 7: servers started per episode: their share of the time, and the waiting line only when it matters ---------
def test_eval_reports_the_time_spent_starting_servers(one_task_run: tuple[Path, Path, str]) -> None:
    _, out, printed = one_task_run
    summary = results(out)["summary"]
    startup = summary["startup_s"]
    assert startup["total"] > 0 and startup["mean"] == pytest.approx(startup["total"] / 2)
    assert startup["p50"] <= startup["p90"] <= startup["p99"]
    assert 0 < summary["startup_share"] < 1
    rows = read_tables(out)[1].to_pylist()
    metadata = [json.loads(e["metadata"]) for e in rows]
    assert all(m["startup_seconds"] > 0 for m in metadata)  # every episode started its own server
    # The share is of the episodes' whole time: each reset (which holds the server's start) and the steps after it.
    whole = sum(m["reset_seconds"] for m in metadata) + sum((e["ended_at"] - e["started_at"]).total_seconds()
                                                            for e in rows)
    assert summary["startup_share"] == pytest.approx(startup["total"] / whole)
    assert sum(m["startup_seconds"] for m in metadata) == pytest.approx(startup["total"])
    # The whole reset holds the server's start, and the first step's answer comes after the reset.
    assert all(m["reset_seconds"] >= m["startup_seconds"] - 1e-3 for m in metadata)
    first = summary["first_step_s"]
    assert min(m["reset_seconds"] for m in metadata) <= first["p50"] <= first["p90"]
    assert "server start-up share" in printed and "time to first step s p50" in printed


def test_a_server_started_per_episode_is_announced_once(tmp_path: Path, client_log: list[logging.LogRecord],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_gym import MCPEnv, Stdio
    from mcp_gym.client import _notice

    monkeypatch.setattr(_notice, "SLOW_CONNECT_NOTICE", 0.0)  # every start not yet known to work is announced
    monkeypatch.setattr(_notice, "_STARTED", set())  # no server of an earlier test is known to work
    tasks = benchmark(tmp_path / "bench", [write_task(0, "a")])
    # A known server is announced after half its connect_timeout: 150 s here, which no start takes, however busy the
    # machine (the default 30 s gives 15 s, which a loaded machine can reach).
    fs = Stdio(sys.executable, [str(FS_SERVER), "{workspace}"], connect_timeout=300)
    env = MCPEnv({"fs": fs}, load_task_source(tasks))
    try:
        for seed in range(2):  # two episodes, two server processes, two workspaces
            _, info = env.reset(seed=seed)
            assert info["servers"]["fs"]["status"] == "ready" and info["startup_seconds"] > 0
    finally:
        env.close()
    waits = [r.getMessage() for r in client_log if "waiting for server 'fs'" in r.getMessage()]
    assert len(waits) == 1, waits  # the first start; the next ones are known to work (their slowness is load)


# -- mcp-gym tasks import mcpmark: a local checkout in MCPMark's filesystem layout -----------------------------------
VERIFY = '''import os, sys
from pathlib import Path
root = Path(os.environ["FILESYSTEM_TEST_DIR"])
out = root / "answer.txt"
if not out.exists():
    print("answer.txt not found"); sys.exit(1)
if out.read_text().strip() != (root / "{source}").read_text().strip().upper():
    print("answer.txt is not the upper-cased {source}"); sys.exit(1)
print("PASS")
'''


def mcpmark_checkout(root: Path) -> Path:
    """A tiny checkout in MCPMark's layout (text of our own): two categories, one initial state as a folder under
    test_environments/, the other as a zip the user downloaded."""
    import zipfile

    for category, task, source, layout in (("notes", "shout", "note.txt", "standard/"),
                                           ("letters", "upper", "a.txt", "")):
        folder = root / "tasks" / "filesystem" / f"{layout}{category}" / task
        folder.mkdir(parents=True)
        (folder / "description.md").write_text(f"# Shout\n\nWrite {source} in upper case to answer.txt.\n")
        (folder / "verify.py").write_text(VERIFY.format(source=source))
        (folder / "meta.json").write_text(json.dumps({"task_id": task, "category_id": category, "difficulty": "L1",
                                                      "tags": ["content transformation"]}))
    (root / "test_environments" / "notes").mkdir(parents=True)
    (root / "test_environments" / "notes" / "note.txt").write_text("quiet please\n")
    (root / "downloads").mkdir()
    with zipfile.ZipFile(root / "downloads" / "letters.zip", "w") as z:
        z.writestr("letters/a.txt", "abc\n")
    return root


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_tasks_import_mcpmark_reads_a_checkout_into_a_task_file_that_grades_with_verify_py(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_gym import MCPEnv

    checkout = mcpmark_checkout(tmp_path / "mcpmark")
    out = tmp_path / "bench"
    assert main(["tasks", "import", "mcpmark", str(checkout), "--out", str(out),
                 "--states", str(checkout / "downloads")]) == 0
    printed = capsys.readouterr().out
    assert "2 tasks (letters 1, notes 1)" in printed
    from mcp_gym.jobs.mcpmark import eval_command

    assert f"  {eval_command(out / 'tasks.jsonl')} env.max_tasks=5 samples=1\n" in printed  # a first look, printed
    tasks = {t.id: t for t in load_task_source(out / "tasks.jsonl")}
    assert set(tasks) == {"standard__notes__shout", "letters__upper"}  # the level, where there is one, in the id
    shout = tasks["standard__notes__shout"]
    assert shout.tags == ("notes", "level:standard", "L1", "content transformation")
    assert shout.prompt.endswith("in the directory {workspace}.")
    assert (Path(shout.fixture) / "note.txt").read_text() == "quiet please\n"
    assert (Path(tasks["letters__upper"].fixture) / "a.txt").read_text() == "abc\n"  # from the zip

    monkeypatch.syspath_prepend(str(out))  # the grader module written next to the task file
    monkeypatch.delitem(sys.modules, "mcpmark_grader", raising=False)  # not another test's import of it
    env = MCPEnv({"fs": f"{sys.executable} {FS_SERVER} {{workspace}}"}, list(tasks.values()))
    try:
        env.reset(seed=0, options={"task_id": "standard__notes__shout"})
        env.step({"tool": "write_file", "arguments": {"path": "{workspace}/answer.txt", "content": "QUIET PLEASE"}})
        *_, info = env.step({"tool": "submit", "arguments": {"answer": "done"}})
        assert info["success"] is True and "PASS" in info["grade"]["reason"]
        # the second episode's server (a new process, a new workspace) is up and serves the task's state, so its
        # failure below is the grade's, not a server that never started (a connect hang fails here, not at submit)
        _, info = env.reset(seed=0, options={"task_id": "letters__upper"})
        assert info["servers"]["fs"]["status"] == "ready", info["servers"]["fs"]
        obs, _, _, _, info = env.step({"tool": "read_file", "arguments": {"path": "{workspace}/a.txt"}})
        assert info["error"] is None and obs["result"].strip() == "abc", (obs["result"], info["error"])
        *_, info = env.step({"tool": "submit", "arguments": {"answer": "done"}})  # the do-nothing baseline
        assert info["success"] is False and "verify.py exit 1: answer.txt not found" in info["grade"]["reason"]
    finally:
        env.close()


def test_tasks_import_mcpmark_names_a_missing_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A task whose category has no initial state is skipped and listed with the reason; none imported is an error."""
    checkout = mcpmark_checkout(tmp_path / "mcpmark")
    assert main(["tasks", "import", "mcpmark", str(checkout), "--out", str(tmp_path / "bench")]) == 0
    out = capsys.readouterr().out
    assert "skipped tasks/filesystem/letters/upper: no initial state for category 'letters'" in out
    assert "letters.zip" in out and "1 tasks (notes 1); 1 skipped" in out
    assert [t.id for t in load_task_source(tmp_path / "bench" / "tasks.jsonl")] == ["standard__notes__shout"]
    shutil.rmtree(checkout / "test_environments")
    assert main(["tasks", "import", "mcpmark", str(checkout), "--out", str(tmp_path / "bench2")]) == 1
    assert "no task imported" in capsys.readouterr().err
