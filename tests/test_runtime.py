"""The runtime's two modes (driven: the caller's thread runs the loop; threaded: a loop thread) on real servers.

Each test makes its own :class:`Runtime`, so the mode it checks does not depend on what other tests did to the
process-wide default runtime.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from mcp_gym import InProcess, MCPEnv, Stdio
from mcp_gym.client.runtime import Runtime
from mcp_gym.servers.counter import make_server

ECHO = {"tool": "echo", "arguments": {"text": "hi"}}


def stdio_env(rt: Runtime) -> MCPEnv:
    return MCPEnv({"c": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")}, ["t"], runtime=rt,
                  max_steps=1000)


def child_pids() -> set[int]:
    """Live (not zombie) child processes of this process."""
    out = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                out.add(int(p.name))
    return out


def test_driven_calls_run_in_the_callers_thread_and_threaded_ones_hop() -> None:
    async def where() -> int:
        await asyncio.sleep(0)
        return threading.get_ident()

    driven, threaded = Runtime(), Runtime(threaded=True)
    assert driven.call(where) == threading.get_ident() and not driven.threaded
    assert threaded.call(where) != threading.get_ident() and threaded.threaded
    assert not driven.in_loop() and not threaded.in_loop()
    driven.close()
    threaded.close()
    with pytest.raises(RuntimeError, match="closed"):
        driven.call(where)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_session_survives_the_switch_to_threaded_mode_and_close_stops_the_server() -> None:
    before = child_pids()
    rt = Runtime()
    env = stdio_env(rt)
    env.reset(seed=0)
    server = child_pids() - before
    assert len(server) == 1
    _, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 2}})
    assert info["structured_content"]["count"] == 2 and not rt.threaded

    async def from_another_loop() -> dict:  # e.g. asyncio.run in a script: the runtime needs its own thread now
        _, _, _, _, info = await env.astep({"tool": "add", "arguments": {"amount": 3}})
        return info

    info = asyncio.run(from_another_loop())
    assert rt.threaded and info["structured_content"]["count"] == 5  # the same server process and session
    _, _, _, _, info = env.step({"tool": "get_count", "arguments": {}})
    assert info["structured_content"] == {"result": 5} and child_pids() - before == server
    rt.close()
    assert not (child_pids() & server)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_closing_a_driven_runtime_stops_its_stdio_servers() -> None:
    before = child_pids()
    rt = Runtime()
    env = stdio_env(rt)
    env.reset(seed=0)
    server = child_pids() - before
    assert len(server) == 1 and not rt.threaded
    rt.close()  # without env.close(): the runtime ends the session
    assert not (child_pids() & server)


@pytest.mark.usefixtures("automatic_gc_off")  # its one SIGINT never lands in a gc callback
def test_ctrl_c_cancels_the_call_and_keeps_the_session() -> None:
    rt = Runtime()
    env = MCPEnv({"c": InProcess(make_server(diagnostics=True))}, ["t"], runtime=rt, max_steps=1000)
    env.reset(seed=0)
    progress = threading.Event()

    def interrupt() -> None:
        progress.wait(60)
        os.kill(os.getpid(), signal.SIGINT)

    orig = env.host.call_server

    async def call_server(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - signal once the slow call is running
        progress.set()
        return await orig(*args, **kwargs)

    env.host.call_server = call_server  # type: ignore[method-assign]
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        env.step({"tool": "slow", "arguments": {"seconds": 60}})
    env.host.call_server = orig  # type: ignore[method-assign]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    _, _, _, _, info = env.step(ECHO)  # the session is alive
    assert info["error"] is None and info["content"][0]["text"] == "hi"
    rt.close()


@pytest.mark.usefixtures("automatic_gc_off")  # its one SIGINT never lands in a gc callback
def test_ctrl_c_during_a_call_that_ends_anyway_still_interrupts() -> None:
    """A Ctrl-C during a sync call that ends normally all the same (code that turns the cancellation into a result,
    as a connection's owner task turns any failure into a status) raises ``KeyboardInterrupt`` once the call is done,
    instead of vanishing with the cancellation. The signal is sent to this thread from the call itself, so it is
    handled before the call ends."""
    rt = Runtime()
    main_thread = threading.main_thread().ident
    assert main_thread is not None and threading.get_ident() == main_thread and rt.mode == "driven"

    async def ends_anyway() -> str:
        signal.pthread_kill(main_thread, signal.SIGINT)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            return "cancelled, and said so as a result"
        return "done"

    try:
        with pytest.raises(KeyboardInterrupt):
            rt.call(ends_anyway)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        rt.close()


@pytest.mark.usefixtures("automatic_gc_off")  # its one SIGINT never lands in a gc callback
def test_ctrl_c_during_a_call_that_fails_as_it_is_cancelled_still_interrupts() -> None:
    """A Ctrl-C during a sync call whose clean-up fails once cancelled (a server that does not stop) raises
    ``KeyboardInterrupt`` (the error chained), not that error: the error used to replace the Ctrl-C, and a job
    ended with exit status 1 instead of 130. The signal is sent to this thread from the call itself."""
    rt = Runtime()
    main_thread = threading.main_thread().ident
    assert main_thread is not None and threading.get_ident() == main_thread and rt.mode == "driven"

    async def fails_once_cancelled() -> str:
        signal.pthread_kill(main_thread, signal.SIGINT)
        try:
            await asyncio.sleep(3600)  # cancelled by the Ctrl-C: never waited out
        except asyncio.CancelledError:
            raise RuntimeError("server s did not stop") from None
        return "done"

    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            rt.call(fails_once_cancelled)
        assert isinstance(caught.value.__cause__, RuntimeError)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        rt.close()


def held_server(holding: threading.Event, release: threading.Event) -> MCPServer:
    """An in-process server whose ``hold`` tool runs until the test sets ``release`` (bounded: 60 s)."""
    server = MCPServer("held", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def hold() -> str:
        """Wait until released."""
        holding.set()
        return "released" if await anyio.to_thread.run_sync(release.wait, 60) else "not released"

    return server


def test_threads_share_the_loop_while_one_drives() -> None:
    """A call from another thread runs on the loop while one thread drives it, before that thread's call ends: the
    driver's call (an in-process tool) ends only once the test releases it, after the other thread's stdio echo is
    done, so the order does not depend on timing (a loop that ran the echo only after the driver's call would end
    with the release's 60 s bound and the order reversed)."""
    rt = Runtime()
    holding, release = threading.Event(), threading.Event()
    env = MCPEnv({"c": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics"),
                  "h": InProcess(held_server(holding, release))}, ["t"], runtime=rt, max_steps=1000)
    env.reset(seed=0)
    order: list[str] = []
    held: list[dict] = []

    def held_call() -> None:
        held.append(env.step({"tool": "h__hold", "arguments": {}})[4])
        order.append("held")

    t = threading.Thread(target=held_call)
    t.start()
    try:
        assert holding.wait(60), "the hold tool did not start"
        assert rt._driver == t.ident and not rt.threaded  # the other thread drives the loop now, its call waiting
        _, _, _, _, info = env.step({"tool": "c__echo", "arguments": {"text": "hi"}})  # on the loop it drives
        order.append("echo")
        assert info["content"][0]["text"] == "hi"
    finally:
        release.set()
        t.join(60)
    assert not t.is_alive() and order == ["echo", "held"] and not rt.threaded
    assert held[0]["content"][0]["text"] == "released"
    env.close()
    rt.close()


def test_a_sync_call_from_a_thread_running_another_loop_works() -> None:
    """Jupyter runs an asyncio loop in the main thread; a sync env.step there must not try to run a second loop."""
    rt = Runtime()
    env = MCPEnv({"c": InProcess(make_server(diagnostics=True))}, ["t"], runtime=rt, max_steps=1000)
    env.reset(seed=0)

    async def cell() -> dict:
        _, _, _, _, info = env.step(ECHO)  # blocking call inside a running loop, as in a notebook cell
        return info

    assert asyncio.run(cell())["content"][0]["text"] == "hi" and rt.threaded
    env.close()
    rt.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_default_runtime() -> None:
    import mcp_gym

    env = mcp_gym.make_env("Counter")  # the parent's default runtime and session
    env.reset(seed=0)
    pid = os.fork()
    if pid == 0:  # the child builds its own env on a fresh runtime (as gymnasium's AsyncVectorEnv workers do)
        code = 1
        try:
            child = mcp_gym.make_env("Counter")
            _, info = child.reset(seed=1)
            code = 0 if info["servers"]["testing"]["status"] == "ready" and child.unwrapped._rt is not env._rt else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _, _, _, _, info = env.step({"tool": "get_count", "arguments": {}})  # the parent's session is untouched
    assert info["error"] is None
    env.close()


def test_call_timeout_cancels_and_the_runtime_goes_on() -> None:
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def answer() -> int:
        return 42

    for rt in (Runtime(), Runtime(threaded=True)):
        cancelled.clear()
        with pytest.raises(TimeoutError):
            rt.call(forever, timeout=0.2)
        assert rt.call(answer) == 42
        rt.close()
        assert cancelled.is_set()


def test_a_worker_thread_started_during_a_driven_call_does_not_keep_the_process_alive() -> None:
    """anyio stops its (non-daemon) worker threads when the root task ends, and finds that root task by
    ``run_until_complete``'s done callback: a driven call run any other way left the worker waiting, and the process
    hung at exit (the conformance client's elicitation scenario did)."""
    import subprocess

    code = ("import anyio\nfrom mcp_gym.client.runtime import Runtime\n"
            "rt = Runtime()\n"
            "async def work():\n    return await anyio.to_thread.run_sync(lambda: 42)\n"
            "async def beside():\n"  # a worker started by another task while a call runs
            "    done = anyio.Event()\n"
            "    async def other():\n        await anyio.to_thread.run_sync(lambda: 1)\n        done.set()\n"
            "    rt.task_group.start_soon(other)\n    await done.wait()\n    return 7\n"
            "async def plain():\n    return 1\n"
            "assert rt.call(work) == 42 and rt.call(plain) == 1 and rt.call(beside) == 7 and rt.call(plain) == 1\n"
            "assert rt.call(work) == 42\nprint('done', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]


def _wait_until(what: object, bound: float = 60.0) -> None:
    """Poll ``what()`` until true (a bound on hangs only: nothing depends on how long it takes)."""
    deadline = time.monotonic() + bound
    while not what():  # type: ignore[operator]
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def test_a_hold_keeps_the_loop_running_between_calls_then_the_runtime_is_driven_again() -> None:
    """``keep_running()`` taken in a driven call: the loop runs on a thread after the call returns (work progresses
    with no call: here a task waiting on a thread event), sync calls meanwhile hop onto it, and once the hold is
    released the thread ends and calls run in the caller's thread again, on a session that carried over."""
    rt = Runtime("hold-test")  # its own name: another runtime's loop thread (the default one's) is not its own
    env = stdio_env(rt)
    go, seen = threading.Event(), []

    async def background(release: object) -> None:
        try:
            await asyncio.to_thread(go.wait, 60)
            seen.append(threading.current_thread().name)
        finally:
            release()  # type: ignore[operator]

    async def start() -> None:
        rt.task_group.start_soon(background, rt.keep_running())

    try:
        env.reset(seed=0)
        rt.call(start)
        assert rt.mode == "threaded"
        assert env.step(ECHO)[4]["error"] is None  # a call hops onto the loop thread meanwhile
        with pytest.raises(TimeoutError):  # one that times out (cancelled) holds the thread no longer either
            rt.call(asyncio.sleep, 60, timeout=0.05)
        go.set()
        # driven once the loop thread has let go of the loop; the thread itself ends a moment later (it returns after
        # saying so): waited for, bounded, as one preempted there under load was still listed
        _wait_until(lambda: rt.mode == "driven" and not [t for t in threading.enumerate() if t.name == rt.name])
        assert seen == [rt.name]  # the task ran on the loop thread, with no sync call
        where = []

        async def here() -> None:
            where.append(threading.current_thread())

        rt.call(here)
        assert where == [threading.current_thread()]
        assert env.step(ECHO)[4]["error"] is None
    finally:
        env.close()
        rt.close()


def test_submit_during_a_hold_makes_the_runtime_threaded_for_good() -> None:
    rt = Runtime()
    release: list[object] = []

    async def hold() -> None:
        release.append(rt.keep_running())

    async def answer() -> int:
        return 7

    async def unhold() -> None:
        release[0]()  # type: ignore[operator]

    try:
        rt.call(hold)
        assert rt.mode == "threaded"
        assert rt.submit(answer()).result(timeout=60) == 7  # asks for the loop to run on its own: for good
        rt.call(unhold)
        time.sleep(0.05)  # (a thread that ended would show here; passing does not depend on it)
        assert rt.mode == "threaded"
        assert rt.submit(answer()).result(timeout=60) == 7
    finally:
        rt.close()
