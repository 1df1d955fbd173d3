"""The server's stdout and stdin pipes of mcp-gym's stdio transport (:mod:`mcp_gym.client._stdio`), as asyncio
protocols run by the loop's pipe transports: stdout's chunks queued for the reader task (or fast-lane answers taken
the moment they arrive, and read in the calling thread by a synchronous call, :meth:`_Stdout.read_now`), stdin's
lines written in the call that sends them (:meth:`_Stdin.write`, no await unless the pipe is full)."""

from __future__ import annotations

import asyncio
import os
import select
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio

__all__: list[str] = []  # private to the transport: mcp_gym.client._stdio imports these names

_READ_NOW_BYTES = 1 << 16  # (a larger buffer costs a memory map per read; the rest of a long line is read later)


class _ReadFailed(Exception):
    """Raised by :meth:`_Stdout.receive` when the pipe's read callback failed (the cause is the exception)."""


class _Stdout(asyncio.Protocol):
    """The server's stdout pipe, read by asyncio's pipe transport: chunks queued for the reader task and, while the
    reader waits with nothing unfinished, fast-lane answers taken the moment they arrive (``take``: the part of a
    chunk it did not take). The caller's future is then resolved in the loop iteration that read the pipe: no hop
    through the reader task, and none through the subprocess protocol's deferred ``pipe_data_received``. Anything
    else keeps its order: once a chunk is queued, later ones queue behind it."""

    def __init__(self, take: Callable[[bytes], bytes], limit: int) -> None:
        self.chunks: deque[bytes] = deque()
        self.queued = 0
        self.eof = False
        self.idle = False  # the reader waits for data with no unfinished line: a chunk may be taken here
        self.failed: Exception | None = None  # what `take` raised: the reader ends the connection with it
        self.take, self._limit = take, limit  # (the transport sets take once its link exists)
        self._waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._paused = False
        self._poll: Any = None  # select.poll of the pipe, for read_now

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102 - asyncio.Protocol's
        self._transport = transport  # type: ignore[assignment]  # connect_read_pipe: a read transport
        pipe = transport.get_extra_info("pipe")
        if pipe is not None and hasattr(select, "poll"):
            self._fd, self._poll = pipe.fileno(), select.poll()
            self._poll.register(self._fd, select.POLLIN)

    def data_received(self, data: bytes) -> None:  # noqa: D102 - asyncio.Protocol's
        if self.idle and not self.chunks and self.failed is None:
            try:
                data = self.take(data)
            except Exception as exc:  # unforeseen: the reader fails the connection (raising here would lose the chunk)
                self.failed = exc
                self._wake()
                return
            if not data:
                return
        self.chunks.append(data)
        self.queued += len(data)
        if self.queued > self._limit and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()  # the reader is behind: the server's writes block, nothing piles up
        self._wake()

    def eof_received(self) -> bool:  # noqa: D102 - asyncio.Protocol's
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102 - asyncio.Protocol's
        self.eof = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def receive(self, idle: bool) -> bytes:
        """The next chunk (``anyio.EndOfStream`` after the last); ``idle``: the caller has no unfinished line."""
        while not self.chunks:
            if self.failed is not None:
                raise _ReadFailed from self.failed
            if self.eof:
                raise anyio.EndOfStream
            self._waiter = asyncio.get_running_loop().create_future()
            self.idle = idle
            try:
                await self._waiter
            finally:
                self.idle, self._waiter = False, None
        chunk = self.chunks.popleft()
        self.queued -= len(chunk)
        if self._paused and self.queued <= self._limit // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return chunk

    def read_now(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the pipe in this thread and take what it holds as the pipe's transport
        would (:meth:`data_received`), while the reader waits with nothing queued or unfinished; otherwise, or when
        nothing comes, nothing happens (the transport reads it in the event loop, as always). Whether it read."""
        if not self.idle or self.chunks or self._paused or self.eof or self.failed is not None or self._poll is None \
                or not self._poll.poll(timeout * 1000.0):
            return False
        try:
            data = os.read(self._fd, _READ_NOW_BYTES)
        except OSError:  # (BlockingIOError: nothing after all) the transport meets the same error and reports it
            return False
        if data:  # (b"": the end, which the transport reads again and reports)
            self.data_received(data)
        return bool(data)

    def close(self) -> None:
        """Close the pipe (a process the server left behind may hold its write end open)."""
        if self._transport is not None:
            self._transport.close()
        self.eof = True
        self._wake()


class _Stdin(asyncio.Protocol):
    """The server's stdin pipe, written by asyncio's pipe transport: a line goes out in the call that sends it
    (queued by the transport when the pipe is full, never interleaved with another), and :meth:`send` waits only
    while the transport's queue is over its high-water mark (a loop turn per line otherwise: anyio's ``send`` drains
    after each)."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.lost = False
        self._paused = False
        self._waiters: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102 - asyncio.Protocol's
        self.transport = transport  # type: ignore[assignment]  # connect_write_pipe: a write transport

    def pause_writing(self) -> None:  # noqa: D102 - asyncio.Protocol's
        self._paused = True

    def resume_writing(self) -> None:  # noqa: D102 - asyncio.Protocol's
        self._paused = False
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102 - asyncio.Protocol's
        self.lost, self._paused = True, False
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def write(self, data: bytes) -> bool:
        """Write ``data`` now (no await): ``False`` when the transport's queue is over its high-water mark, and the
        caller then awaits :meth:`drain` before it goes on, as :meth:`send` does; ``anyio.BrokenResourceError`` when
        the pipe is closed (the server stopped reading)."""
        transport = self.transport
        if self.lost or transport is None or transport.is_closing():
            raise anyio.BrokenResourceError
        transport.write(data)
        return not self._paused and not self.lost

    async def drain(self) -> None:
        """Wait while the transport's queue is over its high-water mark; ``anyio.BrokenResourceError`` when the pipe
        is closed meanwhile."""
        while self._paused and not self.lost:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
        if self.lost:
            raise anyio.BrokenResourceError

    async def send(self, data: bytes) -> None:
        """Write ``data`` (:meth:`write`, then :meth:`drain` when the queue is full)."""
        if not self.write(data):
            await self.drain()

    def close(self) -> None:
        """Close the pipe once what is queued is written (the server then reads EOF)."""
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close the pipe now (the server is gone: nothing queued can be written); no-op once it is closed."""
        if self.transport is not None and not self.lost:
            self.transport.abort()
