"""A synchronous stdio step reads its answer in the calling thread (``_Link.read_now``: the runtime driven by the
step, nothing else waiting for the loop), and nothing else changes: what the server writes after the answer reaches
the session, Ctrl-C and timeouts behave as in the event loop. Real stdio subprocesses (tests/servers/bad_server.py,
the bundled Counter)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import mcp_gym.client._stdio as stdio_module
from mcp_gym import MCPEnv, Stdio
from mcp_gym.client.runtime import Runtime

SERVER = str(Path(__file__).resolve().parent / "servers" / "bad_server.py")
ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def raw_server(tmp: Path, *names: str) -> Stdio:
    tools = [ECHO, *({"name": n, "inputSchema": {"type": "object"}} for n in names)]
    return Stdio(sys.executable, [SERVER, "--tools", json.dumps(tools), "--log", str(tmp / "log")])


def counter(rt: Runtime, **kw: Any) -> MCPEnv:
    return MCPEnv({"c": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")}, ["t"], runtime=rt,
                  max_steps=1000, **kw)


def test_a_driven_step_takes_its_answer_in_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio_module, "_READ_NOW", 60.0)  # wait for the answer however slow the machine is
    rt = Runtime()
    env = counter(rt)
    try:
        env.reset(seed=0)
        wire = env.host.connections["c"]._stdio.wire  # type: ignore[union-attr]
        taken: list[bool] = []
        read_now = wire.read_now
        assert read_now is not None

        def spy(timeout: float | None) -> bool:
            ok = read_now(timeout)
            taken.append(len(wire.waiting) == 1 and all(f.done() for f in wire.waiting.values()))
            return ok

        wire.read_now = spy
        for n in range(5):
            _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": f"hi {n}"}})
            assert info["error"] is None and info["content"][0]["text"] == f"hi {n}"
        assert taken == [True] * 5  # each answer was read before the step let the loop run
        assert rt.mode == "driven"
    finally:
        env.close()
        rt.close()


def test_a_list_changed_written_with_the_answer_reaches_the_session(tmp_path: Path) -> None:
    rt = Runtime()
    env = MCPEnv({"s": raw_server(tmp_path, "change_after")}, ["t"], runtime=rt, call_timeout=30)
    try:
        env.reset(seed=0)
        log = tmp_path / "log"
        for n in range(3):
            before = log.read_text().split().count("tools/list")
            _, _, _, _, info = env.step({"tool": "change_after", "arguments": {}})
            assert info["error"] is None and info["content"][0]["text"] == "changed after"
            _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})
            assert info["error"] is None and info["content"][0]["text"] == "hi"
            # the notification after the answer is not lost: the tools are re-listed once, by the next step at latest
            assert log.read_text().split().count("tools/list") == before + 1, f"round {n}"
    finally:
        env.close()
        rt.close()


@pytest.mark.usefixtures("automatic_gc_off")  # its one SIGINT never lands in a gc callback
def test_ctrl_c_during_a_stdio_step_cancels_it_and_keeps_the_session() -> None:
    rt = Runtime()
    env = counter(rt)
    env.reset(seed=0)
    calling = threading.Event()
    orig = env.host.call_server

    async def call_server(*args: Any, **kwargs: Any) -> Any:
        calling.set()
        return await orig(*args, **kwargs)

    def interrupt() -> None:
        calling.wait(60)
        os.kill(os.getpid(), signal.SIGINT)

    env.host.call_server = call_server  # type: ignore[method-assign]
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            env.step({"tool": "slow", "arguments": {"seconds": 60}})
        env.host.call_server = orig  # type: ignore[method-assign]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})  # the session is alive
        assert info["error"] is None and info["content"][0]["text"] == "hi"
    finally:
        env.close()
        rt.close()


def test_a_stdio_step_past_its_timeout_fails_and_the_session_goes_on() -> None:
    rt = Runtime()
    env = counter(rt, call_timeout=60.0)
    try:
        env.reset(seed=0)  # (its reset tool call, a fresh server's first, is bounded by call_timeout too)
        env.call_timeout = 0.5  # only the 30 s call meets the short bound
        _, _, _, _, info = env.step({"tool": "slow", "arguments": {"seconds": 30}})
        assert info["error"] is not None and info["error"]["kind"] == "timeout", info["error"]
        env.call_timeout = 60.0  # a bound on hangs: the next step must succeed, however loaded the machine
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})
        assert info["error"] is None and info["content"][0]["text"] == "hi"
    finally:
        env.close()
        rt.close()
