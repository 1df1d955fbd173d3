"""Tool results that are not ``isError`` but cannot be read as one value, from a real hostile in-process MCPServer:
no content and no ``structuredContent``, ``structuredContent`` that disagrees with the text the model is shown, a
JSON-RPC error. The ``mcp`` grader, the state snapshot verifiers read, and the recording client each give a clear
error naming the tool and the server (a failed grade with reward 0, a failed recorded step), never a silent pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest
from mcp import Client, MCPError
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcp_gym import InProcess, MCPEnv
from mcp_gym.client.runtime import default_runtime
from mcp_gym.protocol import HIDDEN_META_KEY, STATE_TOOL, result_problem
from mcp_gym.recording import RecordingClient, load


def text(*texts: str) -> list[mt.ContentBlock]:
    return [mt.TextContent(type="text", text=t) for t in texts]


RESULTS: dict[str, Any] = {
    "good": mt.CallToolResult(content=text('{"total": 5, "reward": 1.0}'), structured_content={"total": 5,
                                                                                              "reward": 1.0}),
    "mismatch": mt.CallToolResult(content=text('{"total": 3, "reward": 0.0}'), structured_content={"total": 5,
                                                                                                  "reward": 1.0}),
    "empty": mt.CallToolResult(content=[]),
    "state_ok": mt.CallToolResult(content=text('{"errors": []}')),
    "state_not_json": mt.CallToolResult(content=text("all fine")),
}


def hostile_server(state: str = "state_ok") -> MCPServer:
    """Tools answering the results above (``rpc``: a JSON-RPC error, ``fail``: ``isError``); its hidden state tool
    answers ``state``'s result (or a JSON-RPC error, or ``isError``)."""
    mcp = MCPServer("hostile", log_level="WARNING")

    def answer(name: str) -> Any:
        async def tool() -> mt.CallToolResult:
            return RESULTS[name]

        return tool

    for name in ("good", "mismatch", "empty"):
        mcp.add_tool(answer(name), name=name, description=f"Answers {name}.")

    @mcp.tool()
    async def rpc() -> str:
        """A JSON-RPC error."""
        raise MCPError(code=-32603, message="internal trouble")

    async def mcp_gym_state() -> mt.CallToolResult:
        if state == "rpc":
            raise MCPError(code=-32603, message="state unavailable")
        if state == "fail":
            raise ToolError("state broken")
        return RESULTS[state]

    mcp.add_tool(mcp_gym_state, name=STATE_TOOL, meta={HIDDEN_META_KEY: True})
    return mcp


def test_the_rule() -> None:
    assert result_problem(RESULTS["good"]) is None and result_problem(RESULTS["state_ok"]) is None
    assert "disagrees with its text content" in (result_problem(RESULTS["mismatch"]) or "")
    assert result_problem(RESULTS["empty"]) == "returned neither content nor structuredContent"
    # the MCP SDK's own forms agree: a wrapped value shown as itself, a list as one block per item, a rendering
    assert result_problem(mt.CallToolResult(content=text("5"), structured_content={"result": "5"})) is None
    assert result_problem(mt.CallToolResult(content=text("1"), structured_content={"result": [1]})) is None
    assert result_problem(mt.CallToolResult(content=text("a", "b"), structured_content={"result": ["a", "b"]})) is None
    assert result_problem(mt.CallToolResult(content=text("Total: 5"), structured_content={"total": 5})) is None
    assert result_problem(mt.CallToolResult(content=text("a", "c"), structured_content={"result": ["a", "b"]}))
    assert result_problem(mt.CallToolResult(content=text("hello"), structured_content={"result": "bye"}))


def grade(tool: str, expect: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """One episode graded by an ``mcp`` grader's final call of ``tool``: ``(reward, info)`` of the submit."""
    task = {"id": "t", "prompt": "Do it.", "grader": {"kind": "mcp", "tool": tool, "server": "h", **expect}}
    env = MCPEnv({"h": InProcess(hostile_server())}, [task], call_timeout=20.0)
    try:
        env.reset(seed=0, options={"task_id": "t"})
        _, reward, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "done"}})
        assert terminated
        return float(reward), info
    finally:
        env.close()


@pytest.mark.parametrize(("tool", "expect", "why"), [
    ("mismatch", {"equals": {"total": 5, "reward": 1.0}}, "returned structuredContent that disagrees with its text"),
    ("empty", {"equals": ""}, "returned neither content nor structuredContent"),
    ("rpc", {"contains": "x"}, "failed"),
])
def test_the_mcp_grader_refuses_a_result_it_cannot_read(tool: str, expect: dict[str, Any], why: str) -> None:
    reward, info = grade("good", {"equals": {"total": 5, "reward": 1.0}})  # the control: a result that agrees
    assert reward == 1.0 and info["success"] is True and info["error"] is None
    reward, info = grade(tool, expect)  # (before: the structure, or "", passed the check)
    assert reward == 0.0 and info["success"] is None and info["grade"] is None
    assert info["error"]["kind"] == "verifier_error"
    assert f"final call {tool} on server 'h' {why}" in info["error"]["message"], info["error"]
    assert tool != "rpc" or "internal trouble" in info["error"]["message"]


@pytest.mark.parametrize(("state", "why"), [
    ("empty", "returned neither content nor structuredContent"),
    ("state_not_json", "returned no JSON: 'all fine'"),
    ("rpc", "failed: tool 'mcp_gym_state' on server 'h': state unavailable"),
    ("fail", "returned an error: Error executing tool mcp_gym_state: state broken"),
])
def test_a_state_the_server_did_not_give_is_no_pass(state: str, why: str) -> None:
    """A verifier that passes when the state lists no errors: graded on an unreadable state (before: ``{}``, a
    pass), it fails naming the server and the state tool."""
    def make(state: str) -> MCPEnv:
        return MCPEnv({"h": InProcess(hostile_server(state))}, [{"id": "t", "prompt": "Do it.", "answer": "x"}],
                      verifier=lambda task, answer, s: float(not s.get("errors")), call_timeout=20.0)

    for which, passed in (("state_ok", True), (state, False)):
        env = make(which)
        try:
            env.reset(seed=0, options={"task_id": "t"})
            _, reward, _, _, info = env.step({"tool": "submit", "arguments": {"answer": "x"}})
        finally:
            env.close()
        assert (reward == 1.0) is passed and (info["error"] is None) is passed, info
    assert info["error"]["kind"] == "verifier_error"
    assert f"state call {STATE_TOOL} on server 'h' {why}" in info["error"]["message"], info["error"]


def test_the_recording_client_records_them_as_failed_steps(tmp_path: Path) -> None:
    async def go() -> None:
        async with RecordingClient(Client(hostile_server()), tmp_path / "run", server="h", policy="agent") as client:
            await client.start_episode(task_id="t", prompt="Do it.")
            for name in ("good", "mismatch", "empty"):
                await client.call_tool(name, {})  # the caller gets the result as the server sent it
            with pytest.raises(MCPError, match="internal trouble"):
                await client.call_tool("rpc", {})
            client.end_episode()

    default_runtime().call(go)
    steps = sorted(load(tmp_path / "run").steps.to_list(), key=lambda s: s["step_index"])
    assert [s["tool"] for s in steps] == ["good", "mismatch", "empty", "rpc"]
    good, mismatch, empty, rpc = steps
    assert good["is_error"] is False and good["error"] is None and good["reward"] == 1.0
    for step, why in ((mismatch, "disagrees with its text content"), (empty, "neither content nor structuredContent")):
        error = json.loads(step["error"])
        assert step["is_error"] is True and step["reward"] is None  # (before: mismatch recorded reward 1.0, no error)
        assert (error["kind"], error["tool"], error["server"]) == ("invalid_result", step["tool"], "h")
        assert f"tool {step['tool']} on server 'h' " in error["message"] and why in error["message"]
    assert rpc["is_error"] is True and json.loads(rpc["error"])["kind"] == "jsonrpc"


def test_a_step_takes_no_reward_from_a_structure_its_text_contradicts() -> None:
    """The model is shown the text (``"reward": 0.0``); the reward convention reads ``structuredContent`` (``1.0``).
    A step whose two disagree is an ``invalid_result`` error with no reward (it was rewarded 1.0 before); an agreeing
    result keeps its reward."""
    env = MCPEnv({"h": InProcess(hostile_server())}, ["t"])
    try:
        env.reset(seed=0)
        obs, reward, terminated, _, info = env.step({"tool": "good", "arguments": {}})
        assert (reward, info["error"]) == (1.0, None)
        obs, reward, terminated, _, info = env.step({"tool": "mismatch", "arguments": {}})
        assert reward == 0.0 and info["is_error"] is True and not terminated
        assert info["error"]["kind"] == "invalid_result" and info["error"]["tool"] == "mismatch", info["error"]
        assert "server 'h'" in info["error"]["message"] and "disagrees with its text" in info["error"]["message"]
        assert '"reward": 0.0' in obs["result"]  # what the model was shown
    finally:
        env.close()
