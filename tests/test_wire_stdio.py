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

import mcp.types as mt
import pydantic
import pytest

import mcp_gym._compat.mcp_wire as mw
import mcp_gym._stateful as stateful
import mcp_gym.client.runtime as runtime
from mcp_gym import MCPEnv, Stdio
from mcp_gym._compat import mcp_surface, tool_results
from mcp_gym.client.host import content_json
from mcp_gym.rewards import ConventionReward, StepContext

pytestmark = pytest.mark.xdist_group("wire_stdio")  # one worker: the `env` fixture: a stdio server, made once

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20
ECHO = {"tool": "echo", "arguments": {"text": "hello"}}


def _counter_env() -> Iterator[MCPEnv]:
    e = MCPEnv({"c": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")}, ["Move the counter."],
               max_steps=10_000, call_timeout=30.0)
    e.reset(seed=0)
    e.step(ECHO)  # warm: the lane's checks are built
    try:
        yield e
    finally:
        e.close()


@pytest.fixture(scope="module")
def env() -> Iterator[MCPEnv]:
    """One Counter stdio env shared by the tests that only step ``echo``/``log`` and count (each undoes its patches);
    a test that changes the server's tools or leaves calls running on it takes :func:`own_env`."""
    yield from _counter_env()


@pytest.fixture
def own_env() -> Iterator[MCPEnv]:
    """A Counter stdio env of the test's own."""
    yield from _counter_env()


def steps(env: MCPEnv, n: int = STEPS, action: dict[str, Any] = ECHO) -> None:
    for _ in range(n):
        _, _, _, _, info = env.step(action)
        assert info["error"] is None, info["error"]


@pytest.mark.parametrize("stop_in_task", [True, False])
def test_a_step_takes_one_loop_iteration(env: MCPEnv, monkeypatch: pytest.MonkeyPatch, stop_in_task: bool) -> None:
    """The step's loop path, not its inline one (which runs no loop iteration at all: test_step_inline.py): one
    iteration runs the step's task, which writes the request, waits for the answer in the calling thread and stops
    the loop itself (two when that stop goes through ``run_until_complete``'s callback: ``stop_in_task=False``).
    Before the driven read: three (the pipe read in its own iteration, then the task finishing), and before that six
    (the subprocess protocol's deferred delivery and the reader task's hop).

    A step whose answer comes after the synchronous read's few milliseconds (a loaded machine) takes more iterations,
    so what is counted is the fewest any of the steps took: that path must exist, not every step must take it."""
    monkeypatch.setattr(runtime, "set_running_loop", None)  # no inline steps (Runtime.call's inline condition)
    if not stop_in_task:
        monkeypatch.setattr(runtime, "until_complete_cb", None)
    per_step = 1 if stop_in_task else 2
    selector = env.runtime.loop._selector  # type: ignore[attr-defined]  # asyncio's selector: one select per iteration
    selects = [0]
    select = selector.select

    def counting(timeout: float | None = None) -> Any:
        selects[0] += 1
        return select(timeout)

    monkeypatch.setattr(selector, "select", counting)
    counts = []
    for _ in range(STEPS):
        before = selects[0]
        steps(env, 1)
        counts.append(selects[0] - before)
    assert 0 < min(counts) <= per_step, f"loop iterations per step: {counts}"


def test_a_quiet_step_does_not_await_the_change_poll(own_env: MCPEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only fast-lane answers came and nothing changed: the step looks without awaiting ``poll_changes``. A log
    notification or a tools change still gets the awaited poll, and the change is in the step that saw it."""
    env = own_env
    polls = [0]
    poll = env.host.poll_changes

    async def counting(**kw: Any) -> bool:
        polls[0] += 1
        return await poll(**kw)

    monkeypatch.setattr(env.host, "poll_changes", counting)
    steps(env)
    assert polls[0] == 0, f"{polls[0]} awaited polls in {STEPS} quiet steps"
    _, _, _, _, info = env.step({"tool": "log", "arguments": {"message": "note"}})
    assert polls[0] == 1 and [entry["data"] for entry in info["logs"]] == ["note"], info["logs"]
    _, _, _, _, info = env.step({"tool": "unlock_bonus", "arguments": {}})
    assert info["tools_changed"] and "bonus" in env.action_space.tool_names, info
    assert polls[0] == 2


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


def test_concurrent_timeouts_each_at_their_own_bound(own_env: MCPEnv) -> None:
    env = own_env
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
    quick = mcp_surface.quick_surface("tools/call", version)
    assert quick is not None  # the plain shapes are checked without pydantic at every version
    surface = mcp_surface.surface("tools/call", version)
    passed = 0
    for raw in RESULTS:
        if quick(raw):
            passed += 1
            surface.validate_python(raw, by_name=False)  # raises if the quick check let a bad result through
    assert passed >= 3, passed
    assert mcp_surface.quick_surface("resources/read", version) is None  # other shapes: pydantic


def test_a_plain_result_is_checked_by_pydantic_once(env: MCPEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Counter's echo (text and structured content, 2026-07-28): the version's schema in Python, then the SDK's
    ``CallToolResult`` model. A result that fails the schema still fails the step (``invalid_result``)."""
    checks = [0]
    surface = mcp_surface.surface

    class Counting:
        def __init__(self, adapter: Any) -> None:
            self.adapter = adapter

        def validate_python(self, *args: Any, **kw: Any) -> Any:
            checks[0] += 1
            return self.adapter.validate_python(*args, **kw)

    monkeypatch.setattr(mcp_surface, "surface", lambda method, version: Counting(surface(method, version)))
    steps(env)
    assert checks[0] == 0, f"{checks[0]} schema checks in pydantic for {STEPS} plain results"
    bad = mcp_surface.quick_surface("tools/call", "2026-07-28")
    assert bad is not None and not bad({"content": [{"type": "text", "text": 5}], "resultType": "complete"})
    with pytest.raises(pydantic.ValidationError):
        mw._checked(env.host.connections["c"].client.session, "tools/call",  # type: ignore[union-attr]
                    {"content": [{"type": "text", "text": 5}], "resultType": "complete"},
                    env.host.connections["c"].client.session._call_tool_adapter)  # type: ignore[union-attr]


ASKING = [
    {"resultType": "input_required", "requestState": "s1"},
    {"requestState": "s1"},
    {"resultType": "input_required", "inputRequests": {}},
    {"content": [TEXT], "requestState": "s1"},
    {"content": [TEXT], "request_state": "s1"},
    {"content": [TEXT], "inputRequests": {}},
]


def _outcome(check: Any) -> str:
    try:
        return repr(check())
    except Exception as exc:  # noqa: BLE001 - the outcome compared is the exception itself
        return f"{type(exc).__name__}: {exc}"


def test_a_result_that_asks_for_nothing_is_validated_as_a_call_tool_result_only(
        env: MCPEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's ``CallToolResult | InputRequiredResult`` union runs both arms (the second one's validator raises
    for every plain result): a result without that arm's keys gets the first arm's adapter alone. Same model, same
    error (the union still says why a bad one fails), and the union still decides everything that may ask."""
    session: Any = env.host.connections["c"].client.session  # type: ignore[union-attr]
    union = session._call_tool_adapter
    unions = [0]

    class Counting:
        _type = union._type

        def validate_python(self, *args: Any, **kw: Any) -> Any:
            unions[0] += 1
            return union.validate_python(*args, **kw)

    counting = Counting()
    monkeypatch.setattr(session, "_call_tool_adapter", counting)
    steps(env)
    assert unions[0] == 0, f"the union ran {unions[0]} times for {STEPS} plain results"
    for raw in RESULTS + ASKING:
        fast = _outcome(lambda: mw._checked(session, "tools/call", dict(raw), counting))  # noqa: B023
        with monkeypatch.context() as m:
            m.setattr(mw, "_not_asking", lambda adapter: None)  # the union for everything, as before
            slow = _outcome(lambda: mw._checked(session, "tools/call", dict(raw), union))  # noqa: B023
        assert fast == slow, raw
    before = unions[0]
    assert "InputRequiredResult" in _outcome(lambda: mw._checked(session, "tools/call", dict(ASKING[0]), counting))
    assert unions[0] == before + 1


BLOCKS = [
    {"content": [TEXT, {"type": "image", "data": "AA==", "mimeType": "image/png"},
                 {"type": "audio", "data": "AA==", "mimeType": "audio/wav"}]},
    {"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"},
                 {"type": "resource", "resource": {"uri": "file:///a", "text": "t"}},
                 {"type": "resource", "resource": {"uri": "file:///b", "blob": "AA=="}}],
     "structuredContent": {"a": 1}},
    {"content": [{"type": "text", "text": "hi", "annotations": {"audience": ["user"], "priority": 1}, "_meta": {"k": 1},
                  "extra": 1}], "isError": True, "_meta": {"k": "v"}},
    {"content": [{"text": "no type"}]},
    {"content": [{"type": "nope", "text": "hi"}]},
    {"content": [{"type": "image", "data": "AA=="}]},
    {"content": [TEXT, {"type": "resource", "resource": {"uri": 5}}]},
]


def test_content_blocks_told_apart_by_type_validate_as_the_union_does(env: MCPEnv,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A result's content blocks are validated by their ``type`` (the union of block models tried member by member
    cost 2.5 µs a text block): the same models, fields set and dumps, and what the union refuses is refused with the
    union's error."""
    session: Any = env.host.connections["c"].client.session  # type: ignore[union-attr]
    union = session._call_tool_adapter
    assert tool_results.CALL_BLOCKS is not None  # the SDK's content union has the shape (else the union, as before)
    for raw in RESULTS + BLOCKS:
        fast = _outcome(lambda: mw._checked(session, "tools/call", dict(raw), union))  # noqa: B023
        with monkeypatch.context() as m:
            m.setattr(tool_results, "CALL_BLOCKS", None)  # the union for the blocks, as before
            slow = _outcome(lambda: mw._checked(session, "tools/call", dict(raw), union))  # noqa: B023
            if not slow.startswith("ValidationError"):
                model = mw._checked(session, "tools/call", dict(raw), union)
        assert fast == slow, raw
        if not fast.startswith("ValidationError"):
            tagged = mw._checked(session, "tools/call", dict(raw), union)
            assert [type(b) for b in tagged.content] == [type(b) for b in model.content]
            assert tagged.model_fields_set == model.model_fields_set and tagged == model
            assert tagged.model_dump(by_alias=True) == model.model_dump(by_alias=True)


def test_info_content_is_what_the_blocks_dump_to() -> None:
    """``info["content"]`` takes plain text blocks without pydantic's serializer: the same dicts as ``model_dump``."""
    blocks = [
        mt.TextContent(type="text", text="hi"),
        mt.TextContent.model_validate({"type": "text", "text": "hi", "annotations": {"priority": 0.5}}),
        mt.TextContent.model_validate({"type": "text", "text": "hi", "_meta": {"k": 1}}),
        mt.TextContent.model_validate({"type": "text", "text": "hi", "extra": 1}),
        mt.ImageContent(type="image", data="AA==", mime_type="image/png"),
        mt.EmbeddedResource(type="resource", resource=mt.TextResourceContents(uri="file:///a", text="t")),
        mt.ResourceLink(type="resource_link", uri="file:///a", name="a"),
    ]
    assert content_json(blocks) == [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]


@pytest.mark.slow  # 16 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_the_default_reward_reads_the_same_as_through_a_step_context() -> None:
    """The default reward is computed without a ``StepContext``; a subclass is still called with one."""
    seen: list[StepContext] = []

    class Logged(ConventionReward):
        def __call__(self, ctx: StepContext) -> float:
            seen.append(ctx)
            return super().__call__(ctx)

    for fn in (ConventionReward(0.25), Logged(0.25)):
        env = MCPEnv({"c": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")}, ["Move the counter."],
                     reward_fn=fn)
        try:
            env.reset(seed=0)
            rewards = [env.step(a)[1] for a in (ECHO, {"tool": "echo", "arguments": {"text": 5}},
                                                  {"tool": "add", "arguments": {"amount": 1}})]
        finally:
            env.close()
        assert rewards[0] == 0.0 and rewards[1] == -0.25 and rewards[2] in (-0.01, 1.0), rewards
    assert [(c.tool, c.is_error) for c in seen] == [("echo", False), ("echo", True), ("add", False)]


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
    spec = Stdio.python_module("mcp_gym.servers.counter", "--diagnostics", listen=True)
    env = MCPEnv({"c": spec}, ["Move the counter."], observe_resources=["counter://state"], call_timeout=20.0)
    try:
        for seed in range(3):
            env.reset(seed=seed)
            assert env.host.connections["c"]._listening == 1, f"episode {seed}: no acknowledged listen stream"
            _, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 2}})
            assert info["error"] is None, info["error"]
    finally:
        env.close()
