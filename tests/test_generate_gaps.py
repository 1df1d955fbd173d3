"""Three gaps of ``mcp-gym tasks generate`` left by running it on servers nobody here wrote: edits that need a hash a
read returned (PyPI mcp-text-editor: no state task), an answer that repeats a server's false claim about its own
change (npm @cyanheads/git-mcp-server's ``stash@{0}``), and state checks on ``{"result": TEXT}`` results that
compared the whole text."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from test_generate_leftovers import NEEDS_TEXT_EDITOR, TEXT_EDITOR, _generate_and_validate

from mcp_gym import InProcess, MCPEnv
from mcp_gym.jobs._chain import last_key, match, typed
from mcp_gym.jobs.generate import _Checker, _Drop, _error_text, _Runner
from mcp_gym.jobs.proposers import ExploreProposer, Proposal, Walk, _Step
from mcp_gym.jobs.validate import check_task
from mcp_gym.tasks import Task

READ_ONLY = ToolAnnotations(read_only_hint=True)
CHANGES = ToolAnnotations(read_only_hint=False)


def _runner(env: MCPEnv) -> _Runner:
    """A runner that reads a JSON result saying it failed as a failed call, as ``tasks generate``'s does."""
    return _Runner(env, None, _error_text(r"^\W*(\w+ )?error\W?:"))


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _text_editor() -> MCPServer:
    """mcp-text-editor 1.0.2's shapes in process: a read returns the file's hash and, per range, its lines and hash
    (with more values beside them); an edit of lines ``line_start``..``line_end`` needs the file's hash and that
    range's, else it is refused as ``{"result": "error"}`` with isError false."""
    srv = MCPServer("editor")
    files: dict[str, list[str]] = {}

    @srv.tool(name="mcp_gym_reset")
    def reset(task_id: str | None = None, seed: int = 0) -> str:
        files.clear()
        files["/w/a.txt"] = ["alpha\n", "beta\n", "gamma\n"]
        return "reset"

    @srv.tool(annotations=READ_ONLY)
    def get_text_file_contents(file_path: str, start: int = 1) -> str:
        """Read lines ``start``.. of a file, with the hashes an edit needs."""
        lines = files.get(file_path, [])
        part = lines[max(start, 1) - 1:]
        return json.dumps({file_path: {"ranges": [{"content": "".join(part), "start_line": max(start, 1),
                                                   "end_line": len(lines), "range_hash": _h("".join(part)),
                                                   "total_lines": len(lines), "content_size": len("".join(part))}],
                                       "file_hash": _h("".join(lines)), "encoding": "utf-8"}}, indent=2)

    @srv.tool(annotations=CHANGES)
    def edit_text_file_contents(path: str, file_hash: str, line_start: int, line_end: int, range_hash: str,
                                contents: str) -> str:
        """Replace lines ``line_start``..``line_end`` of a file read with get_text_file_contents."""
        lines = files.get(path, [])
        if file_hash != _h("".join(lines)) or range_hash != _h("".join(lines[line_start - 1:line_end])):
            return json.dumps({"result": "error", "reason": "Hash mismatch - file has been modified"}, indent=2)
        lines[line_start - 1:line_end] = [contents + "\n"]
        return json.dumps({"result": "ok", "file_hash": _h("".join(lines))}, indent=2)

    return srv


def test_an_argument_takes_the_value_named_like_it() -> None:
    """How a result's value is named and which argument it fits: the same name first (``file_hash``), then the same
    words in another order (``line_start``/``start_line``), then one name's words among the other's (``range_hash``,
    ``hash``); a line or a word of a text has no name. A value is taken in the argument's type, or not at all."""
    assert last_key("$['{workspace}/a.txt'].ranges[0].range_hash") == "range_hash"
    assert last_key("$['{workspace}/a.txt'].file_hash") == "file_hash" and last_key("$.items[3]") == "items"
    assert last_key("$['{workspace}/a.txt']") == "{workspace}/a.txt" and last_key("field:Name") == "Name"
    assert last_key("line:2") is None and last_key("word:1") is None
    assert [match("file_hash", k) for k in ("file_hash", "fileHash", "hash", "range_hash", "file_path", None)] == \
        [3, 3, 1, 0, 0, 0]
    assert [match("line_start", k) for k in ("start_line", "start", "line_end")] == [2, 1, 0]
    assert match("entityName", "name") == 1 and match("range_hash", "hash") == 1
    assert [typed("3", 0), typed("3", None), typed("3", 0.5), typed("x", 0), typed("true", False), typed("3", "")] \
        == [3, 3, 3.0, None, True, "3"]
    assert typed("2.5", 1) is None and typed("2.5", None) == 2.5


def test_a_nested_edit_takes_its_values_from_one_record_and_keeps_that_item_alone() -> None:
    """mcp-text-editor's edit nests its patches two lists deep, where the sampler draws no optional member and several
    items: a patch with no ``range_hash`` or two patches that overlap were refused. An optional member an earlier
    value is named like is added, values beside one taken from a record (``ranges[1]``) come from the same record,
    and a list keeps only the item that took one."""
    import numpy as np

    from mcp_gym.jobs._chain import Token, chain_arguments, template

    schema = {"type": "object", "properties": {"files": {"type": "array", "items": {
        "type": "object", "required": ["path", "patches"], "properties": {
            "path": {"type": "string"}, "file_hash": {"type": "string"},
            "patches": {"type": "array", "items": {"type": "object", "required": ["contents"], "properties": {
                "line_start": {"type": "integer"}, "line_end": {"type": ["integer", "null"]},
                "contents": {"type": "string"}, "range_hash": {"type": "string"}}}}}}}}}
    read = "$['/w/a.txt']"
    tokens = [Token(v, 0, f"{read}.ranges[{r}].{k}") for r, rec in enumerate(({"start_line": "1", "end_line": "3",
                                                                                "range_hash": "h13"},
                                                                               {"start_line": "2", "end_line": "3",
                                                                                "range_hash": "h23"}))
              for k, v in rec.items()] + [Token("fh", 0, f"{read}.file_hash"), Token("/w/a.txt", -1, "")]
    args = {"files": [{"path": "/w/a.txt", "patches": [{"contents": "x"}, {"contents": "y"}]},
                      {"path": "zz", "patches": []}]}
    out, uses, where = chain_arguments(args, tokens, np.random.default_rng(0), 1.0, ["contents", "path"], schema)
    patch = out["files"][0]["patches"][0]
    assert len(out["files"]) == 1 and len(out["files"][0]["patches"]) == 1, out
    assert out["files"][0]["file_hash"] == "fh" and isinstance(patch["line_start"], int), out
    record = {"1": ("3", "h13"), "2": ("3", "h23")}[str(patch["line_start"])]
    assert (str(patch["line_end"]), patch["range_hash"]) == record, out  # one range's start, end and hash
    assert sorted(where.values()) == sorted([("files", 0, "file_hash"), ("files", 0, "patches", 0, "line_start"),
                                             ("files", 0, "patches", 0, "line_end"),
                                             ("files", 0, "patches", 0, "range_hash")]), where
    shown = template(out, uses, where)
    assert '"line_start": <' in shown and '"range_hash": "<' in shown, shown


def test_an_edit_that_needs_a_hash_a_read_returned_becomes_a_state_task() -> None:
    """On mcp-text-editor a walk read a file, then drew the edit's ``file_hash`` from every value read so far (one in
    eight was the file's hash), its ``range_hash`` too, and its line numbers at random: every edit was refused and
    the server gave no state task. Now an argument takes the earlier value named like it (``file_hash``,
    ``range_hash``, ``line_start`` <- ``start_line``, ``line_end`` <- ``end_line``): edits succeed, and the walks
    make state tasks checked by the read, which pass a fresh run and fail with no action."""
    env = MCPEnv({"e": InProcess(_text_editor())}, [])
    runner = _runner(env)
    checker = _Checker(runner, "t", 0, {"train": 1.0}, None)
    explorer = ExploreProposer(seed=0, walk_length=3, values=["/w/a.txt"], chain=1.0)
    edits = kept = 0
    try:
        for w in range(8):
            walk = explorer.walk(runner, env, w)
            edits += sum(s.ok and s.call["tool"] == "edit_text_file_contents" for s in walk.steps)
            for p in explorer.proposals(walk, w):
                if "state" not in p.check:
                    continue
                try:
                    task = checker.check(p)
                except _Drop:
                    continue
                kept += 1
                assert task.grader["tool"] == "get_text_file_contents" and "subset" in task.grader, task.grader
                assert "is `$['/w/a.txt'].file_hash` of what step 1 returned" in task.prompt, task.prompt
                assert '"line_start": <C>' in task.prompt and "<E> is `$['/w/a.txt'].ranges[0].range_hash`" \
                    in task.prompt, task.prompt
    finally:
        env.close()
    assert edits >= 2 and kept >= 1, (edits, kept)


def test_a_chained_number_is_shown_bare_in_the_prompt() -> None:
    """A chained integer stands in the prompt's arguments as ``<B>``, not ``"<B>"`` (a string the schema refuses),
    and every placeholder names the place it comes from."""
    env = MCPEnv({"e": InProcess(_text_editor())}, [])
    explorer = ExploreProposer(seed=0, walk_length=2, values=["/w/a.txt"], chain=1.0)
    try:
        prompts = [p.prompt for w in range(12) for p in explorer.proposals(explorer.walk(_runner(env), env, w),
                                                                             w)]
    finally:
        env.close()
    edits = [p for p in prompts if "call `edit_text_file_contents`" in p and '"line_start": <' in p]
    assert edits, prompts
    assert all('"line_start": "<' not in p for p in prompts)
    assert any("is `$['/w/a.txt'].ranges[0].start_line` of what step 1 returned" in p for p in edits), edits


def _stash() -> MCPServer:
    """@cyanheads/git-mcp-server's stash in process: ``stash`` says it created ``stash@{0}`` and stores nothing (a
    clean tree), ``push`` stores a name and says so, ``stash_list`` (read-only) lists what is stored."""
    srv = MCPServer("git")
    stored: list[str] = []

    @srv.tool(name="mcp_gym_reset")
    def reset(task_id: str | None = None, seed: int = 0) -> str:
        stored.clear()
        return "reset"

    @srv.tool(annotations=CHANGES)
    def stash() -> dict[str, Any]:
        """Stash the changes."""
        return {"created": "stash@{0}", "message": "Saved working directory"}

    @srv.tool(annotations=CHANGES)
    def push(name: str) -> dict[str, Any]:
        """Store a named stash."""
        stored.append(name)
        return {"pushed": f"stash-{len(stored)}"}

    @srv.tool(annotations=READ_ONLY)
    def stash_show(ref: str) -> dict[str, Any]:
        """One stash (echoes the ref it was given)."""
        return {"ref": ref, "found": ref in [f"stash-{n}" for n in range(1, len(stored) + 1)]}

    @srv.tool(annotations=READ_ONLY)
    def stash_list() -> dict[str, Any]:
        """The stashes."""
        return {"stashes": [{"id": f"stash-{n}", "name": name} for n, name in enumerate(stored, 1)]}

    return srv


def _walk(env: MCPEnv, explorer: ExploreProposer, calls: list[dict[str, Any]]) -> Walk:
    """A walk of the given calls, played in two fresh episodes as :meth:`ExploreProposer.walk` plays its own."""
    runner = _Runner(env, None)
    first, second = runner(calls), runner(calls)
    steps = [_Step(c, ok, v, mutates=not explorer.reads(env, c["tool"]), read_only=explorer.says(env, c["tool"]))
             for c, (ok, v) in zip(calls, first, strict=True)]
    return Walk(steps, [v2 if ok2 else None for ok2, v2 in second])


def test_an_answer_a_change_gave_about_itself_needs_a_later_read() -> None:
    """A stash of a clean tree said ``created: stash@{0}`` while the stash list stayed empty, and a task asked for
    that answer: the server's word about its own change. Such an answer is now kept only when a read later in the
    walk returns it (``push``'s name, listed by ``stash_list``); else it is dropped as *claim not confirmed*. A
    read's own answers are kept as before, and ``generator.claims: false`` keeps the claims too."""
    env = MCPEnv({"g": InProcess(_stash())}, [])
    calls = [{"tool": "stash", "arguments": {}}, {"tool": "push", "arguments": {"name": "wip"}},
             {"tool": "stash_show", "arguments": {"ref": "stash@{0}"}}, {"tool": "stash_list", "arguments": {}}]
    try:
        explorer = ExploreProposer(seed=0, fields_per_call=3)
        walk = _walk(env, explorer, calls)
        answers = [p for p in explorer.proposals(walk, 0) if "answer" in p.check]
        trusting = [p for p in ExploreProposer(seed=0, fields_per_call=3, claims=False).proposals(walk, 0)
                    if "answer" in p.check]
        checker = _Checker(_Runner(env, None), "t", 0, {"train": 1.0}, None)
        verdicts = {}
        for p in answers:
            try:
                verdicts[(p.solution[-1]["tool"], p.check["answer"]["path"])] = checker.check(p).answer
            except _Drop as d:
                verdicts[(p.solution[-1]["tool"], p.check["answer"]["path"])] = d.reason
    finally:
        env.close()
    assert verdicts[("stash", "$.created")] == "claim not confirmed"  # stash_show echoes the ref it was given
    assert verdicts[("stash", "$.message")] == "claim not confirmed"
    assert verdicts[("push", "$.pushed")] == "stash-1"  # stash_list returned it after
    assert verdicts[("stash_list", "$.stashes[0].id")] == "stash-1"  # a read's own answer
    assert not [p for p in trusting if p.malformed] and len(trusting) == len(answers)
    why = next(p.malformed for p in answers if p.check["answer"]["path"] == "$.created")
    assert why == "call 1 (stash) changed state and said 'stash@{0}' at $.created; no later read in its walk " \
                  "returned it"


def test_a_tool_that_says_nothing_is_judged_by_the_workspace_files(tmp_path: Path) -> None:
    """A tool with no ``readOnlyHint`` (mcp-text-editor's two) changes state when the workspace's files change across
    its call, and reads when they do not: an edit's answer needs a later read, a read's answers are its own."""
    from mcp_gym.jobs._claims import changes, reads

    said = [_Step({"tool": "x", "arguments": {}}, True, read_only=r, same_files=f)
            for r, f in ((True, False), (False, True), (None, False), (None, True), (None, None))]
    assert [changes(s) for s in said] == [False, True, True, False, False]
    assert [reads(s) for s in said] == [True, False, False, True, False]


def _tables() -> MCPServer:
    """A database answering as PyPI mcp-server-motherduck does: a str result (the SDK sends ``{"result": TEXT}``) of
    pretty-printed JSON."""
    srv = MCPServer("db")
    tables: list[str] = []

    @srv.tool(name="mcp_gym_reset")
    def reset(task_id: str | None = None, seed: int = 0) -> str:
        tables.clear()
        return "reset"

    @srv.tool(annotations=CHANGES)
    def create_table(name: str) -> str:
        """Create a table."""
        tables.append(name)
        return json.dumps({"success": True, "created": name}, indent=2)

    @srv.tool(annotations=READ_ONLY)
    def list_tables() -> str:
        """The tables."""
        return json.dumps({"success": True, "tables": sorted(tables), "count": len(tables)}, indent=4)

    return srv


def test_a_state_check_on_a_wrapped_json_text_checks_the_json() -> None:
    """``list_tables``'s result is ``{"result": TEXT}`` with TEXT a JSON object: the check was a ``subset`` of the
    whole new text (every space of its pretty-printing, every other table). It is now the JSON's new members, with
    ``unwrap_json: true`` in the grader; a grader without it (an older task file) still reads the text, as before."""
    env = MCPEnv({"db": InProcess(_tables())}, [])
    create = {"tool": "create_table", "arguments": {"name": "orders"}}
    try:
        checker = _Checker(_Runner(env, None), "t", 0, {"train": 1.0}, None)
        task = checker.check(Proposal("Create orders.", [create], {"state": [{"tool": "list_tables", "arguments": {}}]},
                                      "llm"))
        old = Task(id="old", prompt="Create orders.", solution=(create,),
                   grader={"kind": "mcp", "tool": "list_tables", "arguments": {},
                           "subset": {"result": json.dumps({"success": True, "tables": ["orders"], "count": 1},
                                                           indent=4)}})
        env.tasks.append(old)
        old_check = check_task(env, old)
        spaced = Task(id="spaced", prompt="x", solution=(create,),
                      grader={"kind": "mcp", "tool": "list_tables", "arguments": {},
                              "subset": {"result": json.dumps({"success": True, "tables": ["orders"], "count": 1})}})
        env.tasks.append(spaced)
        spaced_check = check_task(env, spaced)
    finally:
        env.close()
    assert task.grader == {"kind": "mcp", "tool": "list_tables", "arguments": {}, "unwrap_json": True,
                           "subset": {"tables": ["orders"], "count": 1}}, task.grader
    assert old_check.status == "passed"  # the whole text, as old files were graded
    assert spaced_check.status == "failed"  # ... which another pretty-printing fails: what unwrap_json avoids


@pytest.mark.parametrize("bad", ["yes", 1])
def test_the_mcp_grader_refuses_an_unwrap_json_that_is_no_boolean(bad: Any) -> None:
    from mcp_gym.graders.state import MCPGrader

    with pytest.raises(ValueError, match="unwrap_json is true or false"):
        MCPGrader(tool="t", subset={}, unwrap_json=bad)


# Heavy lane (~3-6 min: a fresh server per run); fast cover: test_an_edit_that_needs_a_hash_a_read_returned_becomes_...
@pytest.mark.slow
@pytest.mark.thirdparty
@NEEDS_TEXT_EDITOR
@pytest.mark.timeout(1800)
def test_generated_text_editor_tasks_edit_with_the_hash_they_read(tmp_path: Path) -> None:
    """The real mcp-text-editor gave answer tasks only (0 state tasks of 10): its edits need the hashes a read
    returned. With arguments taking the value named like them, ``n=10 seed=0`` keeps edit tasks checked by the
    workspace's files, and they pass tasks validate."""
    (tmp_path / "fixture").mkdir()
    (tmp_path / "fixture" / "a.txt").write_text("alpha\nbeta\ngamma\n")
    rows = _generate_and_validate(tmp_path, f'+env.servers.te={{command: {TEXT_EDITOR}, cwd: "{{workspace}}"}}', 10,
                                  'generator.values=["{workspace}/a.txt"]')
    edits = [r for r in rows if "kind:state" in r["tags"] and "tool:edit_text_file_contents" in r["tags"]]
    assert edits and all(json.loads(r["grader"])["kind"] == "files" for r in edits), rows
    assert any("file_hash` of what step" in r["prompt"] for r in edits), edits
