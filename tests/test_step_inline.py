"""A driven stdio ``env.step`` runs inline (``Runtime.call(..., inline=True)``): its coroutine runs in the calling
thread without the event loop, and when the synchronous read takes the answer the step ends there; anything else (a
notification before the answer, a dead server, a timeout, a Ctrl-C, a second session, code that needs a task) goes
on in a task on the loop, from where the step waits, exactly as before. Real stdio subprocesses
(tests/servers/bad_server.py, the bundled Counter); no timing: the synchronous read waits as long as it takes where
a test needs the answer read inline."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import mcp_gym.client._stdio as stdio_module
import mcp_gym.client.runtime as runtime_module
from mcp_gym import MCPEnv, Stdio
from mcp_gym.client.runtime import Runtime

SERVER = str(Path(__file__).resolve().parent / "servers" / "bad_server.py")
ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def raw_server(tmp: Path, *names: str) -> Stdio:
    tools = [ECHO, *({"name": n, "inputSchema": {"type": "object"}} for n in names)]
    return Stdio(sys.executable, [SERVER, "--tools", json.dumps(tools), "--log", str(tmp / "log")])


def counter() -> Stdio:
    return Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")


@pytest.fixture
def tasks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the inline steps that went on in a task (each a ``Rest``); the synchronous read waits for good."""
    monkeypatch.setattr(stdio_module, "_READ_NOW", 60.0)  # the answer is read inline however slow the machine is
    made: list[int] = []
    rest = runtime_module.Rest

    def counted(coro: Any, yielded: Any) -> Any:
        made.append(1)
        return rest(coro, yielded)

    monkeypatch.setattr(runtime_module, "Rest", counted)
    return made


def test_an_ordinary_stdio_step_runs_without_the_event_loop(tasks: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    rt = Runtime()
    env = MCPEnv({"c": counter()}, ["t"], runtime=rt, max_steps=1000)
    try:
        env.reset(seed=0)
        loops: list[int] = []
        run_call = rt._run_call
        monkeypatch.setattr(rt, "_run_call", lambda task: loops.append(1) or run_call(task))
        for n in range(5):
            _, reward, _, _, info = env.step({"tool": "echo", "arguments": {"text": f"hi {n}"}})
            assert info["error"] is None and info["content"][0]["text"] == f"hi {n}" and info["step"] == n + 1
        assert tasks == [] and loops == []  # no task made, the loop never run
        assert rt.mode == "driven" and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        _, _, _, _, info = env.step({"tool": "nope", "arguments": {}})  # refused before any I/O: inline too
        assert info["error"]["kind"] == "unknown_tool" and tasks == [] and loops == []
    finally:
        env.close()
        rt.close()


def test_a_notification_before_the_answer_goes_on_in_the_loop(tasks: list[int], tmp_path: Path) -> None:
    rt = Runtime()
    env = MCPEnv({"s": raw_server(tmp_path, "change")}, ["t"], runtime=rt, call_timeout=30)
    try:
        env.reset(seed=0)
        log = tmp_path / "log"
        before = log.read_text().split().count("tools/list")
        _, _, _, _, info = env.step({"tool": "change", "arguments": {}})  # list_changed, then the answer
        assert info["error"] is None and info["content"][0]["text"] == "changed"
        assert tasks == [1]  # the notification came first: the reader delivers both, in order, in the loop
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})
        assert info["error"] is None and info["content"][0]["text"] == "hi"
        assert log.read_text().split().count("tools/list") == before + 1  # re-listed once, by the next step at latest
    finally:
        env.close()
        rt.close()


def test_a_server_dying_mid_step_is_reported_as_in_the_loop(tasks: list[int], tmp_path: Path) -> None:
    rt = Runtime()
    env = MCPEnv({"s": raw_server(tmp_path, "die")}, ["t"], runtime=rt, call_timeout=30)
    try:
        env.reset(seed=0)
        _, _, _, truncated, info = env.step({"tool": "die", "arguments": {}})
        assert info["error"]["kind"] == "server_dead" and "dying on purpose" in info["error"]["message"]
        assert truncated and info["termination"] == "servers_dead" and tasks == [1]
        env.reset(seed=1)  # a new server
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "back"}})
        assert info["error"] is None and info["content"][0]["text"] == "back" and tasks == [1]
    finally:
        env.close()
        rt.close()


def test_a_timed_out_step_fails_in_the_loop_and_the_next_runs_inline(tasks: list[int]) -> None:
    rt = Runtime()
    env = MCPEnv({"c": counter()}, ["t"], runtime=rt, max_steps=1000, call_timeout=60.0)
    try:
        env.reset(seed=0)  # (its reset tool call, a fresh server's first, is bounded by call_timeout too)
        env.call_timeout = 0.5  # only the 30 s call meets the short bound
        _, _, _, _, info = env.step({"tool": "slow", "arguments": {"seconds": 30}})
        assert info["error"] is not None and info["error"]["kind"] == "timeout", info["error"]
        assert tasks == [1]
        env.call_timeout = 60.0  # a bound on hangs: the steps below must succeed, however loaded the machine
        # steps run inline again: the first may still go through the loop when something of the cancelled call (the
        # cancellation's write, a late line from the server) is pending then (seen under load), not every one after
        for n in range(5):
            made = len(tasks)
            _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": f"hi {n}"}})
            assert info["error"] is None and info["content"][0]["text"] == f"hi {n}"
            if len(tasks) == made:
                break
        else:
            pytest.fail(f"none of 5 steps after the timeout ran inline ({len(tasks) - 1} went through the loop)")
    finally:
        env.close()
        rt.close()


@pytest.mark.parametrize("tool", ["echo", "slow"])
@pytest.mark.usefixtures("automatic_gc_off")  # its one SIGINT never lands in a gc callback
def test_ctrl_c_in_the_inline_part_cancels_the_step_and_keeps_the_session(tasks: list[int], tool: str) -> None:
    """A Ctrl-C while the step runs inline (raised in this thread, so it lands there): the step is cancelled where
    it waits, in a task, and raises ``KeyboardInterrupt``, whether its answer came (``echo``) or not (``slow``)."""
    rt = Runtime()
    env = MCPEnv({"c": counter()}, ["t"], runtime=rt, max_steps=1000)
    env.reset(seed=0)
    orig = env.host.call_server
    seen: list[bool] = []

    async def call_server(*args: Any, **kwargs: Any) -> Any:
        seen.append(asyncio.current_task() is None)  # inline: no task
        signal.raise_signal(signal.SIGINT)
        return await orig(*args, **kwargs)

    env.host.call_server = call_server  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            env.step({"tool": tool, "arguments": {"text": "x"} if tool == "echo" else {"seconds": 60}})
        assert seen == [True] and tasks == [1]
        env.host.call_server = orig  # type: ignore[method-assign]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})  # the session is alive
        assert info["error"] is None and info["content"][0]["text"] == "hi"  # (what the server says about the
        # cancelled call, if anything, arrives first: then this step goes on in the loop too)
    finally:
        env.close()
        rt.close()


def test_code_that_needs_a_task_gets_one(tasks: list[int]) -> None:
    """A custom reward (the user's code) runs in the step's task, as before: the step goes on in a task first."""
    rt = Runtime()
    seen: list[Any] = []

    def reward(ctx: Any) -> float:
        seen.append(asyncio.current_task())
        return 1.0

    env = MCPEnv({"c": counter()}, ["t"], runtime=rt, max_steps=1000, reward_fn=reward)
    try:
        env.reset(seed=0)
        _, r, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})
        assert info["error"] is None and r == 1.0 and seen[0] is not None and tasks == [1]
    finally:
        env.close()
        rt.close()


@pytest.mark.slow  # 14 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_no_step_runs_inline_while_another_session_is_alive(tasks: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    rt = Runtime()
    inline: list[int] = []
    drive_inline = rt._drive_inline
    monkeypatch.setattr(rt, "_drive_inline", lambda fn, args: inline.append(1) or drive_inline(fn, args))
    env = MCPEnv({"a": counter(), "b": counter()}, ["t"], runtime=rt, max_steps=1000)
    try:
        env.reset(seed=0)
        tool = next(name for name in env.host.catalogue if name.endswith("echo"))
        _, _, _, _, info = env.step({"tool": tool, "arguments": {"text": "hi"}})
        assert info["error"] is None and inline == []  # two sessions: the step runs in the loop
    finally:
        env.close()
    alone = MCPEnv({"c": counter()}, ["t"], runtime=rt, max_steps=1000)  # the other two are closed
    try:
        alone.reset(seed=0)
        _, _, _, _, info = alone.step({"tool": "echo", "arguments": {"text": "hi"}})
        assert info["error"] is None and inline == [1] and tasks == []
    finally:
        alone.close()
        rt.close()


def test_a_step_info_keeps_its_keys_their_order_and_the_summary() -> None:
    """A tool step's ``info`` is built as one dict, not through ``_info``'s keywords: the same keys in the same order
    (the ones every step has, then the tool step's), and on the last step ``summary`` and then ``success``."""
    env = MCPEnv({"c": counter()}, ["t"], max_steps=2)
    keys = ["episode_id", "task_id", "step", "error", "tools_changed", "logs", "tool", "server", "server_tool",
            "is_error", "content", "structured_content", "duration", "progress", "termination"]
    try:
        env.reset(seed=0)
        _, _, _, truncated, info = env.step({"tool": "echo", "arguments": {"text": "a"}})
        assert list(info) == keys and not truncated
        assert (info["task_id"], info["step"], info["tool"], info["server"], info["termination"]) == \
            (env.task.id, 1, "echo", "c", None)  # type: ignore[union-attr]
        _, _, _, truncated, info = env.step({"tool": "echo", "arguments": {"text": "b"}})
        assert truncated and list(info) == [*keys, "summary", "success"]
        assert info["summary"] == {"return": 0.0, "length": 2, "termination": "max_steps", "turns": 2,
                                   "tool_calls": 2}
        assert info["episode_id"] == env.episode_id and info["success"] is None
    finally:
        env.close()
