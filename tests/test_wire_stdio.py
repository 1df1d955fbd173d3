"""What a stdio ``env.step`` costs the client, counted rather than timed (issue 29: close to the wire), on real servers.

Each count is the work a step does: loop iterations (one ``select`` each), timers scheduled, pydantic checks of the
result, OpenTelemetry injections, spec keys built. Beside each count, the behaviour it must not change: answers
after the notifications sent before them, timeouts at their own bounds, malformed results refused, a trace context
still sent when there is one, the stateful-server warning still given once.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import mcp_gym._compat.mcp_wire as mw
import mcp_gym._stateful as stateful
from mcp_gym import MCPEnv, Stdio

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20
ECHO = {"tool": "echo", "arguments": {"text": "hello"}}


@pytest.fixture
def env() -> Iterator[MCPEnv]:
    e = MCPEnv({"c": Stdio.python_module("mcp_gym.envs.counter.server", "--diagnostics")}, ["Move the counter."],
               max_steps=10_000, call_timeout=30.0)
    e.reset(seed=0)
    e.step(ECHO)  # warm: the lane's checks are built
    try:
        yield e
    finally:
        e.close()


def steps(env: MCPEnv, n: int = STEPS, action: dict[str, Any] = ECHO) -> None:
    for _ in range(n):
        _, _, _, _, info = env.step(action)
        assert info["error"] is None, info["error"]


def test_a_step_takes_four_loop_iterations(env: MCPEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start the step's task (it writes the request), read the pipe (the answer is taken there), finish the step,
    ``run_until_complete``'s stop callback. Before: also the subprocess protocol's deferred delivery and the reader
    task's hop (six)."""
    selector = env.runtime.loop._selector  # type: ignore[attr-defined]  # asyncio's selector: one select per iteration
    selects = [0]
    select = selector.select

    def counting(timeout: float | None = None) -> Any:
        selects[0] += 1
        return select(timeout)

    monkeypatch.setattr(selector, "select", counting)
    steps(env)
    assert selects[0] <= 4 * STEPS, f"{selects[0]} loop iterations for {STEPS} steps"


def test_notifications_sent_before_an_answer_are_seen_in_its_step(env: MCPEnv) -> None:
    for i in range(STEPS):
        _, _, _, _, info = env.step({"tool": "log", "arguments": {"message": f"note {i}"}})
        assert info["error"] is None, info["error"]
        assert [log["data"] for log in info["logs"]] == [f"note {i}"], info["logs"]


def test_request_timeouts_share_one_timer(env: MCPEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = env.runtime.loop
    timers = [0]
    call_at, call_later = loop.call_at, loop.call_later

    def counting_at(*args: Any, **kw: Any) -> Any:
        timers[0] += 1
        return call_at(*args, **kw)

    def counting_later(*args: Any, **kw: Any) -> Any:
        timers[0] += 1
        return call_later(*args, **kw)

    monkeypatch.setattr(loop, "call_at", counting_at)
    monkeypatch.setattr(loop, "call_later", counting_later)
    steps(env)
    assert timers[0] <= 1, f"{timers[0]} timers for {STEPS} steps with a 30 s bound each"


def test_concurrent_timeouts_each_at_their_own_bound(env: MCPEnv) -> None:
    host = env.host

    async def calls() -> list[Any]:
        return await asyncio.gather(host.call("slow", {"seconds": 20}, timeout=1.5),
                                    host.call("slow", {"seconds": 20}, timeout=0.5),
                                    host.call("echo", {"text": "on time"}, timeout=30.0))

    late, early, echo = env.runtime.call(calls, timeout=60)
    assert early.error["kind"] == "timeout" and "no result within 0.5 s" in early.error["message"], early.error
    assert late.error["kind"] == "timeout" and "no result within 1.5 s" in late.error["message"], late.error
    assert echo.error is None and echo.result.content[0].text == "on time"
    assert early.duration < late.duration
    steps(env, 3)  # the session goes on


# -- the negotiated version's schema, without pydantic for the plainest results ---------------------------------------
TEXT = {"type": "text", "text": "hi"}
RESULTS = [
    {"content": [TEXT]},
    {"content": []},
    {"content": [TEXT, TEXT], "isError": False},
    {"content": [TEXT], "isError": None, "structuredContent": {"result": "hi"}},
    {"content": [TEXT], "structuredContent": None, "_meta": {"k": 1}},
    {"content": [TEXT], "resultType": "complete"},
    {"content": [TEXT], "resultType": "complete", "structuredContent": [1, 2]},
    {"content": [TEXT], "resultType": "complete", "isError": True, "structuredContent": "s"},
    {"content": [TEXT], "resultType": "complete", "_meta": {"k": 1}},
    {"content": [TEXT], "resultType": 7},
    {"content": [{"type": "text", "text": 5}]},
    {"content": [{"type": "text"}]},
    {"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]},
    {"content": [{"type": "text", "text": "hi", "annotations": {"priority": 2}}]},
    {"content": [{"type": "text", "text": "hi", "annotations": {"priority": "high"}}]},
    {"content": [TEXT], "isError": "yes"},
    {"content": [TEXT], "isError": 1},
    {"content": [TEXT], "structuredContent": [1]},
    {"content": [TEXT], "_meta": "m"},
    {"content": "hi"},
    {"content": (TEXT,)},
    {"isError": False},
    {},
]


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25", "2026-07-28"])
def test_the_quick_check_only_passes_what_the_schema_passes(version: str) -> None:
    quick = mw._quick_surface("tools/call", version)
    assert quick is not None  # the plain shapes are checked without pydantic at every version
    surface = mw._surface("tools/call", version)
    passed = 0
    for raw in RESULTS:
        if quick(raw):
            passed += 1
            surface.validate_python(raw, by_name=False)  # raises if the quick check let a bad result through
    assert passed >= 3, passed
    assert mw._quick_surface("resources/read", version) is None  # other shapes: pydantic


def test_a_plain_result_is_checked_by_pydantic_once(env: MCPEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Counter's echo (text and structured content, 2026-07-28): the version's schema in Python, then the SDK's
    ``CallToolResult`` model. A result that fails the schema still fails the step (``invalid_result``)."""
    checks = [0]
    surface = mw._surface

    class Counting:
        def __init__(self, adapter: Any) -> None:
            self.adapter = adapter

        def validate_python(self, *args: Any, **kw: Any) -> Any:
            checks[0] += 1
            return self.adapter.validate_python(*args, **kw)

    monkeypatch.setattr(mw, "_surface", lambda method, version: Counting(surface(method, version)))
    steps(env)
    assert checks[0] == 0, f"{checks[0]} schema checks in pydantic for {STEPS} plain results"
    bad = mw._quick_surface("tools/call", "2026-07-28")
    assert bad is not None and not bad({"content": [{"type": "text", "text": 5}], "resultType": "complete"})
    with pytest.raises(pydantic.ValidationError):
        mw._checked(env.host.connections["c"].client.session, "tools/call",  # type: ignore[union-attr]
                    {"content": [{"type": "text", "text": 5}], "resultType": "complete"},
                    env.host.connections["c"].client.session._call_tool_adapter)  # type: ignore[union-attr]


# -- OpenTelemetry: nothing to inject, no injection; a context to carry, carried ------------------------------------
def test_trace_context_is_injected_only_when_there_is_one(env: MCPEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import baggage, context

    sent: list[dict[str, Any]] = []
    inject = mw.inject_trace_context

    def counting(meta: dict[str, Any]) -> None:
        inject(meta)
        sent.append(dict(meta))

    monkeypatch.setattr(mw, "inject_trace_context", counting)
    steps(env)
    assert sent == []  # an empty context: the default propagators would write nothing
    token = context.attach(baggage.set_baggage("run", "r1"))
    try:
        steps(env, 2)
    finally:
        context.detach(token)
    assert len(sent) == 2 and all(meta.get("baggage") == "run=r1" for meta in sent), sent


# -- the stateful-server warning: its key is made once per connection --------------------------------------------------
def test_the_stateful_server_key_is_made_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = [0]

    def counting_repr(value: Any) -> str:
        made[0] += 1
        return repr(value)

    monkeypatch.setattr(stateful, "repr", counting_repr, raising=False)
    monkeypatch.setattr(stateful, "_warned", set())
    db = MCPEnv({"db": Stdio(sys.executable, [str(ROOT / "tests" / "_sqlite_server.py"), str(tmp_path / "s.db")])},
                ["a task"], max_steps=100)
    try:
        db.reset(seed=0)
        action = {"tool": "execute", "arguments": {"sql": "CREATE TABLE IF NOT EXISTS t (x)"}}
        with pytest.warns(stateful.StatefulServerWarning, match="server 'db' has no mcp_gym_reset tool"):
            steps(db, 1, action)
        steps(db, 5, action)  # warned once: no warning, and no key built again
    finally:
        db.close()
    assert made[0] == 1, f"the key was built {made[0]} times for 6 steps"


# -- a call cancelled by Ctrl-C before its first step: no hang, the runtime goes on ------------------------------------
@pytest.mark.timeout(60)
def test_ctrl_c_before_a_call_starts_ends_it_and_the_runtime_goes_on() -> None:
    import os
    import signal

    from mcp_gym.client.runtime import Runtime

    rt = Runtime("ctrl-c")
    ran: list[int] = []

    async def call(n: int) -> int:
        ran.append(n)
        return n

    try:
        rt.loop.call_soon(os.kill, os.getpid(), signal.SIGINT)  # runs ahead of the call's first step
        with pytest.raises(KeyboardInterrupt):
            rt.call(call, 1)
        assert ran == []  # cancelled before it began, and the loop stopped anyway (no hang)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert [rt.call(call, n) for n in (2, 3)] == [2, 3]
    finally:
        rt.close()


# -- a subscription (2026-07-28: the listen stream) is acknowledged before the first step ----------------------------
def test_the_listen_stream_is_acknowledged_when_reset_returns() -> None:
    """The first step's resource update must reach the client: a step no longer gives the loop enough turns to send
    a stream's request before the step's own (which goes straight onto the pipe)."""
    spec = Stdio.python_module("mcp_gym.envs.counter.server", "--diagnostics", listen=True)
    env = MCPEnv({"c": spec}, ["Move the counter."], observe_resources=["counter://state"], call_timeout=20.0)
    try:
        for seed in range(3):
            env.reset(seed=seed)
            assert env.host.connections["c"]._listening == 1, f"episode {seed}: no acknowledged listen stream"
            _, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 2}})
            assert info["error"] is None, info["error"]
    finally:
        env.close()
