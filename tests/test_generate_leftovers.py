"""Three leftovers of ``mcp-gym tasks generate`` found by running it on servers nobody here wrote: JSON results keyed by
something that is no identifier (PyPI mcp-text-editor keys them by the file's path), tasks that differ only by a
repeated call, and answers that go stale on a server that keeps state between episodes, which ``tasks validate``
alone never saw (``replay=true``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import installed
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from mcp_gym import InProcess, MCPEnv
from mcp_gym.jobs.generate import _Checker, _Drop, _Runner
from mcp_gym.jobs.proposers import ExploreProposer, Proposal, _named, extract, fields, result_value
from mcp_gym.jobs.validate import check_task, replay_checks
from mcp_gym.tasks import Task

READ_ONLY = ToolAnnotations(read_only_hint=True)

# what PyPI mcp-text-editor 1.0.2 returns for get_text_file_contents, as text (pretty-printed JSON, isError false)
EDITOR_RESULT = json.dumps({"{workspace}/a.txt": {"ranges": [{"content": "alpha\nbeta\ngamma\n", "start_line": 1,
                                                              "end_line": 3, "range_hash": "4fdbc441", "total_lines": 3,
                                                              "content_size": 17}],
                                                  "file_hash": "4fdbc441ea7b"}}, indent=2)


def test_a_pretty_printed_json_text_keyed_by_paths_makes_answers() -> None:
    """The whole text is one JSON value (not lines such as ``"file_hash": "...",``), and a member whose key is a path
    is named ``$['{workspace}/a.txt']``: before, such a key hid everything under it, so no ``file_hash`` could make an
    answer or be chained into ``edit_text_file_contents`` and the server gave no task at all."""
    value = result_value(None, EDITOR_RESULT)
    found = dict(fields(value))
    assert found["$['{workspace}/a.txt'].file_hash"] == "4fdbc441ea7b"
    assert found["$['{workspace}/a.txt'].ranges[0].total_lines"] == "3"
    assert not [a for a in found.values() if a.startswith('"') or a.endswith(",")], found  # no line of JSON text
    assert "$['{workspace}/a.txt'].ranges[0].content" not in found  # several lines: no answer
    wrapped = result_value({"result": EDITOR_RESULT}, EDITOR_RESULT)  # the Python SDK's wrapping of a str result
    assert wrapped == value and result_value({"result": "[x"}, "[x") == {"result": "[x"}
    assert result_value({"result": "7"}, "7") == {"result": "7"}  # a JSON scalar stays wrapped
    for path, answer in found.items():
        assert extract(value, path) == answer  # the answer check reads what the walk saw
    odd = {"it's": {"x": 1}, "*": 2, "a.b": 3}
    star = {"$['*']": "2"} if _named("*") else {}  # jsonpath_ng 1.17 reads ['*'] as a name, 1.8 as a wildcard
    assert dict(fields(odd)) == {**star, "$['a.b']": "3"}  # a quote in a key: no path, no answer
    assert extract(odd, "$['a.b']") == "3" and all(extract(odd, path) == "2" for path in star)


def _editor() -> MCPServer:
    """A text editor with mcp-text-editor's shapes: reads keyed by path with a hash, edits refused without it."""
    srv = MCPServer("editor")
    files = {"/w/a.txt": "alpha\n"}

    @srv.tool(name="mcp_gym_reset")
    def reset(task_id: str | None = None, seed: int = 0) -> str:
        files.clear()
        files["/w/a.txt"] = "alpha\n"
        return "reset"

    @srv.tool(annotations=READ_ONLY)
    def get_text(path: str) -> str:
        """Read a file."""
        return json.dumps({path: {"content": files.get(path, ""), "file_hash": f"h{len(files.get(path, ''))}"}},
                          indent=2)

    @srv.tool()
    def append(path: str, file_hash: str, text: str) -> str:
        """Append to a file whose hash is given."""
        if file_hash != f"h{len(files.get(path, ''))}":
            return json.dumps({"result": "error", "reason": "Hash mismatch"}, indent=2)
        files[path] = files.get(path, "") + text
        return json.dumps({"result": "ok"}, indent=2)

    return srv


def test_a_hash_in_a_path_keyed_result_chains_into_the_next_call() -> None:
    """The explore walk chains a hash it read under a path key into the call that needs it (the walk that found
    nothing to chain on mcp-text-editor: every edit there was refused as *Hash mismatch*)."""
    env = MCPEnv({"e": InProcess(_editor())}, [])
    try:
        explorer = ExploreProposer(seed=0, walk_length=2, values=["/w/a.txt"], chain=1.0)
        hashes = set()
        for w in range(6):
            walk = explorer.walk(_Runner(env, None), env, w)
            for s in walk.steps:
                if s.call["tool"] == "append" and s.call["arguments"]["file_hash"].startswith("h"):
                    hashes.add(s.call["arguments"]["file_hash"])
    finally:
        env.close()
    assert "h6" in hashes  # "alpha\n" has 6 characters: read, then chained


def _notes() -> MCPServer:
    srv = MCPServer("notes")
    notes: dict[str, str] = {}

    @srv.tool(name="mcp_gym_reset")
    def reset(task_id: str | None = None, seed: int = 0) -> str:
        notes.clear()
        return "reset"

    @srv.tool()
    def put(key: str, value: str) -> str:
        """Store a note."""
        notes[key] = value
        return "stored"

    @srv.tool(annotations=READ_ONLY)
    def dump() -> dict[str, Any]:
        """All notes."""
        return dict(notes)

    @srv.tool(annotations=READ_ONLY)
    def get(key: str) -> str:
        """One note."""
        return notes.get(key, "")

    return srv


def test_a_task_that_differs_only_by_a_repeated_call_is_a_duplicate() -> None:
    """"put a=1" and "put a=1, then put a=1" have the same check: both were kept (their tool lists differ), one a
    longer copy of the other. The calls, with repeats left out, now make the second a *duplicate*; a task with
    another call stays. So does a task with the same prompt checked by another read (PyPI mcp-server-motherduck kept
    "call `execute_query` with CREATE TABLE t(x INT)" twice, checked by ``list_tables`` with ``{}`` and with
    ``{"schema": null}``): the agent is shown one task."""
    env = MCPEnv({"n": InProcess(_notes())}, [])
    checker = _Checker(_Runner(env, None), "t", 0, {"train": 1.0}, None)
    put = {"tool": "put", "arguments": {"key": "a", "value": "1"}}
    other = {"tool": "put", "arguments": {"key": "b", "value": "2"}}
    dump = {"state": [{"tool": "dump", "arguments": {}}]}
    get = {"state": [{"tool": "get", "arguments": {"key": "a"}}]}
    verdicts = []
    try:
        for prompt, solution, check in (("put a", [put], dump), ("put a twice", [put, put], dump),
                                        ("put a, b, a", [put, other, put], dump), ("put a, b", [put, other], dump),
                                        ("put a", [put], get)):
            try:
                verdicts.append(checker.check(Proposal(prompt, solution, check, "llm")).grader["subset"])
            except _Drop as d:
                verdicts.append(f"{d.reason}: {d.detail}")
    finally:
        env.close()
    assert verdicts == [{"a": "1"}, f"duplicate: {REPEAT}", {"a": "1", "b": "2"}, f"duplicate: {REPEAT}",
                        "duplicate: the same prompt as a kept task (checked by another read)"]


REPEAT = "the same calls (a repeated call aside), check and answer as a kept task"


def test_an_answer_task_with_calls_that_change_nothing_in_its_answer_is_a_duplicate() -> None:
    """PyPI mcp-shell-server kept "call `wc` with stdin `cat`, answer with the last word of line 1" (3) and the same
    after an unneeded `head` call (unannotated, so taken for a change the `wc` might need): the same call asked the
    same place, with the same answer. The second is a duplicate now; the same call asked for another value is not."""
    env = MCPEnv({"n": InProcess(_notes())}, [])
    checker = _Checker(_Runner(env, None), "t", 0, {"train": 1.0}, None)
    put_a = {"tool": "put", "arguments": {"key": "a", "value": "1"}}
    put_b = {"tool": "put", "arguments": {"key": "b", "value": "2"}}
    get_a = {"tool": "get", "arguments": {"key": "a"}}
    verdicts = []
    try:
        for prompt, solution, step, path in (("a", [put_a, get_a], 2, "$.result"), ("b", [put_a, put_b, get_a], 3,
                                             "$.result"), ("c", [put_a, put_b], 2, "$.result")):
            try:
                verdicts.append(checker.check(Proposal(prompt, solution, {"answer": {"step": step, "path": path}},
                                                       "llm")).answer)
            except _Drop as d:
                verdicts.append(d.reason)
    finally:
        env.close()
    assert verdicts == ["1", "duplicate", "stored"]


def _tally() -> MCPServer:
    """tests/servers/tally_server.py in process: a total kept from episode to episode, as a database on a fixed path."""
    srv = MCPServer("tally")
    total = [0]

    @srv.tool()
    def add(amount: int) -> str:
        """Add to the total."""
        total[0] += amount
        return "added"

    @srv.tool(annotations=READ_ONLY)
    def report() -> str:
        """The total."""
        return f"total: {total[0]}"

    return srv


def _validate(tasks: list[Task]) -> tuple[list[str], list[str]]:
    env = MCPEnv({"t": InProcess(_tally())}, tasks)
    seen: dict[str, list[Any]] = {}
    try:
        checks = [check_task(env, t, seen.setdefault(t.id, [])) for t in tasks]
        again = replay_checks(env, tasks, checks, seen)
    finally:
        env.close()
    return [c.status for c in checks], [c.reason if c.status != "passed" else "passed" for c in again]


def test_validate_replay_fails_a_stale_answer_and_a_check_left_passing() -> None:
    """``tasks validate`` plays each task once and the oracle submits the stored answer, so an answer read from state
    that other tasks change ("the total is 0", kept beside "add 2") passed both while the right answer failed. With
    ``replay=true`` the solutions run once more and each task is checked again: the total moved (stale), and a state
    check the earlier solutions already satisfy passes with no action; the task whose answer holds still passes."""
    tasks = [Task(id="read", prompt="Report the total.", solution=({"tool": "report", "arguments": {}},),
                  answer="0", grader={"kind": "exact"}),
             Task(id="add", prompt="Add 2.", solution=({"tool": "add", "arguments": {"amount": 2}},),
                  answer="added", grader={"kind": "exact"}),
             Task(id="state", prompt="Add 2.", solution=({"tool": "add", "arguments": {"amount": 2}},),
                  grader={"kind": "mcp", "tool": "report", "arguments": {}, "contains": "total: "})]
    first, again = _validate(tasks)
    assert first == ["passed", "passed", "passed"]  # validate alone: all fine
    assert again[0].startswith("stale answer: after the other tasks' solutions ran, ") and "no longer returns '0'" \
        in again[0] and "keeps state between episodes" in again[0], again
    assert again[1] == "passed"
    assert "passes with no action" in again[2]


@pytest.mark.parametrize("answer", ["7", "seven"])
def test_validate_replay_leaves_an_answer_no_result_held(answer: str) -> None:
    """An answer none of the solution's results held (one the agent works out) cannot be followed: it is left as it
    is, never called stale on a guess."""
    tasks = [Task(id="sum", prompt="Add 2, answer 7.", solution=({"tool": "add", "arguments": {"amount": 2}},),
                  answer=answer, grader={"kind": "exact"})]
    assert _validate(tasks) == (["passed"], ["passed"])


def _motherduck_like() -> MCPServer:
    """What PyPI mcp-server-motherduck 1.1.0 answers (a str result: the SDK wraps it in ``{"result": TEXT}``), isError
    false every time: rows, or a failure as JSON."""
    srv = MCPServer("db")

    @srv.tool(annotations=READ_ONLY)
    def list_columns(table: str) -> str:
        """The columns of a table."""
        if table != "orders":
            return json.dumps({"success": False, "error": f"Table or view not found: db.main.{table}",
                               "errorType": "NotFoundError"}, indent=2)
        return json.dumps({"success": True, "table": "orders", "columns": [{"name": "id", "type": "INTEGER"}]},
                          indent=2)

    return srv


def test_a_json_result_that_reports_a_failure_is_a_failed_call() -> None:
    """Read whole, motherduck's failures became answers ("answer with `error`": ``Table or view not found: ...``;
    mcp-text-editor's ``"result": "error"``): a JSON object saying it failed is a failed call now, as a text matching
    ``generator.error_text`` is, and makes no answer or chained value; ``generator.error_text: null`` trusts isError
    alone."""
    from mcp_gym.jobs.generate import _error_text
    from mcp_gym.jobs.proposers import reports_failure

    env = MCPEnv({"db": InProcess(_motherduck_like())}, [])
    try:
        runner = _Runner(env, None, _error_text(r"^\W*(\w+ )?error\W?:"))
        bad, good = runner([{"tool": "list_columns", "arguments": {"table": "SELECT 1"}},
                            {"tool": "list_columns", "arguments": {"table": "orders"}}])
        trusting = _Runner(env, None, None)([{"tool": "list_columns", "arguments": {"table": "x"}}])
    finally:
        env.close()
    assert bad[0] is False and "the result reports a failure (\"success\": false" in runner.first_error
    assert good == (True, {"success": True, "table": "orders", "columns": [{"name": "id", "type": "INTEGER"}]})
    # "success: true" holds for every kept call: no answer (@cyanheads/git-mcp-server's tasks all had one)
    assert dict(fields(good[1])) == {"$.table": "orders", "$.columns[0].name": "id", "$.columns[0].type": "INTEGER"}
    assert trusting[0][0] is True
    assert reports_failure({"{workspace}/a.txt": {"result": "error", "reason": "Hash mismatch"}}) == '"result": "error"'
    assert [reports_failure(v) for v in ({"error": None, "rows": []}, {"result": "ok"}, {"a": {"b": {"ok": False}}},
                                         [{"success": False}], "error")] == [None] * 5


# Heavy lane (~4-11 s: Hydra and two stdio server starts); fast cover:
# test_validate_replay_fails_a_stale_answer_and_a_check_left_passing
@pytest.mark.slow
def test_tasks_validate_replay_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``mcp-gym tasks validate ... replay=true`` on a stdio server that keeps a total in its process: exit 1, the
    stale answer in validation.json and a line saying what the replay did; without it, exit 0."""
    from mcp_gym.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in (
        {"id": "read", "prompt": "Report the total.", "solution": [{"tool": "total", "arguments": {}}], "answer": "0"},
        {"id": "add", "prompt": "Add 2.", "solution": [{"tool": "add", "arguments": {"amount": 2}}],
         "answer": "added"})))
    server = f'+env.servers.t="{sys.executable} {Path(__file__).parent / "servers" / "tally_server.py"}"'
    args = ["tasks", "validate", "env=custom", server, f"env.tasks={tasks}"]
    assert main([*args, f"out={tmp_path / 'once'}"]) == 0
    assert main([*args, f"out={tmp_path / 'replay'}", "replay=true"]) == 1
    checks = {c["task_id"]: c for c in json.loads((tmp_path / "replay" / "validation.json").read_text())}
    assert checks["add"]["status"] == "passed" and checks["read"]["status"] == "failed"
    assert checks["read"]["reason"].startswith("stale answer: after the other tasks' solutions ran, call 1 at ")
    assert "2 passed tasks checked again after their solutions ran once more on the servers that keep state (t): " \
        "1 no longer pass" in capsys.readouterr().out


MOTHERDUCK, NEEDS_MOTHERDUCK = installed("MCP_GYM_MOTHERDUCK_SERVER", "mcp-server-motherduck",
                                         "PyPI, in a venv of its own: pip install mcp-server-motherduck (it brings "
                                         "duckdb)")
TEXT_EDITOR, NEEDS_TEXT_EDITOR = installed("MCP_GYM_TEXT_EDITOR_SERVER", "mcp-text-editor",
                                           "PyPI, in a venv of its own: pip install mcp-text-editor 'mcp<2'")


def _generate_and_validate(tmp: Path, server: str, n: int, *extra: str) -> list[dict[str, Any]]:
    """``tasks generate`` (n tasks, seed 0, the fixture tmp/fixture), then ``tasks validate`` of them (all pass)."""
    from mcp_gym.cli import main

    out = tmp / "gen"
    assert main(["tasks", "generate", "env=custom", server, f"fixture={tmp / 'fixture'}", f"n={n}", "seed=0",
                 f"out={out}", *extra]) == 0
    assert main(["tasks", "validate", "env=custom", server, f"env.tasks={out / 'tasks.jsonl'}",
                 f"out={tmp / 'validate'}"]) == 0
    return [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]


# Heavy lane (~1-5 min: a fresh server per run); fast cover: the tests above on in-process servers of the same shapes
@pytest.mark.slow
@pytest.mark.thirdparty
@NEEDS_MOTHERDUCK
def test_generated_motherduck_tasks_answer_from_its_json(tmp_path: Path) -> None:
    """The real mcp-server-motherduck on a fixture database: its pretty-printed JSON (sent as ``{"result": TEXT}``)
    makes answer tasks, none of them on an error it reported with isError false, and they pass tasks validate."""
    import subprocess

    (tmp_path / "fixture").mkdir()
    python = str(Path(str(MOTHERDUCK)).resolve().parent / "python")  # its own venv has duckdb
    subprocess.run([python, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                    "c.execute('CREATE TABLE orders(id INT, qty INT)'); c.execute('INSERT INTO orders VALUES (1, 3), "
                    "(2, 10)'); c.close()", str(tmp_path / "fixture" / "db.duckdb")], check=True)
    rows = _generate_and_validate(tmp_path, f'+env.servers.db="{MOTHERDUCK} --db-path {{workspace}}/db.duckdb '
                                  '--read-write"', 3, 'generator.values=["SELECT count(*) FROM orders",orders,'
                                  '"SELECT 1 FROM nope"]')
    assert len(rows) == 3 and any(r["answer"] is not None for r in rows), rows
    assert not [r for r in rows if "`success`" in r["prompt"] or "`error" in r["prompt"]
                or "not found" in str(r["answer"])], rows


# Heavy lane (~1-3 min); fast cover: test_a_pretty_printed_json_text_keyed_by_paths_makes_answers
@pytest.mark.slow
@pytest.mark.thirdparty
@NEEDS_TEXT_EDITOR
def test_generated_text_editor_tasks_read_members_keyed_by_path(tmp_path: Path) -> None:
    """The real mcp-text-editor made no task (its results are keyed by the file's path); now it makes answer tasks
    that name such a member, and they pass tasks validate."""
    (tmp_path / "fixture").mkdir()
    (tmp_path / "fixture" / "a.txt").write_text("alpha\nbeta\ngamma\n")
    rows = _generate_and_validate(tmp_path, f'+env.servers.te={{command: {TEXT_EDITOR}, cwd: "{{workspace}}"}}', 2,
                                  'generator.values=["{workspace}/a.txt"]')
    assert len(rows) == 2 and all("$['{workspace}/a.txt']" in r["prompt"] for r in rows), rows
