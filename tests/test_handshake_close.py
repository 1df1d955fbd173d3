"""Closing a stdio server while it is still in its handshake (``ServerConnection.close`` cancels the handshake, as a
Ctrl-C or a dropped spare server does) leaves nothing behind on the event loop: a server started next on the same loop
connects. Real stdio subprocesses (the bundled Counter); the close is made to land at one exact point of the start,
without timing: while the transport connects the server's stdin pipe, its stdout pipe already watched by the loop."""

from __future__ import annotations

import asyncio
import os
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
