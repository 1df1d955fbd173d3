"""The runtime's hosted mode (``await Runtime.hosted()``: the runtime on the caller's running event loop) on real
servers: the sessions' owner tasks run on the caller's loop, ``await env.astep`` makes no thread hop and no loop thread
is started; sync calls from that loop are refused, from other threads they work; the runtime ends with its loop."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from test_runtime import child_pids, stdio_env

import mcp_gym.client.runtime as runtime_module
from mcp_gym import InProcess, MCPEnv, make_env
from mcp_gym.client.runtime import Runtime, default_runtime

ECHO = {"tool": "echo", "arguments": {"text": "hi"}}


def where_server() -> MCPServer:
    """A server whose ``where`` tool tells the thread and event loop it runs on (in process: the session's)."""
    mcp = MCPServer("where", log_level="WARNING")

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def where() -> dict[str, int]:
        """The thread id and the running loop's id."""
        return {"thread": threading.get_ident(), "loop": id(asyncio.get_running_loop())}

    return mcp


class Hops:
    """Counts the calls scheduled onto another thread's loop (``asyncio.run_coroutine_threadsafe``, how the runtime
    hops) while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = asyncio.run_coroutine_threadsafe

        def counted(coro: Any, loop: asyncio.AbstractEventLoop) -> Any:
            self.count += 1
            return real(coro, loop)

        monkeypatch.setattr(runtime_module.asyncio, "run_coroutine_threadsafe", counted)


def loop_threads(rt: Runtime) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == rt.name]


def test_in_process_sessions_run_on_the_callers_loop_with_no_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    hops = Hops(monkeypatch)

    async def main() -> None:
        rt = await Runtime.hosted("hosted-test")
        assert rt is await Runtime.hosted() and rt.mode == "hosted" and rt.in_loop() and not rt.threaded
        env = MCPEnv({"w": InProcess(where_server())}, ["t"], runtime=rt, max_steps=100)
        await env.areset(seed=0)
        owners = [t for t in asyncio.all_tasks() if t.get_name() == "mcp-gym:w"]
        assert len(owners) == 1  # the session's owner task is a task of this loop
        for _ in range(3):
            _, _, _, _, info = await env.astep({"tool": "where", "arguments": {}})
            assert info["structured_content"] == {"thread": threading.get_ident(),
                                                  "loop": id(asyncio.get_running_loop())}
        assert not loop_threads(rt) and hops.count == 0  # no loop thread, no call scheduled across threads
        await env.aclose()
        await rt.aclose()
        assert rt.closed and owners[0].done()
        assert await Runtime.hosted() is not rt  # a closed one is replaced
        await (await Runtime.hosted()).aclose()

    asyncio.run(main())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stdio_session_is_owned_on_the_callers_loop_and_ends_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    hops = Hops(monkeypatch)
    before = child_pids()
    seen: dict[str, Any] = {}

    async def main() -> None:
        rt = await Runtime.hosted("hosted-stdio-test")  # its own name: no other runtime's loop thread is its own
        env = stdio_env(rt)
        await env.areset(seed=0)
        seen["server"] = child_pids() - before
        assert len(seen["server"]) == 1
        owner, = [t for t in asyncio.all_tasks() if t.get_name() == "mcp-gym:c"]
        for amount in (2, 3):
            _, _, _, _, info = await env.astep({"tool": "add", "arguments": {"amount": amount}})
        assert info["structured_content"]["count"] == 5 and not owner.done()
        assert not loop_threads(rt) and hops.count == 0
        seen["rt"] = rt  # not closed: asyncio.run's end cancels the loop's tasks, the owner task closes its session

    asyncio.run(main())
    assert seen["rt"].closed and not (child_pids() & seen["server"])


def test_sync_calls_are_refused_on_the_hosting_loop_and_work_from_other_threads() -> None:
    async def main() -> None:
        rt = await Runtime.hosted()
        env = MCPEnv({"w": InProcess(where_server())}, ["t"], runtime=rt, max_steps=100)
        with pytest.raises(RuntimeError, match=r"sync method was called on the runtime's own event loop \(a hosted "
                                               r"runtime.*await the a\* method"):
            env.reset(seed=0)
        # A worker thread's sync calls run on the hosting loop (the connection, made there, too).
        await asyncio.to_thread(env.reset, seed=0)
        _, _, _, _, info = await asyncio.to_thread(env.step, {"tool": "where", "arguments": {}})
        assert info["structured_content"]["thread"] == threading.get_ident()

        def other_loop() -> dict[str, Any]:  # async code on another thread's loop: scheduled onto the hosting loop
            return asyncio.run(env.astep({"tool": "where", "arguments": {}}))[4]

        info = await asyncio.to_thread(other_loop)
        assert info["structured_content"]["thread"] == threading.get_ident()
        with pytest.raises(RuntimeError, match=r"Runtime.close\(\) called from its own event loop; await"):
            rt.close()
        await env.aclose()
        await asyncio.to_thread(rt.close)  # closing from another thread ends the sessions on the loop
        assert rt.closed

    asyncio.run(main())


def test_a_hosted_runtime_whose_loop_is_not_running_refuses_calls_at_once() -> None:
    loop = asyncio.new_event_loop()
    try:
        rt = loop.run_until_complete(Runtime.hosted())
        with pytest.raises(RuntimeError, match="the event loop hosting runtime 'mcp-gym-runtime' is not running"):
            MCPEnv({"w": InProcess(where_server())}, ["t"], runtime=rt)  # a sync construction connects: no loop
        loop.run_until_complete(rt.aclose())
        assert rt.closed
    finally:
        loop.close()


def test_as_default_gives_factories_the_hosted_runtime_and_each_loop_its_own() -> None:
    runtimes: list[Runtime] = []

    async def main() -> None:
        rt = await Runtime.hosted()
        with rt.as_default():
            assert default_runtime() is rt
            env = make_env("Counter")  # a factory that does not pass runtime=
        assert env.runtime is rt and default_runtime() is not rt
        await env.areset(seed=0)
        _, _, _, _, info = await env.astep({"tool": "add", "arguments": {"amount": 1}})
        assert info["error"] is None
        await env.aclose()
        runtimes.append(rt)

    asyncio.run(main())
    asyncio.run(main())
    assert runtimes[0] is not runtimes[1] and all(rt.closed for rt in runtimes)  # one per loop, ended with it


def test_a_call_from_another_thread_is_bounded_by_its_timeout_and_the_runtime_goes_on() -> None:
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def answer() -> int:
        return 42

    async def main() -> None:
        rt = await Runtime.hosted()
        with pytest.raises(TimeoutError, match="no result within 0.2 s"):
            await asyncio.to_thread(rt.call, forever, timeout=0.2)
        assert await asyncio.to_thread(rt.call, answer) == 42 and await rt.acall(answer) == 42
        await asyncio.sleep(0)  # the cancellation reaches the task on this loop
        assert cancelled.is_set()
        await rt.aclose()

    asyncio.run(main())


def test_loops_in_several_threads_each_get_their_own_runtime() -> None:
    got: dict[int, tuple[Runtime, bool]] = {}

    async def one(k: int) -> None:
        rt = await Runtime.hosted()
        env = MCPEnv({"w": InProcess(where_server())}, ["t"], runtime=rt, max_steps=100)
        await env.areset(seed=0)
        _, _, _, _, info = await env.astep({"tool": "where", "arguments": {}})
        got[k] = rt, info["structured_content"]["thread"] == threading.get_ident()
        await env.aclose()

    threads = [threading.Thread(target=asyncio.run, args=(one(k),)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len({id(rt) for rt, _ in got.values()}) == 4 and all(rt.closed for rt, _ in got.values())
    assert all(here for _, here in got.values())  # each env's calls ran in its own loop's thread
