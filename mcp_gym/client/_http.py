"""HTTP clients for Streamable HTTP / SSE sessions: one TLS context per process, a bound on the requests in flight
to one server, and HTTP timeouts that fail one request instead of the whole session.

The SDK gives each session its own ``httpx2.AsyncClient``, and each builds its own TLS context (loading the CA
bundle): about 27 ms of CPU and 0.8 MB of memory per session on a 2-core machine, which was most of what a session
cost at 1,000+ concurrent episodes (``scripts/bench/scale.py``). Here every session still gets its own client and
connection pool (its own headers, auth, hooks, cookies and proxies from the environment, exactly as before) built on
one shared ``ssl.SSLContext``: about 0.1 ms and 3 kB per session (a session whose calls move to the HTTP fast lane
has two pools, :class:`LanePools`). One pool for all sessions was measured and
rejected: httpcore's pool scans all its connections (probing each idle socket) whenever a request starts or ends, so at
10,000 sessions every request pays for the other 9,999.

What a busy server needs (found at 1,000 and 10,000 concurrent sessions against one server):

* **At most** ``max_in_flight`` **requests to one server wait for its answer at once** (all sessions of this process on
  one event loop, per origin). A server closes idle keep-alive connections (uvicorn: after 5 s), so when thousands of
  sessions step together each opens a new TCP connection; past the server's listen backlog (uvicorn: 2048) the kernel
  drops the connection attempts (``ListenOverflows`` in ``/proc/net/netstat``) and the clients see connect timeouts or
  resets. A JSON-RPC request holds its slot until the server's response headers arrive (a streamed answer's body then
  flows without one); responses, stream GETs and DELETEs take none. Waiting for a slot is bounded by the read timeout.
* **An HTTP timeout fails that request, not the session.** In the SDK (mcp 2.3) any exception from a request's POST
  escapes into the transport's task group and closes the session, so every later call reads "Connection closed" and a
  busy server looked dead. Here a connect, write, read or slot timeout before the response headers becomes that
  request's JSON-RPC error ``-32001`` (request timeout; ``data`` says which HTTP timeout) and the session stays open.
* **A connect timeout is tried again** (nothing was sent), for as long as the read timeout, so a server past its listen
  backlog (thousands of sessions reconnecting at once) is waited for, not reported busy after one attempt.
* **A connection that breaks under a request fails that request, not the session.** A server closes an idle
  keep-alive connection after a few seconds (uvicorn, Node: 5 s); a request sent on it just as the server's timer fires
  meets a reset (``ReadError``) or an empty answer (``RemoteProtocolError``). Under load such races are common: at
  1,000 concurrent sessions on 2 cores, 14-45 requests per run met one, and each killed its whole session (the SDK
  behaves as with timeouts). Here a broken, reset or closed connection after the request was sent becomes that
  request's JSON-RPC error ``-32003`` (``data``: which HTTP error) saying the call may or may not have run; the
  session stays open and its next request opens a new connection. A refused connection (nothing listens) still ends
  the session: that server is gone. Idle connections are dropped by the client after ``KEEPALIVE_EXPIRY`` seconds,
  well before the usual 5 s of servers, which makes such races rare.
* **A server that says how long it keeps idle connections is taken at its word, with a margin.** A response header
  ``Keep-Alive: timeout=T`` (the bundled servers send ``timeout=30``, Node's HTTP server ``timeout=5``) sets the idle
  expiry of the session's HTTP fast lane (:mod:`mcp_gym.client._http_lane`, where its steps go) to
  :func:`keepalive_for` ``T``: half of it (at most 60 s; below 6 s, at most the 2 s default). Under load a session's
  next request often comes seconds after its last; with 1,000 concurrent sessions against one bundled server,
  keeping the connection instead of opening a new one per step made steps 1.3x as fast (``scripts/bench/scale.py``).
  The session's own ``httpx2`` client (the SDK's traffic: handshake, listings, and the steps of a session off the
  lane) keeps idle connections :data:`KEEPALIVE_EXPIRY` seconds (``httpx2.Limits``; httpx2 has no public way to
  change it once the header is seen). Sessions given their own ``limits=`` keep them, and their lane the default.
* **A malformed SSE** ``retry:`` **field is ignored** (:class:`RetryLines`): httpx2's SSE decoder takes whatever
  ``int()`` reads, which the SDK then sleeps on before resuming a stream (``-5`` or 400 digits ended the call);
  the SSE spec ignores a value that is not ASCII digits, and one past :data:`MAX_SSE_RETRY_MS` is ignored too.
* **An answer's body is bounded in size and by the caller's wait** (``max_message_bytes``, as for stdio). The SDK
  reads a JSON answer whole (``aread``) and parses it in one piece: a server answering with 1,000 MB made a step with
  ``call_timeout=5`` take 19.6 s and the process grow 1.4 GB, and a streamed (SSE) answer over the SDK's 1 MiB per
  event ended the whole session. Here a JSON answer (or a redirect's body) is read as it arrives, at most
  ``max_message_bytes`` (decoded) bytes of it, a ``Content-Length`` above it refused before reading; an SSE answer is
  passed on one whole event at a time, each at most ``max_message_bytes``. Past the bound the connection is closed
  and that request gets the JSON-RPC error :data:`~mcp_gym.client._stdio.MESSAGE_TOO_LARGE` (a ``too_large`` step
  error); the session stays open. When the caller stops waiting (``call_timeout``: the SDK then sends
  ``notifications/cancelled``, or on a 2026-07-28 connection aborts the POST itself) the body still being read is
  dropped and its connection closed, so a slow endless body costs neither time nor memory after the step has failed.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import threading
from typing import Any

import anyio
import httpx2
from anyio.lowlevel import RunVar

from mcp_gym.client._sse_retry import MAX_SSE_RETRY_MS, RetryLines, sse_retry_ok
from mcp_gym.client._stdio import MESSAGE_TOO_LARGE
from mcp_gym.protocol import redact_http_logs

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_SSE_READ_TIMEOUT",
           "session_http_client", "shared_ssl_context", "HTTP_TIMEOUT_DATA_KEY", "HTTP_CONNECTION_DATA_KEY",
           "CONNECTION_LOST", "KEEPALIVE_EXPIRY", "KEEPALIVE_MAX", "MAX_IN_FLIGHT", "keepalive_for", "request_slots",
           "session_gone", "server_error",
           "timeout_message", "connection_message", "too_large_message", "MAX_SSE_RETRY_MS", "sse_retry_ok",
           "RetryLines", "LanePools", "proxy_in_environment"]

_ctx: ssl.SSLContext | None = None
_lock = threading.Lock()

DEFAULT_TIMEOUT = 30.0
"""Seconds any HTTP operation of a session may take, unless its spec says: the MCP SDK's default (``mcp`` 2.3;
``tests/test_compat.py`` fails when the SDK's changes)."""
DEFAULT_SSE_READ_TIMEOUT = 300.0
"""Seconds a session's SSE stream may stay silent, unless its spec says: the MCP SDK's default (as above)."""

MAX_IN_FLIGHT = 256
"""Default bound on the requests to one server (origin) that wait for its answer at once, per event loop: below the
listen backlog of common servers (uvicorn 2048, Node 511) and far above what one server process answers at once."""

HTTP_TIMEOUT_DATA_KEY = "http_timeout"
"""Key in the ``data`` of a ``-32001`` error made here (an HTTP timeout, not the caller's own bound): which one."""

CONNECTION_LOST = -32003
"""JSON-RPC code of the error made here when the connection broke after a request was sent and before its answer
(implementation-defined server-error range; the SDK's own codes are -32000 to -32002)."""

HTTP_CONNECTION_DATA_KEY = "http_connection"
"""Key in the ``data`` of a :data:`CONNECTION_LOST` error: the HTTP error (``ReadError``, ``RemoteProtocolError``,
``WriteError``) and its message."""

KEEPALIVE_EXPIRY = 2.0
"""Seconds an idle connection is kept for the next request (httpx: 5 s, as long as uvicorn and Node keep it: a
request sent at second 5 races the server's close)."""

KEEPALIVE_MAX = 60.0
"""The longest idle expiry a server's ``Keep-Alive`` header can ask for (:func:`keepalive_for`)."""

_SLOTS: RunVar[dict[tuple[str, int], anyio.Semaphore]] = RunVar("mcp_gym_http_slots")

redact_http_logs()  # httpx2 logs every request's URL at INFO: user info and query values are redacted


def shared_ssl_context() -> ssl.SSLContext:
    """The process's TLS context for MCP sessions (httpx2's default: certifi or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
    as set when the first session starts), made once."""
    global _ctx
    with _lock:
        if _ctx is None:
            _ctx = httpx2.create_ssl_context(trust_env=True)
        return _ctx


def request_slots(origin: str, limit: int) -> anyio.Semaphore:
    """The semaphore of ``origin`` with ``limit`` slots on the running event loop (shared by its sessions)."""
    table = _SLOTS.get(None)
    if table is None:
        table = {}
        _SLOTS.set(table)
    sem = table.get((origin, limit))
    if sem is None:
        sem = table[(origin, limit)] = anyio.Semaphore(limit, fast_acquire=True)
    return sem


def keepalive_for(header: str | None) -> float | None:
    """Seconds to keep an idle connection to a server whose responses carry ``Keep-Alive: <header>`` (e.g.
    ``timeout=30, max=100``): half its ``timeout`` (a request sent as the server's timer fires is lost, and a busy
    client reads answers late, so its idle clock starts late), at most :data:`KEEPALIVE_MAX`, and for a timeout below
    6 s at most :data:`KEEPALIVE_EXPIRY`. ``None`` without a usable ``timeout``."""
    if not header:
        return None
    for part in header.split(","):
        name, _, value = part.partition("=")
        if name.strip().lower() != "timeout":
            continue
        try:
            seconds = float(value.strip())
        except ValueError:
            return None
        if not math.isfinite(seconds) or seconds <= 0:
            return None
        half = seconds / 2
        return min(KEEPALIVE_MAX, half if seconds >= 6 else min(KEEPALIVE_EXPIRY, half))
    return None


def _is_request(request: httpx2.Request) -> bool:
    """A POST that carries a JSON-RPC request or notification (cheap: no parsing)."""
    if request.method != "POST":
        return False
    try:
        return b'"method"' in request.content
    except httpx2.RequestNotRead:
        return False


def _request_id(request: httpx2.Request) -> Any:
    """The JSON-RPC id of a POSTed request (``None`` for a notification, a response or anything else)."""
    if request.method != "POST":
        return None
    try:
        body = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead, UnicodeDecodeError):
        return None
    if isinstance(body, dict) and "method" in body and isinstance(body.get("id"), (str, int)):
        return body["id"]
    return None


def _origin(request: httpx2.Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc.decode('ascii', 'replace')}"


def _error_answer(request: httpx2.Request, status: int, code: int, message: str,
                  data: dict[str, Any]) -> httpx2.Response | None:
    """A JSON-RPC error answering ``request`` (what the SDK makes of a server's error body), or ``None`` when it is
    not a JSON-RPC request (the exception then goes on as before)."""
    rid = _request_id(request)
    return None if rid is None else _error_response(request, rid, status, code, message, data)


def _error_response(request: httpx2.Request, rid: Any, status: int, code: int, message: str,
                    data: dict[str, Any]) -> httpx2.Response:
    """A JSON-RPC error answering request ``rid``."""
    body = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}}
    return httpx2.Response(status, headers={"content-type": "application/json"}, content=json.dumps(body).encode(),
                           request=request)


def session_gone(refusal: str | None, http: Any, message: str) -> str | None:
    """Why a Streamable HTTP server no longer knows the session of ``http`` (a session's client, or ``None``): it
    restarted, or ended the session. ``refusal`` is the HTTP status of the failed request ("HTTP 404 Not Found at
    URL"), ``message`` its error; ``None`` when the session holds. HTTP 404 to a request of the session is the spec's
    signal ("Session not found"); servers on the TypeScript SDK answer HTTP 400 naming the session ("Bad Request: No
    valid session ID provided"). The session is then dead: every later request would fail the same way."""
    if refusal is None or getattr(http, "session_id", None) is None:  # no session (2026-07-28 has none)
        return None
    if not (refusal.startswith("HTTP 404") or (refusal.startswith("HTTP 400") and "session" in message.lower())):
        return None
    return f"the server no longer knows the session ({refusal}: {message}; did it restart?): the next reset reconnects"


def server_error(body: bytes) -> tuple[int, str, Any] | None:
    """``(code, message, data)`` of a JSON-RPC error in an HTTP error answer's body, also one without an id (the
    TypeScript SDK's for an unknown session), or ``None``. Its -32000 is the server's own code, not the SDK's
    "connection closed" (which would end the session): without an id it is read as -32603 (internal error)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    error = obj.get("error") if isinstance(obj, dict) else None
    if not (isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)):
        return None
    code = -32603 if error["code"] == -32000 and "id" not in obj else error["code"]
    return code, error["message"], error.get("data")


def timeout_message(origin: str, which: str, seconds: float | None) -> str:
    """The message of a ``-32001`` error made for an HTTP timeout (``which``) before an answer from ``origin``."""
    within = f" within {seconds:g} s" if seconds is not None else ""
    return f"no answer from {origin}{within} ({which}): the server is busy or unreachable; the session stays open"


def connection_message(origin: str, error: BaseException) -> tuple[str, str]:
    """The message of a :data:`CONNECTION_LOST` error (the connection to ``origin`` broke under a request) and its
    ``data`` value (the error's type and text)."""
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return (f"the connection to {origin} broke before the answer ({what}); the request may or may not have run on the "
            "server; the session stays open"), what


def _timeout_answer(request: httpx2.Request, which: str, seconds: float | None) -> httpx2.Response | None:
    """A JSON-RPC ``-32001`` error answering ``request``, or ``None`` when it is not a JSON-RPC request."""
    message = timeout_message(_origin(request), which, seconds)
    return _error_answer(request, 504, -32001, message, {HTTP_TIMEOUT_DATA_KEY: which})


def _connection_answer(request: httpx2.Request, error: httpx2.TransportError) -> httpx2.Response | None:
    """A JSON-RPC :data:`CONNECTION_LOST` error answering ``request``, or ``None`` when it is not a JSON-RPC
    request."""
    message, what = connection_message(_origin(request), error)
    return _error_answer(request, 502, CONNECTION_LOST, message, {HTTP_CONNECTION_DATA_KEY: what})


def _cancelled_id(request: httpx2.Request) -> Any:
    """The request id a POSTed ``notifications/cancelled`` names (``None`` for anything else; cheap when it is
    not one)."""
    try:
        if b"notifications/cancelled" not in request.content:
            return None
        body = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead, UnicodeDecodeError):
        return None
    params = body.get("params") if isinstance(body, dict) else None
    rid = params.get("requestId") if isinstance(params, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def too_large_message(limit: int, what: str) -> str:
    """The message of a :data:`MESSAGE_TOO_LARGE` error."""
    return (f"result too large: {what} exceeds max_message_bytes={limit:,} (the rest was not read and the connection "
            "closed; the session stays open)")


def _without_encoding(headers: httpx2.Headers) -> httpx2.Headers:
    """``headers`` for a body that is already decoded (no ``Content-Encoding`` / ``Content-Length``)."""
    out = httpx2.Headers(headers)
    for name in ("content-encoding", "content-length"):
        if name in out:
            del out[name]
    return out


async def _close(response: httpx2.Response) -> None:
    """Close a response whose body is not wholly read (its connection is dropped), even under cancellation."""
    with anyio.CancelScope(shield=True):
        await response.aclose()


class _Reading:
    """The body of one request's answer while it is read; :meth:`abort` (the caller stopped waiting) stops it."""

    __slots__ = ("aborted", "scope")

    def __init__(self) -> None:
        self.aborted = False
        self.scope: anyio.CancelScope | None = None

    def abort(self) -> None:
        self.aborted = True
        if self.scope is not None:
            self.scope.cancel()


DRAIN_SECONDS = 0.5
DRAIN_BYTES = 64 * 1024
"""How long and how much of the rest of an SSE answer is read after its answer event, to keep its connection (past
either, the connection is dropped as before)."""

_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r\n")  # a blank line ends an SSE event


class _BoundedEvents(httpx2.AsyncByteStream):
    """The decoded body of an SSE answer to request ``rid``, passed on whole events at a time: an event over
    ``limit`` bytes is dropped with the rest of the stream and replaced by a :data:`MESSAGE_TOO_LARGE` error event
    for ``rid``; an aborted read ends with a ``-32001`` error event (no one waits for it: the SDK drops it)."""

    def __init__(self, client: _SessionClient, response: httpx2.Response, rid: Any, limit: int) -> None:
        self.client, self.response, self.rid, self.limit = client, response, rid, limit
        self._chunks: Any = None

    def _error_event(self, code: int, message: str, data: dict[str, Any]) -> bytes:
        body = {"jsonrpc": "2.0", "id": self.rid, "error": {"code": code, "message": message, "data": data}}
        return b"event: message\ndata: " + json.dumps(body).encode() + b"\n\n"

    @staticmethod
    def _event_end(pending: bytearray, start: int) -> int:
        """The end of the last complete event in ``pending`` (0: none), looking from ``start``."""
        return max((i + len(m) for m in _EVENT_ENDS if (i := pending.rfind(m, start)) >= 0), default=0)

    async def __aiter__(self) -> Any:
        reading = self.client._reading.setdefault(self.rid, _Reading())
        chunks = self._chunks = self.response.aiter_bytes().__aiter__()
        pending = bytearray()
        try:
            while not reading.aborted:
                with anyio.CancelScope() as reading.scope:  # per chunk: a scope never spans a yield
                    chunk = await chunks.__anext__()
                reading.scope = None
                if reading.aborted:
                    break
                start = max(0, len(pending) - 3)
                pending += chunk
                end = self._event_end(pending, start)
                if end:
                    yield bytes(pending[:end])
                    del pending[:end]
                if len(pending) > self.limit:
                    self._chunks = None  # the rest is not read: the connection is dropped
                    what = too_large_message(self.limit, "an event of the streamed answer")
                    yield self._error_event(MESSAGE_TOO_LARGE, what, {"max_message_bytes": self.limit})
                    return
            if reading.aborted:
                self._chunks = None
                yield self._error_event(-32001, "the caller stopped waiting; the answer was dropped",
                                        {HTTP_TIMEOUT_DATA_KEY: "abandoned"})
        except StopAsyncIteration:
            if pending:
                yield bytes(pending)
        finally:
            if self.client._reading.get(self.rid) is reading:
                del self.client._reading[self.rid]
            await _close(self.response)

    async def aclose(self) -> None:
        reading = self.client._reading.get(self.rid)
        try:
            if reading is not None and reading.scope is None:  # not between chunks of the read: it is over
                del self.client._reading[self.rid]
                if not reading.aborted and anyio.current_effective_deadline() != -math.inf:  # (not cancelled)
                    await self._drain()
        finally:
            await _close(self.response)

    async def _drain(self) -> None:
        """Read what is left of the stream, if it ends soon and small, so that its connection is kept: the SDK closes
        an SSE answer as soon as it has read the answer event, before the stream's last chunk (a server such as the
        TypeScript SDK's ends the stream right after it), and a response closed unread drops its connection."""
        if self._chunks is None or self.response.is_closed:
            return
        size = 0
        with anyio.move_on_after(DRAIN_SECONDS):
            try:
                while size <= DRAIN_BYTES:
                    size += len(await self._chunks.__anext__())
            except (StopAsyncIteration, httpx2.HTTPError):
                pass
        self._chunks = None


class _SpecRetry(httpx2.AsyncByteStream):
    """The decoded body of an SSE response without the ``retry:`` lines :class:`RetryLines` refuses."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response

    async def __aiter__(self) -> Any:
        lines = RetryLines()
        async for chunk in self.response.aiter_bytes():
            out = lines.feed(chunk)
            if out:
                yield out
        last = lines.flush()
        if last:
            yield last

    async def aclose(self) -> None:
        await self.response.aclose()


_WHICH = {httpx2.ConnectTimeout: "connect", httpx2.ReadTimeout: "read", httpx2.WriteTimeout: "write",
          httpx2.PoolTimeout: "pool"}


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def proxy_in_environment() -> bool:
    """Whether the environment sets an HTTP proxy (httpx2 applies it; the HTTP fast lane then stays off)."""
    return any(os.environ.get(v) or os.environ.get(v.upper()) for v in _PROXY_VARIABLES)


class LanePools(httpx2.AsyncBaseTransport):
    """The transport of a session whose calls move to the HTTP fast lane: its ``GET`` streams (the SDK's long-lived
    SSE streams) on one ``httpx2.AsyncHTTPTransport``, its other requests on another, which :meth:`release_idle` lets
    go of (its connections closed, a new one for the next request) once the lane carries the calls and none of its
    requests is open. httpcore2 closes an idle connection only when its pool is next used, so without this every
    session would keep the idle connection of its handshake and listings (~20 kB and a socket) beside the lane's
    until it closes. Public API only: two transports built as ``httpx2.AsyncClient`` builds its own."""

    def __init__(self, limits: httpx2.Limits) -> None:
        self.limits = limits
        self.posts = self._transport()
        self.gets = self._transport()
        self.busy = 0
        """Responses of :attr:`posts` not yet closed."""
        self.used = False
        """Whether :attr:`posts` carried a request since it was made."""

    def _transport(self) -> httpx2.AsyncHTTPTransport:
        return httpx2.AsyncHTTPTransport(verify=shared_ssl_context(), limits=self.limits)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return await self.gets.handle_async_request(request)
        self.busy += 1
        self.used = True
        try:
            response = await self.posts.handle_async_request(request)
        except BaseException:
            self.busy -= 1
            raise
        return httpx2.Response(response.status_code, headers=response.headers, stream=_Counted(self, response.stream),
                               extensions=response.extensions)

    async def release_idle(self) -> bool:
        """Close the connections of :attr:`posts` (all idle) and start a new one; ``False`` when a request is open."""
        if self.busy:
            return False
        if self.used:
            old, self.posts, self.used = self.posts, self._transport(), False
            with anyio.CancelScope(shield=True):
                await old.aclose()
        return True

    async def aclose(self) -> None:
        try:
            await self.posts.aclose()
        finally:
            await self.gets.aclose()


class _Counted(httpx2.AsyncByteStream):
    """A response body of :attr:`LanePools.posts`, counted open until closed."""

    def __init__(self, pools: LanePools, stream: Any) -> None:
        self.pools, self.stream, self.open = pools, stream, True

    async def __aiter__(self) -> Any:
        async for chunk in self.stream:
            yield chunk

    async def aclose(self) -> None:
        if self.open:
            self.open = False
            self.pools.busy -= 1
        await self.stream.aclose()


class _SessionClient(httpx2.AsyncClient):
    """``httpx2.AsyncClient`` whose requests take a slot of their server's ``max_in_flight`` until the response
    headers arrive and, with ``answer_errors``, retry a connect timeout while the read timeout lasts, answer the
    JSON-RPC request with ``-32001`` on another timeout before the headers and with :data:`CONNECTION_LOST` when the
    connection breaks under it (module docstring)."""

    def __init__(self, *args: Any, max_in_flight: int | None = None, answer_errors: bool = True,
                 follow_keepalive: bool = True, max_message_bytes: int | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.max_in_flight = max_in_flight
        self.answer_errors = answer_errors
        self.follow_keepalive = follow_keepalive
        self.max_message_bytes = max_message_bytes
        self.keepalive_header: str | None = None
        """The last ``Keep-Alive`` header of the server's responses (``None``: none seen)."""
        self.session_id: str | None = None
        """The ``Mcp-Session-Id`` the SDK's last POST carried (``None``: none; the HTTP fast lane sends it too)."""
        self.posts = 0
        """POSTs the SDK's path sent (the HTTP fast lane notes when the SDK's own traffic happened)."""
        self.pools: LanePools | None = None
        """The session's transport when its calls move to the HTTP fast lane (:func:`session_http_client`)."""
        self._reading: dict[Any, _Reading] = {}
        """Answers whose body is being read, by request id (a session's ids are unique)."""

    def _follow_keepalive(self, response: httpx2.Response) -> None:
        """Note the ``Keep-Alive`` header of a response (:attr:`keepalive_header`): the HTTP fast lane keeps its idle
        connections as it asks (:func:`keepalive_for`). This client's own pool keeps them :data:`KEEPALIVE_EXPIRY`
        seconds (``httpx2.Limits``: httpx2 has no public way to change it later)."""
        header = response.headers.get("keep-alive")
        if header is not None and header != self.keepalive_header:
            self.keepalive_header = header

    async def release_idle(self) -> bool:
        """Close this client's idle connections for requests (its SSE streams stay) when its transport is a
        :class:`LanePools`; ``False`` when it is not, or a request is open."""
        return await self.pools.release_idle() if self.pools is not None else False

    async def send(self, request: httpx2.Request, **kw: Any) -> httpx2.Response:
        if request.method == "POST":
            self.session_id = request.headers.get("mcp-session-id")
            self.posts += 1
        if self._reading and request.method == "POST":
            rid = _cancelled_id(request)
            if rid is not None and rid in self._reading:
                self._reading[rid].abort()  # the caller stopped waiting: drop the body still being read
        timeouts = request.extensions.get("timeout") or {}
        sem = None
        # Only requests take a slot: a response to the server's own request (sampling, elicitation) must never wait
        # behind requests whose answers wait for it.
        if self.max_in_flight is not None and _is_request(request):
            url = request.url
            sem = request_slots(f"{url.scheme}://{url.host}:{url.port}", self.max_in_flight)
            wait = timeouts.get("read")
            try:
                with anyio.fail_after(wait):
                    await sem.acquire()
            except TimeoutError:
                answer = _timeout_answer(request, f"waiting for one of {self.max_in_flight} request slots", wait) \
                    if self.answer_errors else None
                if answer is None:
                    raise httpx2.PoolTimeout(f"no request slot within {wait:g} s", request=request) from None
                return answer
        try:
            try:
                response = await self._send(request, timeouts, **kw)
            finally:
                if sem is not None:
                    sem.release()  # at the answer's headers (or a failure): its body flows without a slot
            if self.follow_keepalive:
                self._follow_keepalive(response)
            if kw.get("stream") and self.answer_errors and self.max_message_bytes is not None:
                response = await self._bounded(request, response)
            if kw.get("stream") and response.headers.get("content-type", "").lower().startswith("text/event-stream"):
                return httpx2.Response(response.status_code, headers=_without_encoding(response.headers),
                                       stream=_SpecRetry(response), request=request, extensions=response.extensions)
            return response
        except httpx2.TimeoutException as e:
            if not self.answer_errors:
                raise
            which = next((w for cls, w in _WHICH.items() if isinstance(e, cls)), "timeout")
            answer = _timeout_answer(request, f"{which} timeout", timeouts.get(which))
            if answer is None:
                raise
            return answer
        except (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError) as e:
            # The connection was open and broke under this request (a ConnectError, raised before anything was
            # sent, still ends the session: nothing listens there).
            answer = _connection_answer(request, e) if self.answer_errors else None
            if answer is None:
                raise
            return answer

    async def _bounded(self, request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
        """``response`` (streamed, to a JSON-RPC request) with its body bounded by :attr:`max_message_bytes` and by
        the caller's wait (module docstring): a JSON body or a redirect's is read here, an SSE body is passed on one
        bounded event at a time; other bodies are not read by the SDK and stay as they are."""
        rid = _request_id(request) if _is_request(request) else None
        if rid is None:
            return response
        limit = int(self.max_message_bytes or 0)
        kind = response.headers.get("content-type", "").lower()
        if kind.startswith("text/event-stream") and response.status_code < 300:
            return httpx2.Response(response.status_code, headers=_without_encoding(response.headers),
                                   stream=_BoundedEvents(self, response, rid, limit), request=request,
                                   extensions=response.extensions)
        if not (kind.startswith("application/json") or 300 <= response.status_code < 400):
            return response
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            await _close(response)
            return _error_response(request, rid, 502, MESSAGE_TOO_LARGE, too_large_message(
                limit, f"an answer of {int(length):,} bytes (its Content-Length)"), {"max_message_bytes": limit})
        reading = self._reading.setdefault(rid, _Reading())
        chunks: list[bytes] = []
        size = 0
        try:
            with anyio.CancelScope() as reading.scope:
                if reading.aborted:
                    reading.scope.cancel()
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        break
                    chunks.append(chunk)
        finally:
            if self._reading.get(rid) is reading:
                del self._reading[rid]
            if not response.is_closed:
                await _close(response)
        if reading.aborted:
            return _error_response(request, rid, 504, -32001, "the caller stopped waiting; the answer was dropped",
                                   {HTTP_TIMEOUT_DATA_KEY: "abandoned"})  # no one waits for it: the SDK drops it
        if size > limit:
            return _error_response(request, rid, 502, MESSAGE_TOO_LARGE, too_large_message(limit, "the answer"),
                                   {"max_message_bytes": limit})
        return httpx2.Response(response.status_code, headers=_without_encoding(response.headers),
                               content=b"".join(chunks), request=request, extensions=response.extensions)

    async def _send(self, request: httpx2.Request, timeouts: dict[str, Any], **kw: Any) -> httpx2.Response:
        """Send; a connect timeout is retried while the read timeout lasts. Nothing was sent then (the server did not
        accept the connection in time: past its listen backlog the kernel drops connection attempts), so trying again
        is safe, and thousands of sessions reconnecting at once get through as the server catches up."""
        read = timeouts.get("read")
        deadline = None if read is None or not self.answer_errors else anyio.current_time() + read
        while True:
            try:
                return await super().send(request, **kw)
            except httpx2.ConnectTimeout:
                if deadline is None or anyio.current_time() >= deadline:
                    raise


def session_http_client(
    headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None,
    *, max_in_flight: int | None = MAX_IN_FLIGHT, answer_errors: bool = True, max_message_bytes: int | None = None,
    lane_pools: bool = False, **kw: Any,
) -> _SessionClient:
    """What the SDK's ``create_mcp_http_client`` makes (its timeouts: 30 s, 300 s to read a stream), on the shared
    TLS context, with ``max_in_flight`` requests per server at most (``None``: no bound), idle connections kept
    :data:`KEEPALIVE_EXPIRY` seconds or as the server's ``Keep-Alive`` header asks (:func:`keepalive_for`; not with
    your own ``limits=``) and, with ``answer_errors`` (Streamable HTTP), HTTP timeouts and connections
    broken under a request that fail only that request and answers bounded by ``max_message_bytes`` and the caller's
    wait (``None``: not bounded; module docstring). With ``lane_pools`` (a session whose calls move to the HTTP fast
    lane) and no proxy in the environment, its transport is a :class:`LanePools`. Extra keywords go to
    ``httpx2.AsyncClient``."""
    limits = kw.pop("limits", None)
    if timeout is None:
        timeout = httpx2.Timeout(DEFAULT_TIMEOUT, read=DEFAULT_SSE_READ_TIMEOUT)
    pools = None
    if lane_pools and limits is None and not kw and not proxy_in_environment():
        pools = LanePools(httpx2.Limits(keepalive_expiry=KEEPALIVE_EXPIRY))
        kw["transport"] = pools  # (a transport= turns off httpx2's proxies from the environment: there are none)
    client = _SessionClient(
        headers=headers, auth=auth, verify=shared_ssl_context(), max_in_flight=max_in_flight,
        answer_errors=answer_errors, follow_keepalive=limits is None, max_message_bytes=max_message_bytes,
        limits=limits or httpx2.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
        timeout=timeout,
        **kw,
    )
    client.pools = pools
    return client
