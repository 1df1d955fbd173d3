"""Closing a stdio server while it is still in its handshake (``ServerConnection.close`` cancels the handshake, as a
Ctrl-C or a dropped spare server does) leaves nothing behind on the event loop: a server started next on the same loop
connects. Real stdio subprocesses (the bundled Counter); the close is made to land at one exact point of the start,
without timing: while the transport connects the server's stdin pipe, its stdout pipe already watched by the loop.
Nor any process: a close landing inside the process start, or while a process started ahead is taken over, kills
the whole process group (a wrapper's child too: a shell running ``tests/servers/pid_server.py``)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import test_spare_servers

from mcp_gym import Stdio
from mcp_gym.client import _npx
from mcp_gym.client.connection import ServerConnection

setup = test_spare_servers.setup  # folders pids, tmp and fixtures a, b, c


@pytest.fixture(autouse=True)
def _fresh_resolutions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing learned about npx by an earlier test in this process."""
    monkeypatch.setattr(_npx, "resolutions", {})
    monkeypatch.setattr(_npx, "_said", set())


def _selector_fds(loop: asyncio.AbstractEventLoop) -> list[int]:
    """The descriptors the loop's selector watches (a selector event loop's)."""
    selector = getattr(loop, "_selector", None)
    return [] if selector is None else [key.fd for key in selector.get_map().values()]


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


async def close_while_its_pipes_connect(conn: ServerConnection, tg: Any) -> None:
    """Start ``conn`` and close it while the stdio transport connects the server's stdin pipe (its stdout pipe then
    watched by the loop): the close runs before that connect completes, as the loop runs its callbacks in order."""
    loop = asyncio.get_running_loop()
    real = loop.connect_write_pipe
    connecting = anyio.Event()

    async def connect_write_pipe(*args: Any) -> Any:
        loop.connect_write_pipe = real  # type: ignore[method-assign]  # once
        connecting.set()
        return await real(*args)

    loop.connect_write_pipe = connect_write_pipe  # type: ignore[method-assign]
    tg.start_soon(conn.start, tg)
    await connecting.wait()
    await conn.close()


def test_a_server_closed_while_its_pipes_connect_leaves_the_loop_reading_the_next_one() -> None:
    """The first server is closed at the moment its stdin pipe is being connected (its stdout pipe is then watched by
    the loop). No descriptor the loop watches is left closed, and the next server started on the loop, which gets
    the freed descriptor numbers, connects and answers. (The cancelled start used to close its stdout pipe under the
    loop's watch: the selector kept the closed number, the next pipe given it was never watched, and that server's
    handshake hung until connect_timeout: 'could not connect within 30 s'.)"""
    spec = Stdio.python_module("mcp_gym.servers.counter", connect_timeout=60)
    first, second = ServerConnection("first", spec), ServerConnection("second", spec)
    seen: dict[str, Any] = {}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as tg:
            await close_while_its_pipes_connect(first, tg)
            seen["first"] = first.status, first.error
            seen["left closed"] = [fd for fd in _selector_fds(loop) if _closed(fd)]
            await second.start(tg)
            seen["second"] = second.status, second.error
            if second.status == "ready":
                seen["tools"] = [t.name for t in await second.list_tools()]
            await second.close()

    anyio.run(main)
    assert seen["first"][0] == "failed" and "closed while connecting" in (seen["first"][1] or ""), seen
    assert seen["left closed"] == [], seen
    assert seen["second"] == ("ready", None), seen
    assert seen["tools"], seen


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_a_server_run_directly_for_npx_closed_in_its_handshake_keeps_running_directly(
        setup: dict[str, Path], tmp_path: Path) -> None:
    """A server npx ran is started directly from its second start (``resolve_npx``). Such a start closed while still
    in its handshake (a spare server dropped, a Ctrl-C) proves nothing against that: the next start still runs the
    server directly, not through npx again (a start that fails by itself does forget it)."""
    from test_npx_resolve import package, server

    spec = Stdio("npx", ["-y", str(package(tmp_path, server('"$@"', ""))), str(setup["a"]), str(setup["pids"])],
                 connect_timeout=120)
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            learning = ServerConnection("s", spec)
            await learning.start(tg)  # the first start: through npx, whose server it learns
            await learning.close()
            seen["learned"] = learning.status, _npx.start_for("s", spec) is not None and \
                _npx.start_for("s", spec).resolved is not None  # type: ignore[union-attr]
            closed = ServerConnection("s", spec)
            await close_while_its_pipes_connect(closed, tg)
            seen["closed"] = closed.status
            direct = ServerConnection("s", spec)
            await direct.start(tg)
            seen["direct"] = direct.status, direct.pid
            await direct.close()

    anyio.run(main)
    assert seen["learned"] == ("closed", True), seen
    assert seen["closed"] == "failed", seen
    assert seen["direct"][0] == "ready", seen
    assert str(seen["direct"][1]) in {p.name for p in setup["pids"].iterdir()}, seen  # the server itself, no npx


async def close_at_first_read_pipe(conn: ServerConnection, first: Callable[[], Any] | None = None) -> None:
    """Start ``conn`` and close it at the loop's first ``connect_read_pipe`` (inside ``anyio.open_process`` for a
    spawned server, stderr's; the transport's own for a process taken over), once ``first()`` (run in a thread) has
    returned: the close runs before that connect goes on."""
    loop = asyncio.get_running_loop()
    real = loop.connect_read_pipe
    there = anyio.Event()

    async def connect_read_pipe(*args: Any) -> Any:
        loop.connect_read_pipe = real  # type: ignore[method-assign]  # once
        if first is not None:
            await anyio.to_thread.run_sync(first)
        there.set()
        await anyio.sleep(0)  # the close runs first
        return await real(*args)

    loop.connect_read_pipe = connect_read_pipe  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.start, tg)
        await there.wait()
        await conn.close()


def _wrapped_server(f: dict[str, Path]) -> list[str]:
    """A shell running ``pid_server.py`` as its child (as npx runs node): the server notes its pid in ``pids`` first
    thing and, once its stdin closes, stays alive until a gate file appears (``tests/servers/pid_server.py``), so a
    child left behind is seen, whatever the timing."""
    from test_spare_servers import PID_SERVER

    (f["tmp"] / "notes").mkdir(exist_ok=True)
    line = f'"{sys.executable}" "{PID_SERVER}" "{f["a"]}" "{f["pids"]}" "{f["tmp"] / "notes"}" gate; :'
    return ["/bin/sh", "-c", line]  # (`; :`: the shell forks the server rather than exec it)


def _none_left(f: dict[str, Path]) -> None:
    """Every server child noted in ``pids`` is gone (bounded: a leaked one waits for its gate, opened after)."""
    from test_spare_servers import alive, pids, wait_for

    try:
        wait_for(lambda: not any(alive(p) for p in pids(f["pids"])), bound=30.0)
    finally:
        (f["tmp"] / "notes" / "all.go").touch()


def test_a_start_cancelled_while_the_process_starts_leaves_no_child(setup: dict[str, Path]) -> None:
    """The close lands inside ``anyio.open_process``, once the wrapper's child runs (the loop's connect of the
    server's stderr pipe, made inside it, waits for that child's pid): the whole process group goes. (Cancelled in
    there, asyncio killed the shell alone and the server lived on; the start is now shielded and the cancel lands
    after it, where the group is killed.)"""
    from test_spare_servers import pids, wait_for

    argv = _wrapped_server(setup)
    conn = ServerConnection("s", Stdio(argv[0], argv[1:], connect_timeout=60))

    async def main() -> None:  # the child runs: the stderr connect in open_process waits for its pid
        await close_at_first_read_pipe(conn, lambda: wait_for(lambda: pids(setup["pids"]), bound=60.0))

    anyio.run(main)
    assert conn.status == "failed" and len(pids(setup["pids"])) == 1
    _none_left(setup)


def test_a_process_started_ahead_cancelled_while_taken_over_leaves_no_child(setup: dict[str, Path]) -> None:
    """A process a job started ahead (``_prespawn``) and a connection takes over, the close landing while the
    transport connects its pipes: its whole group goes, the wrapper's child too (it used to kill the wrapper alone)."""
    from test_spare_servers import pids, wait_for

    from mcp_gym.client import _prespawn

    argv = _wrapped_server(setup)
    pid = _prespawn.launch(argv, None, None)
    wait_for(lambda: pids(setup["pids"]), bound=60.0)  # the wrapper's child runs
    conn = ServerConnection("s", Stdio(argv[0], argv[1:], connect_timeout=60))

    async def main() -> None:
        await close_at_first_read_pipe(conn)

    try:
        anyio.run(main)
        assert pid not in _prespawn.pending() and conn.status == "failed"  # taken over, then closed
        _none_left(setup)
    finally:
        _prespawn.stop_all()
