"""A stdio ``env.step`` never asks asyncio for the current task without naming its loop: on Python < 3.12
``asyncio.current_task()`` finds the running loop through a holder that checks the process id, a ``getpid`` system
call per ask (about 1 µs); the step names its loop (``current_task(loop)``). Traced call by call on a real stdio
server (the bundled Counter)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import mcp_gym
import mcp_gym.client.runtime as runtime
from mcp_gym import MCPEnv, Stdio
from mcp_gym.client.runtime import Runtime

PACKAGE = str(Path(mcp_gym.__file__).parent)


@pytest.mark.skipif(getattr(asyncio.current_task, "__code__", None) is None,
                    reason="asyncio.current_task is the C one here (Python 3.12+ asks no getpid)")
@pytest.mark.parametrize("inline", [False, True])
def test_a_stdio_step_names_its_loop_when_it_asks_for_the_current_task(monkeypatch: pytest.MonkeyPatch,
                                                                        inline: bool) -> None:
    """A step on the loop asks and names its loop; an inline step (the default: its answer read in the calling
    thread, no task) asks none, or names the loop when its answer came late and the step went on in a task."""
    if not inline:
        monkeypatch.setattr(runtime, "set_running_loop", None)  # no inline steps (Runtime.call's inline condition)
    rt = Runtime()
    env = MCPEnv({"c": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")}, ["t"], runtime=rt,
                 max_steps=1000)
    code = asyncio.current_task.__code__
    asks: list[tuple[str, bool]] = []  # (caller, named its loop)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            caller = frame.f_back
            if caller is not None and caller.f_code.co_filename.startswith(PACKAGE):
                asks.append((f"{caller.f_code.co_filename}:{caller.f_lineno}", frame.f_locals.get("loop") is not None))

    try:
        env.reset(seed=0)
        env.step({"tool": "echo", "arguments": {"text": "warm"}})
        sys.setprofile(profile)
        try:
            for n in range(3):
                _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": f"hi {n}"}})
                assert info["error"] is None
        finally:
            sys.setprofile(None)
    finally:
        env.close()
        rt.close()
    assert asks or inline, "the step asked for no current task: the trace saw nothing"
    assert all(named for _, named in asks), [where for where, named in asks if not named]
