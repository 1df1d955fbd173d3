"""HTTP clients for Streamable HTTP / SSE sessions: one TLS context per process, a bound on the requests in flight
to one server, and HTTP timeouts that fail one request instead of the whole session.

The SDK gives each session its own ``httpx2.AsyncClient``, and each builds its own TLS context (loading the CA
bundle): about 27 ms of CPU and 0.8 MB of memory per session on a 2-core machine, which was most of what a session
cost at 1,000+ concurrent episodes (``scripts/bench/scale.py``). Here every session still gets its own client and
connection pool (its own headers, auth, hooks, cookies and proxies from the environment, exactly as before) built on
one shared ``ssl.SSLContext``: about 0.1 ms and 3 kB per session. One pool for all sessions was measured and
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
  ``Keep-Alive: timeout=T`` (the bundled servers send ``timeout=30``, Node's HTTP server ``timeout=5``) sets the
  session's idle expiry to :func:`keepalive_for` ``T``: half of it (at most 60 s; below 6 s, at most the 2 s
  default). Under load a session's next request often comes seconds after its last; with 1,000 concurrent sessions
  against one bundled server, keeping the connection instead of opening a new one per step made steps 1.3x as fast
  (``scripts/bench/scale.py``). Sessions given their own ``limits=`` keep them.
"""

from __future__ import annotations

import json
import math
import ssl
import threading
from typing import Any

import anyio
import httpx2
from anyio.lowlevel import RunVar
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

__all__ = ["session_http_client", "shared_ssl_context", "HTTP_TIMEOUT_DATA_KEY", "HTTP_CONNECTION_DATA_KEY",
           "CONNECTION_LOST", "KEEPALIVE_EXPIRY", "KEEPALIVE_MAX", "MAX_IN_FLIGHT", "keepalive_for"]

_ctx: ssl.SSLContext | None = None
_lock = threading.Lock()

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


def shared_ssl_context() -> ssl.SSLContext:
    """The process's TLS context for MCP sessions (httpx2's default: certifi or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
    as set when the first session starts), made once."""
    global _ctx
    with _lock:
        if _ctx is None:
            _ctx = httpx2.create_ssl_context(trust_env=True)
        return _ctx


def _slots(origin: str, limit: int) -> anyio.Semaphore:
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
    if rid is None:
        return None
    body = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}}
    return httpx2.Response(status, headers={"content-type": "application/json"}, content=json.dumps(body).encode(),
                           request=request)


def _timeout_answer(request: httpx2.Request, which: str, seconds: float | None) -> httpx2.Response | None:
    """A JSON-RPC ``-32001`` error answering ``request``, or ``None`` when it is not a JSON-RPC request."""
    within = f" within {seconds:g} s" if seconds is not None else ""
    message = (f"no answer from {_origin(request)}{within} ({which}): the server is busy or unreachable; the session "
               "stays open")
    return _error_answer(request, 504, -32001, message, {HTTP_TIMEOUT_DATA_KEY: which})


def _connection_answer(request: httpx2.Request, error: httpx2.TransportError) -> httpx2.Response | None:
    """A JSON-RPC :data:`CONNECTION_LOST` error answering ``request``, or ``None`` when it is not a JSON-RPC
    request."""
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    message = (f"the connection to {_origin(request)} broke before the answer ({what}); the request may or may not "
               "have run on the server; the session stays open")
    return _error_answer(request, 502, CONNECTION_LOST, message, {HTTP_CONNECTION_DATA_KEY: what})


_WHICH = {httpx2.ConnectTimeout: "connect", httpx2.ReadTimeout: "read", httpx2.WriteTimeout: "write",
          httpx2.PoolTimeout: "pool"}


class _SessionClient(httpx2.AsyncClient):
    """``httpx2.AsyncClient`` whose requests take a slot of their server's ``max_in_flight`` until the response
    headers arrive and, with ``answer_errors``, retry a connect timeout while the read timeout lasts, answer the
    JSON-RPC request with ``-32001`` on another timeout before the headers and with :data:`CONNECTION_LOST` when the
    connection breaks under it (module docstring)."""

    def __init__(self, *args: Any, max_in_flight: int | None = None, answer_errors: bool = True,
                 follow_keepalive: bool = True, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.max_in_flight = max_in_flight
        self.answer_errors = answer_errors
        self.follow_keepalive = follow_keepalive
        self._keepalive_header: str | None = None

    def _follow_keepalive(self, response: httpx2.Response) -> None:
        """Take the idle expiry a response's ``Keep-Alive`` header asks for (:func:`keepalive_for`): for this
        session's pool and the connections it holds (httpcore has no public setter; without these attributes the
        default stays, which is only slower)."""
        header = response.headers.get("keep-alive")
        if header is None or header == self._keepalive_header:
            return
        self._keepalive_header = header
        seconds = keepalive_for(header)
        pool = getattr(self._transport, "_pool", None)
        if seconds is None or not hasattr(pool, "_keepalive_expiry"):
            return
        pool._keepalive_expiry = seconds
        for conn in getattr(pool, "_connections", ()):
            for c in (conn, getattr(conn, "_connection", None)):
                if hasattr(c, "_keepalive_expiry"):
                    c._keepalive_expiry = seconds

    async def send(self, request: httpx2.Request, **kw: Any) -> httpx2.Response:  # type: ignore[override]
        timeouts = request.extensions.get("timeout") or {}
        sem = None
        # Only requests take a slot: a response to the server's own request (sampling, elicitation) must never wait
        # behind requests whose answers wait for it.
        if self.max_in_flight is not None and _is_request(request):
            url = request.url
            sem = _slots(f"{url.scheme}://{url.host}:{url.port}", self.max_in_flight)
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
            response = await self._send(request, timeouts, **kw)
            if self.follow_keepalive:
                self._follow_keepalive(response)
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
        finally:
            if sem is not None:
                sem.release()

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
    *, max_in_flight: int | None = MAX_IN_FLIGHT, answer_errors: bool = True, **kw: Any,
) -> httpx2.AsyncClient:
    """What the SDK's ``create_mcp_http_client`` makes (its timeouts: 30 s, 300 s to read a stream), on the shared
    TLS context, with ``max_in_flight`` requests per server at most (``None``: no bound), idle connections kept
    :data:`KEEPALIVE_EXPIRY` seconds or as the server's ``Keep-Alive`` header asks (:func:`keepalive_for`; not with
    your own ``limits=``) and, with ``answer_errors`` (Streamable HTTP), HTTP timeouts and connections
    broken under a request that fail only that request (module docstring). Extra keywords go to
    ``httpx2.AsyncClient``."""
    limits = kw.pop("limits", None)
    return _SessionClient(
        headers=headers, auth=auth, verify=shared_ssl_context(), max_in_flight=max_in_flight,
        answer_errors=answer_errors, follow_keepalive=limits is None,
        limits=limits or httpx2.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
        timeout=timeout if timeout is not None else
        httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        **kw,
    )
