"""Closing a stdio server while it is still in its handshake (``ServerConnection.close`` cancels the handshake, as a
Ctrl-C or a dropped spare server does) leaves nothing behind on the event loop: a server started next on the same loop
connects. Real stdio subprocesses (the bundled Counter); the close is made to land at one exact point of the start,
without timing: while the transport connects the server's stdin pipe, its stdout pipe already watched by the loop."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import anyio

from mcp_gym import Stdio
from mcp_gym.client.connection import ServerConnection


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
        real = loop.connect_write_pipe
        connecting = anyio.Event()

        async def connect_write_pipe(*args: Any) -> Any:
            loop.connect_write_pipe = real  # type: ignore[method-assign]  # once
            connecting.set()  # the close below lands before this connect completes (callbacks run in order)
            return await real(*args)

        loop.connect_write_pipe = connect_write_pipe  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.start, tg)
            await connecting.wait()
            await first.close()
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
