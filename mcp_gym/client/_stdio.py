"""A stdio transport for the SDK ``Client`` with linear reading, a message-size cap and a bounded stderr tail.

The SDK's ``stdio_client`` re-joins its whole line buffer for every chunk it reads, so one 50 MB message costs
quadratic CPU (~23 s), and it writes the server's stderr to a file of our choosing, which grows without bound. This
transport feeds the same streams (``SessionMessage`` in, ``SessionMessage`` out) but:

* splits lines linearly: chunks of an unfinished line are kept in a list and joined once, when the newline arrives;
* caps a message at ``max_message_bytes``: the rest of an oversized line is discarded as it arrives (never held); a
  response gets a JSON-RPC error instead (:data:`MESSAGE_TOO_LARGE`, the session stays usable), a notification or
  server request is dropped, and a message whose ``id`` cannot be found in its first 64 kB ends the connection with
  the reason in :attr:`StdioState.failure` (the connection is then reported dead and restarted at the next reset);
* reads a line the SDK's strict parser rejects (lone surrogate escapes, invalid UTF-8, nesting deeper than 200) with
  Python's ``json`` and U+FFFD for what is not Unicode; a response that is still unreadable gets a JSON-RPC error
  (:data:`INVALID_MESSAGE`) for its request at once, instead of leaving the request to time out;
* ignores a response whose ``id`` no request of this client can have (a string that is not a number, ``"²"``, 5,000
  digits: counted in :attr:`StdioState.stray_responses`, logged once), and reads on past it;
* ends the connection with the reason in :attr:`StdioState.failure` when reading the server's output raises anything
  unforeseen (in the pipe's read callback or the reader task), so nothing is silently dropped and no call waits out
  its timeout on a reader that stopped;
* passes a ``*/list_changed`` notification repeated back to back (no other message either way in between) once: a
  flood of them costs a byte comparison each, not a parse and a dispatch;
* drains the server's stderr through a pipe into a ring buffer of ``stderr_tail_bytes`` (nothing on disk);
* stops the server as the SDK does (close stdin, 2 s, SIGTERM to its process group, 2 s, SIGKILL), shielded from
  cancellation with every wait bounded, so no failure path leaves the process running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
import mcp.types as mt
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.shared.message import SessionMessage

from mcp_gym._compat.mcp_wire import Wire
from mcp_gym.client import _prespawn
from mcp_gym.client._stdio_pipes import _ReadFailed, _Stdin, _Stdout
from mcp_gym.client.runtime import cancel_asked, sync_call_alone

__all__ = ["MESSAGE_TOO_LARGE", "INVALID_MESSAGE", "StdioState", "stdio_transport"]

logger = logging.getLogger(__name__)

MESSAGE_TOO_LARGE = -32050
"""JSON-RPC error code a request gets when its response exceeds ``max_message_bytes`` (implementation range)."""
INVALID_MESSAGE = -32051
"""JSON-RPC error code a request gets when its response cannot be read as JSON-RPC at all."""

_HEAD_BYTES = 64 * 1024  # of an oversized message, kept to find its id and method
_READ_BYTES = 1 << 20
_STOP_GRACE = 2.0  # after stdin closes, before SIGTERM
_KILL_GRACE = 2.0  # after SIGTERM, before SIGKILL
_WRITER_FLUSH = 0.5
_READ_NOW = 0.005  # s a sync call waits for its answer in its thread (_Link.read_now), then the loop waits instead:
# the longest that timers and other servers' output may wait for the loop meanwhile
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\Z)|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.DOTALL)


class StdioState:
    """What the transport knows about its server: pid, the tail of its stderr, and why the connection ended."""

    def __init__(self, stderr_tail_bytes: int = 4096) -> None:
        self.stderr_tail_bytes = max(0, int(stderr_tail_bytes))
        self.pid: int | None = None
        self.failure: str | None = None
        self.stderr_bytes = 0  # total seen (only the tail is kept)
        self.dropped_messages = 0  # oversized notifications and server requests
        self.unreadable_lines = 0  # stdout lines that are not JSON-RPC
        self.stray_responses = 0  # responses with an id no request of ours can have (ignored)
        self.wire = Wire()  # the fast lane for tools/call (mcp_gym._compat.mcp_wire)
        self._tail = bytearray()

    def feed_stderr(self, data: bytes) -> None:
        """Keep the last ``stderr_tail_bytes`` of the server's stderr."""
        self.stderr_bytes += len(data)
        cap = self.stderr_tail_bytes
        if len(data) >= cap:
            self._tail[:] = data[len(data) - cap:] if cap else b""
            return
        self._tail += data
        if len(self._tail) > cap:
            del self._tail[: len(self._tail) - cap]

    def stderr_tail(self) -> str:
        """The kept tail of the server's stderr, decoded (undecodable bytes replaced)."""
        return bytes(self._tail).decode("utf-8", errors="replace")


def _top_level(head: bytes) -> dict[str, bytes]:
    """Scalar values of the top-level keys found in the first bytes of a JSON object (``id``, ``method``)."""
    out: dict[str, bytes] = {}
    depth = 0
    key: bytes | None = None
    after_colon = False
    for m in _TOKEN.finditer(head):
        t = m.group()
        if t == b"{" or t == b"[":
            if depth == 1 and after_colon and key is not None:
                out.setdefault(_key(key), b"")  # a container value: present, not a scalar
            depth += 1
            after_colon = False
        elif t == b"}" or t == b"]":
            depth -= 1
        elif depth != 1:
            continue
        elif t == b":":
            after_colon = True
        elif t == b",":
            key, after_colon = None, False
        elif after_colon:
            if key is not None:
                out.setdefault(_key(key), t)
            after_colon = False
        else:
            key = t
    return out


def _scrub(value: Any) -> Any:
    """``value`` with lone surrogates in its strings replaced by U+FFFD (as a lenient UTF-8 decoder would)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


def _lenient(line: bytes) -> Any:
    """The message in a line the strict parser rejected, read leniently; ``None`` if it is not JSON-RPC at all."""
    try:
        obj = _scrub(json.loads(line.decode("utf-8", errors="replace")))
        return mt.jsonrpc_message_adapter.validate_python(obj, by_name=False)
    except (ValueError, TypeError, RecursionError):
        return None


def _reason(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with suppress(Exception):
            first = errors()[0]
            return str(first.get("msg", exc))[:200]
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _key(token: bytes) -> str:
    try:
        return str(json.loads(token))
    except ValueError:
        return ""


class _Lines:
    """Splits the server's output into lines, linearly (the chunks of an unfinished line are joined once, when its
    newline comes) and bounded: past ``limit`` bytes the rest of a line is discarded as it arrives, its first
    :data:`_HEAD_BYTES` kept to tell what it was."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []  # the unfinished line
        self.size = 0
        self.head: bytes | None = None  # set while an oversized line is being discarded

    @property
    def idle(self) -> bool:
        """No unfinished line (a chunk may then be taken whole by the fast lane)."""
        return not self.parts and self.head is None

    def split(self, chunk: bytes) -> Iterator[tuple[bytes | None, bytes | None, int]]:
        """The lines ``chunk`` ends: ``(line, None, 0)`` for a line, ``(None, head, size)`` for an oversized one."""
        pos = 0
        while pos < len(chunk):
            nl = chunk.find(b"\n", pos)
            end = len(chunk) if nl < 0 else nl
            n = end - pos
            if self.head is None and self.size + n > self.limit:
                self.head = (b"".join(self.parts) + chunk[pos : pos + _HEAD_BYTES])[:_HEAD_BYTES]
                self.parts = []
            elif self.head is None:
                self.parts.append(chunk[pos:end])
            self.size += n
            if nl < 0:
                return
            size, self.size = self.size, 0
            pos = nl + 1
            if self.head is None:
                parts, self.parts = self.parts, []
                yield parts[0] if len(parts) == 1 else b"".join(parts), None, 0
            else:
                head, self.head = self.head, None
                yield None, head, size


class _Link:
    """One running server's pipes and the session's streams: what is read is framed (:class:`_Lines`) and handed to
    the fast lane (:class:`~mcp_gym._compat.mcp_wire.Wire`) or the SDK's session, what the session sends is written.
    """

    def __init__(self, params: StdioServerParameters, state: StdioState, max_message_bytes: int, process: Any,
                 stdin: _Stdin, stdout: _Stdout) -> None:
        self.params, self.state, self.max_message_bytes = params, state, max_message_bytes
        self.process, self.stdin, self.stdout = process, stdin, stdout
        self.wire = state.wire
        self.read_writer, self.read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.write_stream, self.write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self.writer_done = anyio.Event()
        # Pipe readers run shielded (a server stuck writing must be drained until it dies) and are stopped explicitly.
        self.reader_scope = anyio.CancelScope(shield=True)
        self.stderr_scope = anyio.CancelScope(shield=True)
        self.repeat = b""  # the last line delivered, if it was a */list_changed notification
        self.lines = _Lines(max_message_bytes)

    # -- to the fast lane and the session -----------------------------------------------------------------------------
    def write_line(self, line: bytes) -> bool:
        """The fast lane's requests: one write now (lines never interleave); ``False``: the pipe is full, the caller
        awaits ``stdin.drain()`` (:meth:`_Stdin.write`)."""
        self.repeat = b""
        return self.stdin.write(line)

    def take_answers(self, chunk: bytes) -> bytes:
        """Fast-lane answers at the head of ``chunk`` (whole lines) taken at once, while the reader is idle; the rest
        (from the first line that is not one) goes to the reader, in order. What :meth:`deliver_line` would do."""
        wire = self.wire
        if not wire.waiting:
            return chunk
        pos = 0
        while (nl := chunk.find(b"\n", pos)) >= 0 and nl - pos <= self.max_message_bytes:
            line = chunk[pos:nl]
            if line and not line.isspace():
                if not wire.take_line(line):
                    break
                self.repeat = b""
            pos = nl + 1
        return chunk[pos:] if pos else chunk

    def read_now(self, timeout: float | None) -> bool:
        """A sync call that drives the loop with nothing else for it to do (``runtime.sync_call_alone``; nothing
        passed to the session since the host last looked, ``Wire.quiet``) just wrote a fast-lane request: wait for
        the server's output in this thread (at most ``_READ_NOW`` s or ``timeout``) and take it as the pipe's
        transport would, so the answer resolves its request without the loop's turns; the rest goes to the reader,
        in order. ``False``: a cancellation (Ctrl-C) was asked for meanwhile: the caller lets the loop turn once,
        so it takes effect where the call waits, as in the loop."""
        if not sync_call_alone(loop := self.wire.loop) or not self.wire.quiet(take=False) or not self.stdout.read_now(
                _READ_NOW if timeout is None else min(_READ_NOW, max(timeout, 0.0))):
            return True  # (the loop named: no getpid system call per ask for the current task on Python < 3.12)
        return not cancel_asked(loop)

    async def deliver(self, item: SessionMessage | Exception) -> bool:
        """To the waiting fast-lane request it answers, else to the session (``False``: the session is gone)."""
        self.repeat = b""
        if self.wire.waiting and self.wire.take_message(item):
            return True
        self.wire.delivered += 1
        try:
            await self.read_writer.send(item)
            return True
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False  # the session is gone: keep draining

    async def deliver_line(self, line: bytes) -> bool:
        """One line of output: a fast-lane answer, a message for the session, or what :meth:`unreadable` says."""
        if not line or line.isspace():
            return True
        if line == self.repeat:
            return True  # the same list_changed again, with nothing in between: it changes nothing (a flood is free)
        wire = self.wire
        if wire.waiting and wire.take_line(line):
            self.repeat = b""
            return True
        try:
            message = mt.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError as exc:
            message = _lenient(line)
            if message is None:
                return await self.unreadable(line, exc)
        if isinstance(message, (mt.JSONRPCResponse, mt.JSONRPCError)) and not wire.answers_session(message.id):
            return self.stray(message.id)
        method = message.__dict__.get("method")  # a response has no such field (pydantic's getattr miss is slow)
        if wire.progress and method == "notifications/progress":
            wire.route(message)  # a fast-lane request's progress: its callback (the SDK's session sees it too)
        ok = await self.deliver(SessionMessage(message))
        if isinstance(method, str) and method.endswith("/list_changed") and len(line) < 4096:
            self.repeat = line
        return ok

    def stray(self, rid: Any) -> bool:
        """A response no request of ours can have asked for: not an answer, ignored (said once per server)."""
        state = self.state
        state.stray_responses += 1
        if state.stray_responses == 1:
            logger.warning("server %s sent a response with id %.40r, which no request has (ignored; further ones are "
                           "counted, not logged)", self.params.command, rid)
        return True

    async def answer_error(self, rid: Any, code: int, message: str) -> bool:
        """Request ``rid`` gets a JSON-RPC error instead of its answer (a stray id is ignored)."""
        if not self.wire.answers_session(rid):
            return self.stray(rid)
        error = mt.ErrorData(code=code, message=message)
        return await self.deliver(SessionMessage(mt.JSONRPCError(jsonrpc="2.0", id=rid, error=error)))

    async def unreadable(self, line: bytes, exc: Exception) -> bool:
        """A response that is not JSON-RPC fails its request at once; anything else is reported as the SDK does."""
        state = self.state
        state.unreadable_lines += 1
        if state.unreadable_lines == 1:  # once per server: one that prints logs to stdout would flood the log
            logger.warning("server %s sent a line that is not a JSON-RPC message (%d bytes; further ones are "
                           "counted, not logged)", self.params.command, len(line))
        keys = _top_level(line[:_HEAD_BYTES])
        rid = _scalar_id(keys)
        if "method" in keys or rid is None:
            return await self.deliver(exc)
        return await self.answer_error(rid, INVALID_MESSAGE,
                                       f"the server's response is not valid JSON-RPC: {_reason(exc)}")

    async def oversized(self, head: bytes, size: int) -> bool | None:
        """A response gets an error, anything else is dropped; None: its id is unknown, end the connection."""
        keys = _top_level(head)
        what = f"a message of {size:,} bytes exceeds max_message_bytes={self.max_message_bytes:,}"
        state = self.state
        if "method" in keys:
            state.dropped_messages += 1
            if state.dropped_messages == 1:
                method = keys["method"][:80].decode(errors="replace")
                logger.warning("server %s: dropped %s (%s; further ones are counted, not logged)",
                               self.params.command, what, method)
            return True
        rid = _scalar_id(keys)
        if rid is None:
            state.failure = f"{what} and its id is not in its first {_HEAD_BYTES // 1024} kB"
            return None
        return await self.answer_error(rid, MESSAGE_TOO_LARGE, f"result too large: {what} (the result was discarded)")

    async def end(self) -> None:
        """The connection is over for the session: waiting fast-lane requests fail, the session sees the end."""
        self.wire.close()
        await self.read_writer.aclose()

    # -- the tasks ----------------------------------------------------------------------------------------------------
    async def read_stdout(self) -> None:
        """Read the server's output until it ends, keeping the session fed; drain only once the session is gone or
        the connection failed."""
        live = True  # False: the session is gone or the connection failed; only drain
        with self.reader_scope:
            async with self.read_writer:
                try:
                    while True:
                        try:
                            chunk = await self.stdout.receive(idle=live and self.lines.idle)
                        except _ReadFailed as exc:
                            self.stdout.failed, live = None, False  # reported once; from now on only drain
                            await self.fail(exc.__cause__ or exc)
                            continue
                        if live:
                            live = await self.read_chunk(chunk)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    pass
                finally:
                    self.wire.close()

    async def read_chunk(self, chunk: bytes) -> bool:
        """Deliver the lines ``chunk`` ends; ``False``: the session is gone or the connection failed."""
        try:
            for line, head, size in self.lines.split(chunk):
                if line is not None:
                    live = await self.deliver_line(line)
                else:
                    assert head is not None
                    ok = await self.oversized(head, size)
                    if ok is None:
                        await self.end()
                    live = bool(ok)
                if not live:
                    return False
            return True
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise
        except Exception as exc:  # unforeseen: fail the connection rather than drop what follows
            await self.fail(exc)
            return False

    async def fail(self, exc: BaseException) -> None:
        """Reading raised something unforeseen: the connection ends with the reason (the server is then dead)."""
        detail = str(exc).splitlines()[0][:200] if str(exc) else "no detail"
        self.state.failure = f"reading the server's output failed ({type(exc).__name__}: {detail})"
        logger.error("server %s: %s; the connection is closed", self.params.command, self.state.failure,
                     exc_info=exc)
        await self.end()

    async def read_stderr(self) -> None:
        """Keep the tail of the server's stderr until it ends."""
        stderr = self.process.stderr
        assert stderr is not None
        with self.stderr_scope, suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError,
                                         OSError):
            while True:
                self.state.feed_stderr(await stderr.receive(65536))

    async def write_stdin(self) -> None:
        """Write what the session sends, noting its stamp for the fast lane; a closed pipe ends the session."""
        try:
            async with self.write_reader:
                async for message in self.write_reader:
                    self.wire.observe(message.message)  # the session's stamp, for the fast lane's requests
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    self.repeat = b""  # a list_changed after this request (e.g. a tools/list) may be news
                    await self.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await self.end()  # the server stopped reading: end the session instead of hanging a request
        finally:
            self.writer_done.set()

    async def shutdown(self) -> None:
        """Stop the server as the SDK does (stdin closed, SIGTERM to its group, SIGKILL), every wait bounded."""
        process = self.process
        self.wire.close()
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(_WRITER_FLUSH):
            await self.writer_done.wait()
        self.stdin.close()
        if not await _exited(process, _STOP_GRACE):
            from mcp.os.posix.utilities import terminate_posix_process_tree

            await terminate_posix_process_tree(process, _KILL_GRACE)
            if not await _exited(process, _KILL_GRACE):
                logger.warning("MCP server process %d survived SIGKILL; abandoning it", process.pid)
        self.reader_scope.cancel()
        self.stdin.abort()
        self.stdout.close()
        self.stderr_scope.cancel()
        with anyio.move_on_after(_KILL_GRACE):
            await process.aclose()
        for s in (self.read_stream, self.write_stream, self.read_writer, self.write_reader):
            s.close()


def _scalar_id(keys: dict[str, bytes]) -> Any:
    """The ``id`` of a message read from its first bytes (:func:`_top_level`) when it is a number or a string, else
    ``None``."""
    rid: Any = None
    with suppress(ValueError):
        rid = json.loads(keys.get("id", b"") or b"null")
    return None if isinstance(rid, bool) or not isinstance(rid, (int, str)) else rid


async def _spawn(params: StdioServerParameters, stdin: _Stdin, stdout: _Stdout) -> Any:
    """Start the server in its own process group, its stdin and stdout pipes run by asyncio's pipe transports into
    ``stdin`` and ``stdout``, its stderr a pipe; the process."""
    out_read, out_write = os.pipe()  # the server's stdout, read by asyncio's pipe transport into `stdout`
    in_read, in_write = os.pipe()  # the server's stdin, written by asyncio's pipe transport from `stdin`
    try:  # shielded, bounded: cancelled inside, asyncio kills the leader alone (npx's node would live on)
        with anyio.CancelScope(shield=True):  # a cancel lands at the next await, whose clean-up kills the group
            process = await anyio.open_process([params.command, *params.args],
                                               env=get_default_environment() | (params.env or {}), stdin=in_read,
                                               stdout=out_write, stderr=subprocess.PIPE, cwd=params.cwd,
                                               start_new_session=True)
    except BaseException:
        os.close(out_read)
        os.close(in_write)
        raise
    finally:
        os.close(out_write)  # the server holds it: EOF arrives when the server (and its children) close it
        os.close(in_read)
    pipe = open(out_read, "rb", buffering=0)  # noqa: SIM115 - the pipe transport closes it
    in_pipe = open(in_write, "wb", buffering=0)  # noqa: SIM115 - the pipe transport closes it
    loop, transports = asyncio.get_running_loop(), []
    try:
        transports.append((await loop.connect_read_pipe(lambda: stdout, pipe))[0])
        await loop.connect_write_pipe(lambda: stdin, in_pipe)  # (the last await: nothing after it to undo)
    except BaseException:  # e.g. close() in the handshake. Transports first: a pipe closed under its transport stays
        for transport in transports:  # in the loop's selector, and the next pipe given its number is never read
            transport.close()
        pipe.close()
        in_pipe.close()
        with anyio.CancelScope(shield=True):
            with suppress(ProcessLookupError):  # its own group: a wrapper's children too (the leader is not reaped)
                os.killpg(process.pid, signal.SIGKILL)
            await process.aclose()
        raise
    return process


@asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, state: StdioState, *, max_message_bytes: int
) -> AsyncIterator[tuple[Any, Any]]:
    """Spawn the server (own process group, stderr piped into ``state``) and yield the session's streams."""
    if sys.platform == "win32":  # pragma: no cover - the SDK's transport (stderr to ours, no cap) on Windows
        from mcp.client.stdio import stdio_client

        async with stdio_client(params) as streams:
            yield streams
        return
    stdin, stdout = _Stdin(), _Stdout(lambda chunk: chunk, _READ_BYTES)  # (nothing is taken before the link is)
    process = await _prespawn.adopted(params, stdin, stdout) or await _spawn(params, stdin, stdout)
    state.pid = process.pid
    link = _Link(params, state, max_message_bytes, process, stdin, stdout)
    stdout.take = link.take_answers  # (no lambda between the pipe and the link: a call less per answer)
    state.wire.send, state.wire.drain, state.wire.loop = link.write_line, stdin.drain, asyncio.get_running_loop()
    state.wire.read_now = link.read_now
    async with anyio.create_task_group() as tg:
        state.wire.spawn = tg.start_soon
        tg.start_soon(link.read_stdout)
        tg.start_soon(link.read_stderr)
        tg.start_soon(link.write_stdin)
        try:
            yield link.read_stream, link.write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await link.shutdown()
            tg.cancel_scope.cancel()


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    """Whether the process exited within ``timeout`` (polls ``returncode``: ``wait()`` also waits for pipe EOF)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
        return True
    return False
