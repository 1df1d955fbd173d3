"""A Streamable HTTP server that answers with a huge body costs one call, not the process: the body is bounded by
``Http(max_message_bytes=)`` (decoded bytes of a JSON answer, or of one SSE event) and by the caller's wait
(``call_timeout``: the body still arriving is dropped with its connection), and the session goes on.

The server is ``tests/servers/bad_http_server.py``, a raw ASGI app under uvicorn in its own process, streaming 1,000 MB
as fast as the client reads or slowly; it logs how much it sent and whether the client hung up. Memory is this
process's resident set, sampled while the step runs (generous bound: the body is 1,000 MB, the bound 300 MB).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, start_server, stop_process

from mcp_gym import MCPEnv
from mcp_gym.client.specs import Http

HUGE_MB = 1000
RSS_BOUND_MB = 300
HANG_BOUND = 60.0  # seconds: generous bounds on hangs only


@dataclass
class Server:
    url: str
    log: Path

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    log = tmp_path / "huge.log"
    proc, port = start_server([sys.executable, str(ROOT / "tests" / "servers" / "bad_http_server.py"), "--port", "0",
                               "--log", str(log)])
    try:
        yield Server(f"http://127.0.0.1:{port}/mcp", log)
    finally:
        stop_process(proc)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def step_measured(env: MCPEnv, action: dict[str, Any]) -> tuple[dict[str, Any], float, float]:
    """``(info, seconds, peak growth of the resident set in MB)`` of one step."""
    base, peak, done = rss_mb(), [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], rss_mb() - base)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    try:
        _, _, _, _, info = env.step(action)
    finally:
        seconds = time.monotonic() - t0
        done.set()
        sampler.join()
    return info, seconds, max(peak[0], rss_mb() - base)


def echo_works(env: MCPEnv) -> None:
    _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "still here"}})
    assert info["error"] is None, info["error"]
    assert env.host.connections["bad"].status == "ready"


@pytest.mark.parametrize("how", [{}, {"length": True}, {"sse": True}], ids=["json", "content-length", "sse"])
def test_a_huge_fast_body_is_cut_at_max_message_bytes(server: Server, how: dict[str, Any]) -> None:
    """1,000 MB as fast as the client reads (it was read whole: a 19.6 s step with ``call_timeout=5`` and +1.4 GB):
    the step fails ``too_large`` naming the tool, the server and the bound, the client hung up long before the end,
    memory stays far below the body, and the same session answers the next step."""
    env = MCPEnv({"bad": Http(server.url)}, ["Huge."], call_timeout=HANG_BOUND)
    try:
        env.reset(seed=0)
        conn = env.host.connections["bad"]
        info, seconds, grown = step_measured(env, {"tool": "huge", "arguments": {"mb": HUGE_MB, **how}})
        err = info["error"]
        assert err is not None and err["kind"] == "too_large", err
        assert (err["tool"], err["server"]) == ("huge", "bad")
        assert "tool 'huge' on server 'bad'" in err["message"] and "max_message_bytes=33,554,432" in err["message"]
        assert seconds < HANG_BOUND and grown < RSS_BOUND_MB, (seconds, grown)
        echo_works(env)
        assert env.host.connections["bad"] is conn
        deadline = time.monotonic() + HANG_BOUND
        while not server.lines() and time.monotonic() < deadline:
            time.sleep(0.1)
        sent, how_it_ended = server.lines()[0].split()[1:]
        assert how_it_ended == "disconnected" and int(sent) < HUGE_MB * 1_000_000 // 4, server.lines()
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", [{}, {"sse": True}], ids=["json", "sse"])
def test_a_huge_slow_body_fails_at_call_timeout_and_is_dropped(server: Server, how: dict[str, Any]) -> None:
    """1,000 MB at 2 MB/s: the step fails ``timeout`` at ``call_timeout``; the body still arriving is dropped (the
    client hangs up at the next steps instead of reading on for 500 s), and the session answers the next step."""
    env = MCPEnv({"bad": Http(server.url)}, ["Huge."], call_timeout=HANG_BOUND)
    try:
        env.reset(seed=0)
        env.call_timeout = 3.0  # only the 500 s body meets the short bound (the reset and the echoes keep 60 s)
        try:
            info, seconds, grown = step_measured(env, {"tool": "huge", "arguments": {"mb": HUGE_MB, "rate": 2, **how}})
        finally:
            env.call_timeout = HANG_BOUND
        err = info["error"]
        assert err is not None and err["kind"] == "timeout" and (err["tool"], err["server"]) == ("huge", "bad"), err
        assert "no result within 3 s" in err["message"]
        assert seconds < HANG_BOUND and grown < RSS_BOUND_MB, (seconds, grown)
        deadline = time.monotonic() + HANG_BOUND
        while not server.lines() and time.monotonic() < deadline:
            echo_works(env)  # the runtime's loop runs while the env is used: the dropped read ends there
            time.sleep(0.1)
        sent, how_it_ended = server.lines()[0].split()[1:]
        assert how_it_ended == "disconnected" and int(sent) < HUGE_MB * 1_000_000 // 4, server.lines()
    finally:
        env.close()


def test_a_streamed_result_over_one_mib_is_read(server: Server) -> None:
    """A 2 MB result as one SSE event (an SDK server's default answer format): the SDK's own 1 MiB bound per event
    ended the whole session (``server_dead``); under ``max_message_bytes`` it is an ordinary result."""
    env = MCPEnv({"bad": Http(server.url)}, ["Huge."], call_timeout=HANG_BOUND)
    try:
        env.reset(seed=0)
        obs, _, _, _, info = env.step({"tool": "huge", "arguments": {"mb": 2, "sse": True}})
        assert info["error"] is None, info["error"]
        assert obs["result"].startswith("x" * 10_000)  # (observations are shortened)
        echo_works(env)
    finally:
        env.close()


def test_a_smaller_bound_is_the_spec_s_and_it_is_checked(server: Server) -> None:
    env = MCPEnv({"bad": Http(server.url, max_message_bytes=100_000)}, ["Huge."], call_timeout=HANG_BOUND)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step({"tool": "huge", "arguments": {"mb": 0.2}})
        assert info["error"]["kind"] == "too_large" and "max_message_bytes=100,000" in info["error"]["message"]
        _, _, _, _, info = env.step({"tool": "huge", "arguments": {"mb": 0.05}})
        assert info["error"] is None, info["error"]
    finally:
        env.close()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_message_bytes"):
            Http(server.url, max_message_bytes=bad)  # type: ignore[arg-type]
