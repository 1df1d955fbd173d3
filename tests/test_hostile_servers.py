"""Misbehaving servers (issue 13, "Servers"): raw JSON-RPC scripts started as real stdio subprocesses.

Each test attacks one class: invalid results, bad tool definitions, unanswered requests (connect, re-listing, reset),
huge messages and a stderr flood. They observe the mechanism (statuses, reasons, the server's own request log, the
server's pid) rather than wall-clock times.
"""

from __future__ import annotations

import http.server
import json
import os
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator

from mcp_gym import InProcess, MCPEnv, Stdio, _schema
from mcp_gym.client._stdio import INVALID_MESSAGE, _top_level
from mcp_gym.client._tools import MAX_TOOL_NAME
from mcp_gym.client.runtime import default_runtime
from mcp_gym.servers.counter import make_server

SERVER = str(Path(__file__).resolve().parent / "servers" / "bad_server.py")
ECHO = {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object",
                                                                 "properties": {"text": {"type": "string"}}}}
OBJ = {"type": "object"}


def tool(name: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": OBJ}


def spec(tmp: Path, tools: list[Any], *extra: str, **kw: Any) -> Stdio:
    """The raw server with these tools, writing its pid and its request log into ``tmp``."""
    args = [SERVER, "--tools", json.dumps(tools), "--pidfile", str(tmp / "pid"), "--log", str(tmp / "log"), *extra]
    return Stdio(sys.executable, args, **kw)


def pid_of(tmp: Path) -> int:
    return int((tmp / "pid").read_text())


def requests(tmp: Path) -> list[str]:
    log = tmp / "log"
    return log.read_text().split() if log.exists() else []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (FileNotFoundError, ProcessLookupError):
        return False


def assert_gone(pid: int, bound: float = 30.0) -> None:
    """The process exits: a failed connection is stopped in the background by the runtime (close stdin, 2 s,
    SIGTERM, 2 s, SIGKILL); in driven mode the runtime runs only during env calls, so this wait drives it."""
    deadline = time.monotonic() + bound
    while alive(pid) and time.monotonic() < deadline:
        default_runtime().call(anyio.sleep, 0.05)
    assert not alive(pid), f"server process {pid} is still running"


def echo(env: MCPEnv, text: str = "hi") -> dict[str, Any]:
    _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": text}})
    assert info["error"] is None, info["error"]
    assert info["content"][0]["text"] == text
    return info


# -- results ---------------------------------------------------------------------------------------------------------
def test_invalid_call_result_is_an_error_observation_every_time(tmp_path: Path) -> None:
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("bad_result")])}, ["t"], call_timeout=10)
    try:
        env.reset(seed=0)
        for _ in range(2):
            obs, _, terminated, truncated, info = env.step({"tool": "bad_result", "arguments": {}})
            err = info["error"]
            assert err["kind"] == "invalid_result" and err["tool"] == "bad_result" and err["server"] == "s"
            assert "tool 'bad_result' on server 's'" in err["message"] and "CallToolResult" in err["message"]
            assert obs["result"].startswith("Error: ") and not terminated and not truncated
        echo(env)  # the session is fine
    finally:
        env.close()


def test_unreadable_response_fails_its_call_at_once(tmp_path: Path) -> None:
    # no call_timeout: without the transport's error for the request's id, this call would never return
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("garbage")])}, ["t"], call_timeout=None)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step({"tool": "garbage", "arguments": {}})
        err = info["error"]
        assert err["kind"] == "jsonrpc" and err["code"] == INVALID_MESSAGE and err["server"] == "s"
        assert "not valid JSON-RPC" in err["message"]
        echo(env)
    finally:
        env.close()


def test_results_the_strict_parser_rejects_are_read_leniently(tmp_path: Path) -> None:
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("deep"), tool("surrogate")])}, ["t"], call_timeout=None)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step({"tool": "deep", "arguments": {"depth": 230}})  # deeper than pydantic's 200
        assert info["error"] is None
        value, depth = info["structured_content"]["v"], 0
        while isinstance(value, list):
            value, depth = value[0], depth + 1
        assert (value, depth) == ("bottom", 230)
        # too deep to read, whatever recursion limit this process runs with (a plugin may have raised it): an error
        _, _, _, _, info = env.step({"tool": "deep", "arguments": {"depth": 100_000}})
        assert info["error"]["code"] == INVALID_MESSAGE and "recursion limit" in info["error"]["message"]
        echo(env)
        obs, _, _, _, info = env.step({"tool": "surrogate", "arguments": {}})
        assert info["error"] is None and obs["result"] == "bad \ufffd text"  # encodable: no lone surrogate
        obs["result"].encode("utf-8")
    finally:
        env.close()


def test_notification_flood_then_reset(tmp_path: Path) -> None:
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("flood")])}, ["t"], call_timeout=120)
    try:
        env.reset(seed=0)
        before = requests(tmp_path).count("tools/list")
        _, _, _, _, info = env.step({"tool": "flood", "arguments": {"n": 100_000}})
        assert info["error"] is None and info["content"][0]["text"] == "flooded"
        assert requests(tmp_path).count("tools/list") == before + 1  # 100,000 list_changed: one re-listing
        _, info = env.reset(seed=1)
        assert info["error"] is None and info["servers"]["s"]["status"] == "ready"
        echo(env)
    finally:
        env.close()


@pytest.mark.slow  # 13 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_text_lines_on_stdout_are_skipped(tmp_path: Path) -> None:
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("noise")])}, ["t"], call_timeout=120)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step({"tool": "noise", "arguments": {"n": 20_000}})
        assert info["error"] is None and info["content"][0]["text"] == "noisy"
        stdio = env.host.connections["s"]._stdio
        assert stdio is not None and stdio.unreadable_lines == 20_000
        echo(env)
    finally:
        env.close()


# -- tool definitions ------------------------------------------------------------------------------------------------
BAD_TOOLS = {
    "type 5": ({"name": "bad", "inputSchema": {"type": 5}}, "bad", "inputSchema.type"),
    "$ref loop": ({"name": "bad", "inputSchema": {"type": "object", "$ref": "#"}}, "bad", "$ref loop"),
    "property $ref loop": ({"name": "bad", "inputSchema": {"type": "object", "properties": {
        "a": {"allOf": [{"$ref": "#/$defs/x"}]}}, "$defs": {"x": {"anyOf": [{"$ref": "#/properties/a"}]}}}}, "bad",
        "$ref loop through #/"),
    "bare $ref": ({"name": "bad", "inputSchema": {"$ref": "#"}}, "bad", "inputSchema.type"),
    "no inputSchema": ({"name": "bad"}, "bad", "inputSchema: Field required"),
    "array schema": ({"name": "bad", "inputSchema": {"type": "array"}}, "bad", "inputSchema.type"),
    "invalid JSON Schema": ({"name": "bad", "inputSchema": {"type": "object", "properties": {"a": {"type": 3}}}},
                            "bad", "not a valid JSON Schema"),
    "unresolvable $ref": ({"name": "bad", "inputSchema": {"type": "object", "$ref": "#/$defs/none"}}, "bad",
                          "cannot be evaluated"),
    "empty name": ({"name": "", "inputSchema": OBJ}, "", "name is empty"),
    "int name": ({"name": 5, "inputSchema": OBJ}, "5", "name must be a string"),
    "100k name": ({"name": "y" * 100_000, "inputSchema": OBJ}, "y" * 60 + "… (100,000 characters)",
                  f"at most {MAX_TOOL_NAME}"),
    "lone surrogate": ({"name": "\udcff", "inputSchema": OBJ}, "\ufffd", "not valid Unicode"),
    "duplicate": (ECHO, "echo", "duplicate name"),
    "not an object": ("echo2", "None", "not a JSON object"),
}


@pytest.mark.parametrize("case", list(BAD_TOOLS))
def test_a_bad_tool_costs_only_that_tool(tmp_path: Path, case: str) -> None:
    bad, shown, reason = BAD_TOOLS[case]
    env = MCPEnv({"s": spec(tmp_path, [ECHO, bad, tool("other")])}, ["t"], call_timeout=10)
    try:
        _, info = env.reset(seed=0)
        srv = info["servers"]["s"]
        assert srv["status"] == "ready" and srv["tools_error"] is None
        assert env.action_space.tool_names == ["echo", "other", "submit"]
        assert len(srv["skipped_tools"]) == 1, srv["skipped_tools"]
        skipped = srv["skipped_tools"][0]
        assert skipped["name"] == shown and reason in skipped["reason"], skipped
        echo(env)
    finally:
        env.close()


def test_recursive_tree_schema_is_fine(tmp_path: Path) -> None:
    node = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
    schema = {"type": "object", "$defs": {"node": node}, "properties": {"root": {"$ref": "#/$defs/node"},
                                                                         "self": {"$ref": "#"}}}
    env = MCPEnv({"s": spec(tmp_path, [{"name": "echo", "inputSchema": schema}])}, ["t"], call_timeout=10)
    try:
        _, info = env.reset(seed=0)
        assert info["servers"]["s"]["skipped_tools"] == [] and "echo" in env.action_space.tool_names
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"root": {"kids": [{"kids": []}]}, "self": {}}})
        assert info["error"] is None
    finally:
        env.close()


def test_a_schema_cannot_make_the_client_fetch_urls(tmp_path: Path) -> None:
    # jsonschema's default registry fetches any URL a $ref names (no timeout): a server could make the client open
    # internal addresses (SSRF) or hang it. A listening socket here counts every request that reaches it.
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            hits.append(self.path)
            body = b'{"type": "object"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/schema.json"
    far = {"name": "far", "inputSchema": {"type": "object", "$ref": url}}
    near = {"name": "near", "inputSchema": {"type": "object", "properties": {"x": {"$ref": url}}, "required": ["x"]}}
    out = {"name": "out", "inputSchema": OBJ, "outputSchema": {"type": "object", "$ref": url + "?out"}}
    env = MCPEnv({"s": spec(tmp_path, [ECHO, far, near, out])}, ["t"], call_timeout=10)
    try:
        _, info = env.reset(seed=0)
        skipped = {t["name"]: t["reason"] for t in info["servers"]["s"]["skipped_tools"]}
        assert set(skipped) == {"far", "out"}, skipped
        assert "cannot be evaluated" in skipped["far"] and "Unresolvable" in skipped["far"]
        assert skipped["out"].startswith("outputSchema cannot be evaluated")
        _, _, _, _, info = env.step({"tool": "near", "arguments": {"x": 1}})
        assert info["error"]["kind"] == "invalid_arguments" and "could not validate" in info["error"]["message"]
        with pytest.raises(ValueError, match="could not"):
            env.action_space.sample(mask="near")
        echo(env)
        assert hits == []
    finally:
        env.close()
        server.shutdown()
        server.server_close()  # its listening socket too, not left to the garbage collector


def test_output_schemas_are_compiled_once_and_still_enforced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the SDK compiles (metaschema-checks, ~5 ms) each tool's outputSchema once per session; mcp-gym hands every
    # session the validator it compiled once per definition, and results are still checked against it
    out = {"type": "object", "properties": {"v": {"type": "array"}}, "required": ["v"], "title": tmp_path.name}
    compiled: list[Any] = []
    for cls in (Draft202012Validator, _schema.validator_class({})):  # the SDK's class, mcp-gym's bounded one

        def counting(cls: Any, schema: Any, *args: Any, _check: Any = cls.check_schema.__func__, **kw: Any) -> None:
            compiled.append(schema)
            _check(cls, schema, *args, **kw)

        monkeypatch.setattr(cls, "check_schema", classmethod(counting))
    deep = {"name": "deep", "inputSchema": OBJ, "outputSchema": out}
    for i in range(2):
        env = MCPEnv({"s": spec(tmp_path, [ECHO, deep])}, ["t"], call_timeout=10)
        try:
            env.reset(seed=i)
            _, _, _, _, info = env.step({"tool": "deep", "arguments": {"depth": 1}})
            assert info["error"] is None and info["structured_content"] == {"v": ["bottom"]}
            _, _, _, _, info = env.step({"tool": "deep", "arguments": {"depth": 0}})  # {"v": "bottom"}
            assert info["error"]["kind"] == "invalid_result", info["error"]
            assert "Invalid structured content" in info["error"]["message"] and "'bottom' is not of type" in \
                info["error"]["message"]
        finally:
            env.close()
    assert sum(schema == out for schema in compiled) == 1


def test_construction_failure_stops_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: MCPEnv) -> bool:
        raise RuntimeError("catalogue bug")

    monkeypatch.setattr(MCPEnv, "_sync_space", broken)
    with pytest.raises(RuntimeError, match="catalogue bug"):
        MCPEnv({"s": spec(tmp_path, [ECHO])}, ["t"])
    assert "tools/list" in requests(tmp_path)  # it was connected and listed
    assert_gone(pid_of(tmp_path))


# -- unanswered requests ---------------------------------------------------------------------------------------------
@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_unanswered_first_listing_fails_within_connect_timeout(tmp_path: Path) -> None:
    # connect_timeout bounds the start and the handshake too (which must succeed here): 5 s, not 2, on a loaded machine
    env = MCPEnv({"s": spec(tmp_path, [ECHO], "--list-answers", "0", connect_timeout=5.0)}, ["t"], call_timeout=10)
    try:
        srv = env.host.server_info()["s"]
        assert srv["status"] == "failed"
        assert srv["error"].startswith("timed out after connect_timeout=5 s listing tools"), srv["error"]
        assert requests(tmp_path)[-1] == "tools/list"  # the server got the request and never answered
        assert env.action_space.tool_names == ["submit"]
        assert_gone(pid_of(tmp_path))
    finally:
        env.close()


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_relisting_after_list_changed_is_bounded_by_call_timeout(tmp_path: Path) -> None:
    # answers the first listing (connect) and the second (reset), never the one after list_changed
    # call_timeout 5 s: the call itself (answered at once) stays within it on a busy machine; the listing never ends
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("change")], "--list-answers", "2")}, ["t"], call_timeout=5.0)
    try:
        _, info = env.reset(seed=0)
        assert info["servers"]["s"]["status"] == "ready"
        pid = pid_of(tmp_path)
        _, _, _, truncated, info = env.step({"tool": "change", "arguments": {}})
        assert info["error"] is None and info["content"][0]["text"] == "changed"  # the call itself succeeded
        srv = info["servers"]["s"]
        assert srv["status"] == "failed" and srv["error"].startswith("timed out after 5 s listing tools"), srv
        assert requests(tmp_path).count("tools/list") == 3
        assert info["tools_changed"] and env.action_space.tool_names == ["submit"]
        assert truncated and info["termination"] == "servers_dead"
        assert_gone(pid)
    finally:
        env.close()


def test_reset_is_bounded_by_reset_timeout(tmp_path: Path) -> None:
    # the server's reset tool never answers and calls have no limit: only reset_timeout ends the wait
    servers = {"good": InProcess(make_server()), "s": spec(tmp_path, [ECHO, tool("mcp_gym_reset")])}
    env = MCPEnv(servers, ["t"], call_timeout=None, reset_timeout=1.5)
    try:
        _, info = env.reset(seed=0)
        assert requests(tmp_path)[-1] == "tools/call"  # the reset call reached the server
        (err,) = info["reset_errors"]
        assert err["kind"] == "timeout" and err["server"] == "s" and "reset timed out after 1.5 s" in err["message"]
        assert info["error"] == err
        srv = info["servers"]["s"]
        assert srv["status"] == "failed" and srv["error"].startswith("reset timed out after 1.5 s")
        assert info["servers"]["good"]["status"] == "ready"  # reset before it: untouched
        names = env.action_space.tool_names
        assert "good__add" in names and not any(n.startswith("s__") for n in names)  # no tools in an unknown state
        assert_gone(pid_of(tmp_path))
    finally:
        env.close()


# -- large messages --------------------------------------------------------------------------------------------------
def test_20_mb_results_arrive_whole(tmp_path: Path) -> None:
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("big")])}, ["t"], call_timeout=120)
    try:
        env.reset(seed=0)
        for _ in range(2):
            obs, _, _, _, info = env.step({"tool": "big", "arguments": {"mb": 20}})
            assert info["error"] is None and len(info["content"][0]["text"]) == 20_000_000
            assert obs["result"].endswith("[truncated 19980000 characters]")
    finally:
        env.close()


def test_result_over_max_message_bytes_is_an_error_and_the_session_goes_on(tmp_path: Path) -> None:
    s = spec(tmp_path, [ECHO, tool("big"), tool("big_notice")], max_message_bytes=1_000_000)
    env = MCPEnv({"s": s}, ["t"], call_timeout=60)
    try:
        env.reset(seed=0)
        pid = pid_of(tmp_path)
        for _ in range(2):
            _, _, _, _, info = env.step({"tool": "big", "arguments": {"mb": 3}})
            err = info["error"]
            assert err["kind"] == "too_large" and err["tool"] == "big" and err["server"] == "s"
            assert "exceeds max_message_bytes=1,000,000" in err["message"], err
            echo(env)  # the same session, the same process
        _, _, _, _, info = env.step({"tool": "big_notice", "arguments": {"mb": 3}})  # an oversized notification
        assert info["error"] is None and info["content"][0]["text"] == "after notice"
        assert env.host.connections["s"].status == "ready" and env.host.connections["s"].pid == pid
    finally:
        env.close()


def test_oversized_message_without_a_findable_id_restarts_the_server(tmp_path: Path) -> None:
    s = spec(tmp_path, [ECHO, tool("big")], max_message_bytes=1_000_000)
    env = MCPEnv({"s": s}, ["t"], call_timeout=60)
    try:
        env.reset(seed=0)
        pid = pid_of(tmp_path)
        _, _, _, truncated, info = env.step({"tool": "big", "arguments": {"mb": 3, "id_last": True}})
        assert info["error"]["kind"] == "server_dead"
        srv = info["servers"]["s"]
        assert srv["status"] == "dead" and "exceeds max_message_bytes=1,000,000" in srv["error"], srv
        assert truncated and info["termination"] == "servers_dead"
        assert_gone(pid)
        _, info = env.reset(seed=1)  # a clean restart
        assert info["servers"]["s"]["status"] == "ready" and pid_of(tmp_path) != pid
        echo(env)
    finally:
        env.close()


@pytest.mark.parametrize(("head", "expected"), [
    (b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "xx', {"id": b"7"}),
    (b'{"result": {"id": 99, "content": [{"text": "\\"id\\": 3, \\"method\\": 1"}]}, "id": "a\\"b"}',
     {"id": b'"a\\"b"'}),  # a nested id and ids inside strings are not the message's
    (b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "nnnn',
     {"method": b'"notifications/message"'}),
    (b'{"result": {"content": [{"text": "no id within the head', {}),
])
def test_top_level_keys_of_an_oversized_message(head: bytes, expected: dict[str, bytes]) -> None:
    found = {k: v for k, v in _top_level(head).items() if k in ("id", "method")}
    assert found == expected


# -- stderr ----------------------------------------------------------------------------------------------------------
def _large_open_files(limit: int) -> list[str]:
    big = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            big.append(os.readlink(f"/proc/self/fd/{fd}"))
    return big


def test_stderr_flood_keeps_a_bounded_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where a temp file would go (the old stderr log did)
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("stderr"), tool("die")], stderr_tail_bytes=4096)}, ["t"],
                 call_timeout=300)
    try:
        env.reset(seed=0)
        conn = env.host.connections["s"]
        _, _, _, _, info = env.step({"tool": "stderr", "arguments": {"mb": 200}})
        assert info["error"] is None
        assert conn._stdio is not None
        deadline = time.monotonic() + 30  # the answer (stdout) can overtake stderr's last chunks: a turn or two more
        while conn._stdio.stderr_bytes <= 200 * 1024 * 1024 and time.monotonic() < deadline:
            env.runtime.call(anyio.sleep, 0.01)
        assert conn._stdio.stderr_bytes > 200 * 1024 * 1024  # all of it went through
        assert len(conn._stdio.stderr_tail().encode()) <= 4096
        assert _large_open_files(1 << 20) == []  # no (unlinked) temp file holds it
        assert list(temp.iterdir()) == []
        _, _, _, _, info = env.step({"tool": "die", "arguments": {}})
        srv = info["servers"]["s"]
        assert srv["status"] == "dead" and "server stderr: " in srv["error"], srv
        tail = srv["error"].split("server stderr: ", 1)[1]
        assert tail.endswith("dying on purpose") and len(tail.encode()) <= 4096
    finally:
        env.close()


# -- stray response ids (issue 36) -----------------------------------------------------------------------------------
STRAY_IDS = ['"²"', '"' + "9" * 5000 + '"', "9" * 5000, '"abc"', "1.5", "[1]", "true", "null", '"٣"']


def test_stray_response_ids_are_not_answers_and_the_real_answer_in_the_chunk_arrives(tmp_path: Path) -> None:
    # "²" passes str.isdigit but not int(); 5,000 digits pass neither int() nor orjson. On the pipe's read callback
    # such an id raised, the chunk (with the real answer after it) was lost and the call waited out its timeout.
    env = MCPEnv({"s": spec(tmp_path, [ECHO, tool("stray")])}, ["t"], call_timeout=60)
    try:
        env.reset(seed=0)
        pid = pid_of(tmp_path)
        for ids in (['"²"'], STRAY_IDS):
            _, _, _, truncated, info = env.step({"tool": "stray", "arguments": {"ids": ids}})
            assert info["error"] is None, info["error"]
            assert info["content"][0]["text"] == "answer" and not truncated
        state = env.host.connections["s"]._stdio
        assert state is not None and state.stray_responses == 4 and state.failure is None  # "²" twice, 9*5000 and "abc"
        assert env.host.connections["s"].status == "ready" and env.host.connections["s"].pid == pid
        echo(env)
    finally:
        env.close()


def test_a_failure_while_reading_output_marks_the_server_dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    # anything unforeseen while reading the server's output (here: a fault put into the answer check) ends the
    # connection with the reason, instead of a chunk silently lost and every later call waiting out its timeout
    from mcp_gym._compat import mcp_wire

    real = mcp_wire.answer_of

    def broken(obj: Any, waiting: Any) -> int | None:
        if isinstance(obj, dict) and obj.get("result", {}).get("content", [{}])[0].get("text") == "boom":
            raise RuntimeError("boom in the answer check")
        return real(obj, waiting)

    monkeypatch.setattr(mcp_wire, "answer_of", broken)
    env = MCPEnv({"s": spec(tmp_path, [ECHO])}, ["t"], call_timeout=60)
    try:
        env.reset(seed=0)
        pid = pid_of(tmp_path)
        _, _, _, truncated, info = env.step({"tool": "echo", "arguments": {"text": "boom"}})
        assert info["error"]["kind"] == "server_dead", info["error"]
        srv = info["servers"]["s"]
        assert srv["status"] == "dead" and "reading the server's output failed (RuntimeError: boom" in srv["error"]
        assert truncated
        assert_gone(pid)
        env.reset(seed=1)
        echo(env)
    finally:
        env.close()


@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_a_start_cancelled_before_its_pipes_connect_kills_the_wrapper_s_children(tmp_path: Path) -> None:
    """A server command that is a wrapper (``sh -c 'child & exec server'``) has started a child by the time the
    start is cancelled (here: in the first pipe's ``connection_made``, once the child's pid is written, so no timing
    decides it). The whole process group is killed, the child too. Before, only the wrapper got SIGKILL and the
    child ran on, orphaned."""
    from mcp import StdioServerParameters

    from mcp_gym.client._stdio import _spawn, _Stdin, _Stdout

    pidfile = tmp_path / "child.pid"
    params = StdioServerParameters(command="sh", args=["-c", f"sleep 600 & echo $! > {pidfile}; exec sleep 600"])

    def child_pid() -> int | None:
        text = pidfile.read_text() if pidfile.exists() else ""
        return int(text) if text.endswith("\n") else None

    async def start() -> bool:
        with anyio.CancelScope() as scope:
            class Cancelling(_Stdout):  # the stdout pipe's protocol: runs once the process exists
                def connection_made(self, transport: Any) -> None:
                    deadline = time.monotonic() + 30  # a bound on the wrapper starting its child, not a timing
                    while child_pid() is None and time.monotonic() < deadline:
                        time.sleep(0.01)
                    scope.cancel()
                    super().connection_made(transport)

            await _spawn(params, _Stdin(), Cancelling(lambda chunk: chunk, 1 << 16))
        return scope.cancelled_caught

    assert anyio.run(start)
    pid = child_pid()
    assert pid is not None, "the wrapper never started its child"
    try:
        deadline = time.monotonic() + 60  # a bound on hangs (SIGKILL's delivery is not instant); a left child: 600 s
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(pid), f"the wrapper's child {pid} outlived the cancelled start"
    finally:
        if alive(pid):
            os.kill(pid, 9)  # our own test's process, left by the bug
