"""The explore walks *follow* a read: the next call is, more often, a tool whose arguments are named like what the read
returned, with those arguments filled from it. On PyPI mcp-text-editor 2 of 48 edits changed the file: the edit needs
the file's hash and the range's hash, start and end, which its read returns, and drawn at random they were seldom
right together (a random ``path``, an empty ``files`` list, a ``line_start`` without its ``range_hash``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import installed
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

from mcp_gym import InProcess, MCPEnv
from mcp_gym.jobs._chain import Token, argument_names, chain_arguments
from mcp_gym.jobs.generate import _error_text, _Runner
from mcp_gym.jobs.proposers import ExploreProposer, _Step

READ_ONLY = ToolAnnotations(read_only_hint=True)
START = "alpha\nbeta\ngamma\n"


class Patch(BaseModel):
    line_start: int = 1
    line_end: int | None = None
    contents: str
    range_hash: str | None = None


class Patched(BaseModel):
    path: str
    file_hash: str
    patches: list[Patch]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _editor() -> MCPServer:
    """mcp-text-editor's shapes: a read of a range keyed by the file's path, with the file's hash and the range's
    hash, start and end; an edit that refuses a patch whose hashes or lines are not the read's; and a tool that takes
    none of the read's names (a walk that draws tools alike calls it as often as the edit)."""
    srv = MCPServer("editor")
    store = {"/w/a.txt": START}

    @srv.tool(name="mcp_gym_reset")
    def reset(task_id: str | None = None, seed: int = 0) -> str:
        store.clear()
        store["/w/a.txt"] = START
        return "reset"

    @srv.tool(annotations=READ_ONLY)
    def get_text_file_contents(file_path: str, start: int = 1, end: int | None = None) -> str:
        """Read lines ``start`` to ``end`` of a file."""
        if file_path not in store:
            return json.dumps({"result": "error", "reason": "no such file"})
        lines = store[file_path].splitlines(keepends=True)
        stop = len(lines) if end is None else end
        part = "".join(lines[start - 1:stop])
        return json.dumps({file_path: {"ranges": [{"start_line": start, "end_line": stop, "range_hash": _sha(part)}],
                                       "file_hash": _sha(store[file_path])}}, indent=2)

    @srv.tool(annotations=ToolAnnotations(read_only_hint=False))
    def edit_text_file_contents(files: list[Patched]) -> str:
        """Replace lines of files."""
        for f in files:
            if f.path not in store or f.file_hash != _sha(store[f.path]):
                raise ToolError("Hash mismatch - file has been modified")
            lines = store[f.path].splitlines(keepends=True)
            for p in f.patches:
                stop = len(lines) if p.line_end is None else p.line_end
                if p.range_hash != _sha("".join(lines[p.line_start - 1:stop])):
                    raise ToolError("Content hash mismatch")
                lines[p.line_start - 1:stop] = [p.contents + "\n"]
            store[f.path] = "".join(lines)
        return json.dumps({"result": "ok"})

    @srv.tool(annotations=ToolAnnotations(read_only_hint=False))
    def log_message(message: str, level: int = 0) -> str:
        """Write a log line."""
        return "logged"

    return srv


def _edit_schema(env: MCPEnv) -> dict[str, Any]:
    entry = env.host.resolve("edit_text_file_contents")
    assert entry is not None
    return entry.input_schema


def test_a_tool_follows_a_read_by_the_names_of_its_arguments() -> None:
    """The edit takes ``file_hash``, ``range_hash`` (the same names as the read's values), ``line_start`` and
    ``line_end`` (``start_line``, ``end_line``: the same words): it follows the read far better than the read itself
    (``start``, ``end``: words among ``start_line``'s) or a tool that takes none of them."""
    env = MCPEnv({"e": InProcess(_editor())}, [])
    try:
        call = {"tool": "get_text_file_contents", "arguments": {"file_path": "/w/a.txt"}}
        [(ok, value)] = _Runner(env, None)([call])
        assert ok and value["/w/a.txt"]["file_hash"] == _sha(START), value
        read = _Step(call, ok, value, read_only=True)
        explorer = ExploreProposer(seed=0)
        scores = {t: explorer.follows(env, t, read) for t in explorer.tools(env)}
        assert scores == {"get_text_file_contents": 2, "edit_text_file_contents": 10, "log_message": 0}, scores
        assert {"path", "file_hash", "patches", "line_start", "line_end", "range_hash", "contents"} <= \
            argument_names(_edit_schema(env))
    finally:
        env.close()


def test_following_fills_every_named_argument_and_an_empty_list() -> None:
    """An edit that follows a read takes every value named like its arguments, the read's ``file_path`` as its
    ``path``, and gets a patch when the sampler left the list empty; without ``follow`` each is taken by chance."""
    env = MCPEnv({"e": InProcess(_editor())}, [])
    try:
        schema = _edit_schema(env)
    finally:
        env.close()
    read = [Token("h-file", 0, "$['/w/a.txt'].file_hash"), Token("h-range", 0, "$['/w/a.txt'].ranges[0].range_hash"),
            Token("2", 0, "$['/w/a.txt'].ranges[0].start_line"), Token("3", 0, "$['/w/a.txt'].ranges[0].end_line"),
            Token("/w/a.txt", -1, "", name="file_path", at=0)]
    args, uses, _ = chain_arguments({"files": []}, read, np.random.default_rng(0), 0.7, [], schema, follow=True)
    (f,) = args["files"]
    assert (f["path"], f["file_hash"]) == ("/w/a.txt", "h-file")
    (p,) = f["patches"]
    assert (p["line_start"], p["line_end"], p["range_hash"]) == (2, 3, "h-range"), p
    assert {t.value for t in uses.values()} >= {"h-file", "h-range", "2", "3", "/w/a.txt"}
    plain, _, _ = chain_arguments({"files": []}, read, np.random.default_rng(0), 0.7, [], schema)
    assert plain == {"files": []}  # not following: an empty list stays empty, as before


def _edits(follow: float, walks: int = 16) -> tuple[int, int]:
    """Edits tried and edits that changed the file, in ``walks`` walks of 4 calls."""
    env = MCPEnv({"e": InProcess(_editor())}, [])
    tried = changed = 0
    try:
        explorer = ExploreProposer(seed=0, walk_length=4, values=["/w/a.txt"], follow=follow)
        for w in range(walks):
            walk = explorer.walk(_Runner(env, None), env, w)
            for s in walk.steps:
                if s.call["tool"] == "edit_text_file_contents":
                    tried += 1
                    changed += s.ok
    finally:
        env.close()
    return tried, changed


def test_walks_that_follow_reads_make_edits_that_work() -> None:
    """The same 16 walks with ``follow=0`` (tools drawn alike, each argument chained by chance, as before) and the
    default ``0.5``: 3 of 23 edits changed the file before, 10 of 24 now."""
    before = _edits(0.0)
    after = _edits(0.5)
    assert after[1] >= 3 * max(before[1], 1) and after[1] / after[0] > before[1] / max(before[0], 1), (before, after)


# -- the real server (PyPI mcp-text-editor 1.0.2, in a venv of its own with mcp<2) -----------------------------------
TEXT_EDITOR, NEEDS_TEXT_EDITOR = installed("MCP_GYM_TEXT_EDITOR_SERVER", "mcp-text-editor",
                                           "PyPI, in a venv of its own: pip install mcp-text-editor 'mcp<2'")


def _real_walks(tmp_path: Path, follow: float, walks: int) -> list[list[_Step]]:
    """``walks`` walks (one run each) on the real server, the docs' fixture and values."""
    from mcp_gym.jobs.config import env_factory

    fixture = tmp_path / "fixture"
    fixture.mkdir(exist_ok=True)
    (fixture / "a.txt").write_text(START)
    env = env_factory({"name": "custom", "reset_mode": "auto",
                       "servers": {"te": {"command": TEXT_EDITOR, "cwd": "{workspace}"}}}, [])()
    runner = _Runner(env, str(fixture), _error_text(r"^\W*(\w+ )?error\W?:"))
    explorer = ExploreProposer(seed=0, values=["{workspace}/a.txt"], follow=follow)
    try:
        return [explorer._sample_walk(runner, env, w) for w in range(walks)]
    finally:
        env.close()


# Heavy lane (1-3 min: 30 walks, a fresh server each); fast cover: test_walks_that_follow_reads_make_edits_that_work
@pytest.mark.slow
@pytest.mark.thirdparty
@NEEDS_TEXT_EDITOR
def test_edits_that_follow_a_read_of_the_real_text_editor_take_its_hashes(tmp_path: Path) -> None:
    """The real mcp-text-editor, the first 30 walks of ``seed=0``: the edits that follow a read (21) all name the
    file by the path it read and carry the hashes it returned: none is refused for its path or a hash mismatch, and
    some change the file (3; the others fail on arguments no read names: a random ``encoding``, overlapping or no
    patches). As the walks were (``follow=0``), 2 of 92 edits changed it, most refused for a random ``path`` or
    hash."""
    steps = [s for walk in _real_walks(tmp_path, 0.5, 30) for s in walk]
    followed = [s for s in steps if s.call["tool"] == "edit_text_file_contents" and s.follows is not None]
    said = [json.dumps(s.value).lower() for s in followed]
    assert len(followed) >= 10 and sum(s.ok and s.same_files is False for s in followed) >= 2, followed
    assert not [t for t in said if "hash mismatch" in t or "must be absolute" in t], said
