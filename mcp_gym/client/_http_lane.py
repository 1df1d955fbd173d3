"""The fast lane for ``tools/call`` and ``resources/read`` over Streamable HTTP (the transport that carries it:
:mod:`mcp_gym.client._http_transport`).

Through the SDK (mcp 2.3) one request over Streamable HTTP costs a pydantic request built and dumped, a stream pair,
a hop through the transport's writer task and a task per POST, an ``httpx2`` request (one ``httpx2`` POST alone costs
5-6x a hand-written keep-alive client's CPU: ``scripts/bench/wire.py``), an SSE decoder and two validations of the
result. On the lane (:class:`HttpWire`, with :mod:`mcp_gym._compat.mcp_wire` doing the SDK's part) the calling task
encodes the request once (``orjson``), POSTs it on a keep-alive ``aiohttp`` connection (one client and pool per server
on the loop, shared by its sessions), reads the answer from the response body (a JSON body, or SSE events decoded
here, each decoded once) and returns it: no stream objects, no task hop. The SDK's own client keeps the session's
other traffic; its idle connection is closed at the next lane call. ``aiohttp`` was chosen by
measurement: its POST costs ~1.8x the hand-written floor's CPU against ``httpx2``'s ~5.7x, it is maintained, has a C
HTTP parser and hands an idle pooled connection to a request in O(1) (httpcore scans its pool per request).

Kept from :mod:`mcp_gym.client._http`, on the lane too: at most ``max_in_flight`` requests per server wait for their
answer's headers (the same slots as the SDK's path); a connect timeout is tried again while the read timeout lasts;
another HTTP timeout before the answer fails that request with ``-32001`` (``data``: which one) and a connection broken
under it with :data:`~mcp_gym.client._http.CONNECTION_LOST`, the session staying open; a refused connection ends the
session (``Connection closed``, as on the SDK's path); bodies are bounded (``max_message_bytes`` for a JSON answer, and
per SSE event), past it the request gets :data:`~mcp_gym.client._stdio.MESSAGE_TOO_LARGE` and the connection is
dropped; idle connections are kept as the server's ``Keep-Alive`` header says (:func:`~mcp_gym.client._http.
keepalive_for`), and what is left of an SSE answer after its answer event is read (bounded) so that the connection is
kept. The session id and protocol headers are the SDK's: the SDK's last POST gives the ``Mcp-Session-Id``; HTTP error
statuses are answered as the SDK answers them. Each request is stamped as the session stamps its own (:meth:`HttpWire.
stamp`, public API only): the negotiated version's ``MCP-Protocol-Version`` header; on a 2026-07-28 session also the era
``_meta`` the session stamped on its own last request (as its transport's write stream saw it) and the per-message
headers (``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*`` of the tool's ``x-mcp-header`` annotations in the listing
mcp-gym handed to the session), made with the SDK's public ``mcp.shared.inbound`` functions.

The lane steps aside, without losing anything: a message in an SSE answer that is not the request's plain answer (a
progress or other notification, a server request such as sampling or elicitation, an answer to another request) is
handed to the SDK's session as its transport would hand it (into the session's own read stream); an SSE answer
that ends early with an event id is resumed with a ``GET`` and ``Last-Event-ID`` as the SDK does; a redirect (nothing
ran) sends that call and the later ones the SDK's way. A session with ``auth=`` (an ``httpx2.Auth`` flow), cookies or
a proxy from the environment never takes the lane.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio
import anyio.lowlevel
import mcp.types as mt
import orjson
from anyio.lowlevel import RunVar
from mcp import MCPError
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    x_mcp_header_map,
)
from mcp.shared.message import SessionMessage
from mcp_types import LOG_LEVEL_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_gym._compat.mcp_wire import CONNECTION_CLOSED, REQUEST_TIMEOUT, STAMP_KEYS, LaneIds, StepAside, answer_of
from mcp_gym.client import _http
from mcp_gym.client._http import (
    CONNECTION_LOST,
    HTTP_CONNECTION_DATA_KEY,
    HTTP_TIMEOUT_DATA_KEY,
    connection_message,
    keepalive_for,
    request_slots,
    server_error,
    shared_ssl_context,
    timeout_message,
    too_large_message,
)
from mcp_gym.client._stdio import MESSAGE_TOO_LARGE
from mcp_gym.client.specs import Http

__all__ = ["HttpWire"]

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INTERNAL_ERROR = -32700, -32600, -32601, -32603
DRAIN_SECONDS = 0.5
DRAIN_BYTES = 64 * 1024
"""How long and how much of an SSE answer is read after its answer event, to keep its connection."""
RESUME_ATTEMPTS = 2
"""``GET`` resumptions of an SSE answer that ended early (the SDK's ``MAX_RECONNECTION_ATTEMPTS``)."""
_CLIENTS: RunVar[dict[tuple[Any, ...], list[Any]]] = RunVar("mcp_gym_http_lane_clients")
"""The lane's ``aiohttp`` clients on the running event loop, one per server and settings, shared by its sessions
(with how many use each): a client and its pool cost ~5 kB, a connection ~7.5 kB; the pool hands an idle connection
to the next request in O(1)."""




class _Answer(Exception):
    """Ends reading a response with this answer (a JSON-RPC response or error, as a dict)."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer


def _error(rid: int, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


class HttpWire(LaneIds):
    """One Streamable HTTP session's fast lane (:class:`mcp_gym._compat.mcp_wire.Lane`): made with the connection,
    given the SDK-side HTTP client and a way into the session's read stream by :func:`streamable_http` once the
    transport runs."""

    def __init__(self, spec: Http, on_refusal: Callable[[int | None, str, str], None] | None = None) -> None:
        super().__init__()
        self.url = spec.url
        self.spec = spec
        url = urlsplit(spec.url)
        default = 443 if url.scheme == "https" else 80
        self.origin = f"{url.scheme}://{url.netloc.rsplit('@', 1)[-1]}"
        """``scheme://host[:port]`` (in error messages, as on the SDK's path)."""
        self.slot_key = f"{url.scheme}://{url.hostname}:{None if url.port in (None, default) else url.port}"
        """The key of the server's request slots (:func:`~mcp_gym.client._http.request_slots`, shared with the SDK's
        path)."""
        self.on_refusal = on_refusal
        self.limit = int(spec.max_message_bytes)
        self.sent: set[int] = set()
        self.http: Any = None
        """The session's ``httpx2`` client (the SDK's path): its last session id and ``Keep-Alive`` header."""
        self.inject: Callable[[SessionMessage], Any] | None = None
        """Hands a message to the SDK's session (set by :func:`streamable_http`)."""
        self.off: str | None = None if spec.auth is None else "auth= is set (its flow runs on httpx2)"
        """Why this session does not take the lane (``None``: it does)."""
        self.closed = False
        self.calls = 0
        """Requests answered on the lane."""
        self.handed = 0
        """Messages of lane responses handed to the SDK (notifications, server requests, other answers)."""
        self.release: Callable[[], bool] | None = None
        """Sends the session's reader a message it drops, if it waits for one (``False``: it does not)."""
        self._released = 0
        self.stamped: dict[str, Any] | None = None
        """The era ``_meta`` of the SDK session's last request (:meth:`observe`; 2026-07-28); ``None`` before one."""
        self._handshake_end: int | None = None  # the SDK's POSTs when its session wrote its first post-handshake
        # message (notifications/initialized; 2026-07-28: a request): until it POSTed that, the lane steps aside
        self.param_maps: dict[str, dict[tuple[str, ...], str]] = {}
        """Each listed tool's ``x-mcp-header`` annotations (argument path -> header token), as the session keeps them
        from the listing it was handed (:meth:`listed`)."""
        self._client: aiohttp.ClientSession | None = None
        self._key: tuple[Any, ...] | None = None
        self._slots: Any = None

    # -- the Lane interface -------------------------------------------------------------------------------------------
    def open(self) -> bool:
        """Whether the lane can send (the transport runs, nothing made it step aside for good)."""
        return self.inject is not None and self.off is None and not self.closed

    def observe(self, message: Any) -> None:
        """Note the era ``_meta`` of a request the SDK's session writes (its transport's write stream calls this), as
        the stdio lane's :meth:`~mcp_gym._compat.mcp_wire.Wire.observe` does."""
        handshake = isinstance(message, mt.JSONRPCRequest) and message.method in ("initialize", "server/discover")
        if self._handshake_end is None and not handshake:
            self._handshake_end = self.http.posts
        if isinstance(message, mt.JSONRPCRequest) and not handshake:
            meta = (message.params or {}).get("_meta")
            if isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta:
                self.stamped = {k: meta[k] for k in STAMP_KEYS if k in meta}

    def listed(self, tools: list[mt.Tool], version: str | None) -> None:
        """The tools of a complete listing handed to the session: on a 2026-07-28 session their ``x-mcp-header``
        annotations become the ``Mcp-Param-*`` headers of their calls (tools with an invalid one are dropped by the
        session, and get none here either); on older ones no tool has any (as in the session)."""
        modern = version in MODERN_PROTOCOL_VERSIONS
        self.param_maps = {t.name: x_mcp_header_map(t.input_schema) for t in tools
                           if modern and find_invalid_x_mcp_header(t.input_schema) is None}

    def stamp(self, client: Any, data: dict[str, Any], opts: dict[str, Any]) -> None:
        """Stamp a request as the SDK's session stamps its own: the negotiated version's ``MCP-Protocol-Version``
        header; on a 2026-07-28 session also the era ``_meta`` the session stamped on its last request (constant),
        ``Mcp-Method``, ``Mcp-Name`` and the tool's ``Mcp-Param-*`` headers. Before the SDK POSTed its session's
        first message after the handshake (it then carries the session id) the call takes the SDK's way."""
        if self._handshake_end is None or self.http.posts <= self._handshake_end:
            raise StepAside("the SDK's session has not sent the end of its handshake yet")
        version = client.session.protocol_version
        headers = {MCP_PROTOCOL_VERSION_HEADER: version}
        opts["headers"] = headers
        if version not in MODERN_PROTOCOL_VERSIONS:
            return
        stamped = self.stamped
        if stamped is None:
            raise StepAside("no request of the SDK's session to take the stamp from yet")
        method = data["method"]
        params = data.setdefault("params", {})
        meta = params.setdefault("_meta", {})
        for key, value in stamped.items():
            if key == LOG_LEVEL_META_KEY:
                meta.setdefault(key, value)  # the caller's own level wins, as with the SDK's stamp
            else:
                meta[key] = value
        headers[MCP_METHOD_HEADER] = method
        name_key = NAME_BEARING_METHODS.get(method)
        if name_key is not None and isinstance(name := params.get(name_key), str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        if method == "tools/call" and isinstance(name := params.get("name"), str) and \
                (header_map := self.param_maps.get(name)):
            headers.update(mcp_param_headers(header_map, params.get("arguments") or {}))

    async def exchange(self, rid: int, body: bytes, headers: dict[str, str], timeout: float | None,
                       method: str) -> dict[str, Any]:
        """POST request ``rid`` and return its answer (:class:`mcp_gym._compat.mcp_wire.Lane`)."""
        client = self._client or self._start()
        if client is None:
            raise StepAside(self.off)
        sent = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if self.spec.headers:
            sent.update(self.spec.headers)
        sid = self.http.session_id
        if sid:
            sent["mcp-session-id"] = sid
        sent.update(headers)
        if self.http.posts != self._released:  # the SDK's own traffic since the last lane call: let go of its leftovers
            await self.http.release_idle()  # its idle connection (the lane has its own)
            if self.release is not None and self.release():
                self._released = self.http.posts
        if timeout is None:
            return await self._post(client, rid, body, sent)
        with anyio.fail_after(timeout):
            return await self._post(client, rid, body, sent)

    # -- the HTTP client ----------------------------------------------------------------------------------------------
    def _start(self) -> aiohttp.ClientSession | None:
        """The session's ``aiohttp`` client, made at the first call (after the handshake: the server's
        ``Keep-Alive`` header is known); ``None`` when this session cannot take the lane (``off`` says why)."""
        if self.off is not None:
            return None
        if self.http is None or getattr(self.http, "cookies", None):
            self.off = "the server set cookies (kept by httpx2)"
            return None
        if _http.proxy_in_environment():
            self.off = "a proxy is set in the environment (httpx2 applies it)"
            return None
        keep = keepalive_for(self.http.keepalive_header) or _http.KEEPALIVE_EXPIRY  # (read now: tests shorten it)
        tls = shared_ssl_context() if self.url.startswith("https:") else False
        key = (self.slot_key, keep, tls is not False, self.spec.http_timeout, self.spec.read_timeout)
        table = _CLIENTS.get(None)
        if table is None:
            table = {}
            _CLIENTS.set(table)
        shared = table.get(key)
        if shared is None or shared[0].closed:
            connector = aiohttp.TCPConnector(limit=0, ssl=tls, keepalive_timeout=keep)
            shared = table[key] = [aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.spec.http_timeout,
                                              sock_read=self.spec.read_timeout)), 0]
        shared[1] += 1
        self._client, self._key = shared[0], key
        if self.spec.max_in_flight is not None:
            self._slots = request_slots(self.slot_key, self.spec.max_in_flight)
        return self._client

    async def close(self) -> None:
        """The session is over: the shared client is closed with the last session using it."""
        self.closed = True
        if self._client is None:
            return
        client, self._client = self._client, None
        table = _CLIENTS.get(None) or {}
        shared = table.get(self._key) if self._key is not None else None
        if shared is not None and shared[0] is client and self._key is not None:
            shared[1] -= 1
            if shared[1] > 0:
                return
            del table[self._key]
        with anyio.CancelScope(shield=True):
            await client.close()

    async def _send(self, client: aiohttp.ClientSession, rid: int, body: bytes,
                    headers: dict[str, str]) -> aiohttp.ClientResponse:
        """POST; a connect timeout is tried again while the read timeout lasts (nothing was sent)."""
        read = self.spec.read_timeout
        deadline = None if read is None else anyio.current_time() + read
        while True:
            try:
                return await client.post(self.url, data=body, headers=headers, allow_redirects=False)
            except aiohttp.ConnectionTimeoutError:
                if deadline is None or anyio.current_time() >= deadline:
                    raise

    async def _post(self, client: aiohttp.ClientSession, rid: int, body: bytes,
                    headers: dict[str, str]) -> dict[str, Any]:
        """Send request ``rid``; its answer, or an error answer for what went wrong on the way (module docstring)."""
        sem = self._slots
        if sem is not None:
            wait = self.spec.read_timeout
            try:
                with anyio.fail_after(wait):
                    await sem.acquire()
            except TimeoutError:
                what = f"waiting for one of {self.spec.max_in_flight} request slots"
                return _error(rid, REQUEST_TIMEOUT, timeout_message(self.origin, what, wait),
                              {HTTP_TIMEOUT_DATA_KEY: what})
        self.sent.add(rid)
        response = None
        try:
            try:
                response = await self._send(client, rid, body, headers)
            finally:
                if sem is not None:
                    sem.release()  # at the answer's headers (or a failure): its body flows without a slot
            handed = self.handed
            try:
                answer = await self._answer(client, rid, response)
            except _Answer as a:
                answer = a.answer
            self.calls += 1
            if self.handed > handed:
                await self._settle()
            return answer
        except aiohttp.ClientConnectorError as e:  # nothing listens there: the server is gone (as the SDK's path)
            raise MCPError(code=CONNECTION_CLOSED, message=f"Connection closed: {e}") from None
        except aiohttp.ServerTimeoutError as e:
            which = "connect timeout" if isinstance(e, aiohttp.ConnectionTimeoutError) else "read timeout"
            seconds = self.spec.http_timeout if which == "connect timeout" else self.spec.read_timeout
            return _error(rid, REQUEST_TIMEOUT, timeout_message(self.origin, which, seconds),
                          {HTTP_TIMEOUT_DATA_KEY: which})
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as e:
            message, what = connection_message(self.origin, e)
            return _error(rid, CONNECTION_LOST, message, {HTTP_CONNECTION_DATA_KEY: what})
        finally:
            self.sent.discard(rid)
            if response is not None and not response.closed:
                response.close()  # not wholly read (an error, a bound, the caller stopped waiting): drop it

    # -- answers ------------------------------------------------------------------------------------------------------
    async def _answer(self, client: aiohttp.ClientSession, rid: int, response: aiohttp.ClientResponse
                      ) -> dict[str, Any]:
        status = response.status
        kind = response.headers.get("Content-Type", "").lower()
        if status == 202:
            response.release()
            return _error(rid, INVALID_REQUEST, "server answered a request with 202 Accepted")
        if 300 <= status < 400:
            response.release()
            self.off = f"the server redirected a POST (HTTP {status})"
            raise StepAside(self.off)  # nothing ran: the SDK's path follows (or refuses) the redirect
        if status >= 400:
            return await self._refusal(rid, response, kind)
        if kind.startswith("application/json"):
            return self._json_answer(rid, await self._body(rid, response))
        if kind.startswith("text/event-stream"):
            last_id, retry = await self._events(rid, response)  # raises _Answer with the answer
            return await self._resume(client, rid, last_id, retry)
        response.release()
        return _error(rid, INVALID_REQUEST, f"Unexpected content type: {kind}")

    async def _refusal(self, rid: int, response: aiohttp.ClientResponse, kind: str) -> dict[str, Any]:
        """An HTTP error status, answered as the SDK's transport answers it."""
        if self.on_refusal is not None:
            self.on_refusal(response.status, response.reason or "", self.url)
        if kind.startswith("application/json"):
            error = None
            with contextlib.suppress(_Answer):  # an answer too large: not read
                error = server_error(await self._body(rid, response))
            if error is not None:
                return _error(rid, *error)
        if response.status == 404:
            if self.http.session_id is None:
                return _error(rid, METHOD_NOT_FOUND, "Not Found")
            return _error(rid, INVALID_REQUEST, "Session terminated")
        return _error(rid, INTERNAL_ERROR, "Server returned an error response")

    async def _body(self, rid: int, response: aiohttp.ClientResponse) -> bytes:
        """A JSON body, read as it arrives and at most ``max_message_bytes`` (raises :class:`_Answer` past it)."""
        length = response.content_length
        if length is not None and length > self.limit:
            raise _Answer(self._too_large(rid, f"an answer of {length:,} bytes (its Content-Length)"))
        chunks, size = [], 0
        content = response.content
        while chunk := await content.readany():
            size += len(chunk)
            if size > self.limit:
                raise _Answer(self._too_large(rid, "the answer"))
            chunks.append(chunk)
        response.release()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _too_large(self, rid: int, what: str) -> dict[str, Any]:
        return _error(rid, MESSAGE_TOO_LARGE, too_large_message(self.limit, what), {"max_message_bytes": self.limit})

    def _json_answer(self, rid: int, body: bytes) -> dict[str, Any]:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            return _error(rid, PARSE_ERROR, f"Failed to parse JSON response: {e}")
        if answer_of(obj, {rid: None}) is not None:
            return obj
        return _error(rid, PARSE_ERROR, "Failed to parse JSON response: not the answer to this request")

    async def _events(self, rid: int, response: aiohttp.ClientResponse) -> tuple[str | None, int | None]:
        """Read an SSE answer; raises :class:`_Answer` with the request's answer. Other messages go to the SDK.
        Returns the last event id and retry interval when the stream ends without the answer."""
        pending = bytearray()
        last_id: str | None = None
        retry: int | None = None
        content = response.content
        while True:
            chunk = await content.readany()
            if not chunk:
                response.release()
                return last_id, retry
            start = max(0, len(pending) - 3)
            pending += chunk
            end = _events_end(pending, start)
            if end:
                block = bytes(pending[:end])
                del pending[:end]
                for event in _split_events(block):
                    fields = _fields(event)
                    if "id" in fields:
                        last_id = fields["id"]
                    if _http.sse_retry_ok(fields.get("retry", "")):  # the spec's digits, bounded; else ignored
                        retry = int(fields["retry"])
                    data = fields.get("data")
                    if fields.get("event", "message") != "message" or not data:
                        continue  # a priming event (an id, no data) or another kind: the SDK skips it too
                    answer = await self._message(rid, data)
                    if answer is not None:
                        await self._drain(response)
                        raise _Answer(answer)
            if len(pending) > self.limit:
                raise _Answer(self._too_large(rid, "an event of the streamed answer"))

    async def _message(self, rid: int, data: str) -> dict[str, Any] | None:
        """One SSE message: the request's answer (returned) or anything else (handed to the SDK's session)."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if obj is not None and answer_of(obj, {rid: None}) is not None:
            return obj
        try:
            message = mt.jsonrpc_message_adapter.validate_json(data, by_name=False)
        except ValueError as e:
            return _error(rid, PARSE_ERROR, f"Failed to parse SSE message: {e}")
        if isinstance(message, (mt.JSONRPCResponse, mt.JSONRPCError)) and message.id in (rid, str(rid)):
            return message.model_dump(by_alias=True, mode="json", exclude_unset=True)
        if isinstance(message, mt.JSONRPCNotification) and (call := self.progress_of(message.method,
                                                                                      message.params)) is not None:
            await call  # a lane request's progress: its callback, here (the answer waits for it, as it comes after)
        self.handed += 1
        assert self.inject is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.inject(SessionMessage(message))
        return None

    async def _settle(self) -> None:
        """Let the SDK's session handle what this answer's stream handed it before the answer returns (as on the SDK's
        path, where they come through one stream in order): e.g. progress is routed only while the request is
        pending. The session's reader has taken them (the stream holds none); it routes them, then their handlers
        run: a loop turn each."""
        for _ in range(3):
            await anyio.lowlevel.checkpoint()

    async def _drain(self, response: aiohttp.ClientResponse) -> None:
        """Read what is left of an SSE answer after its answer event, if it ends soon and small: then the connection
        is kept (a response closed unread drops it)."""
        content = response.content
        if not content.at_eof():
            size = 0
            with anyio.move_on_after(DRAIN_SECONDS):
                with contextlib.suppress(aiohttp.ClientError):
                    while size <= DRAIN_BYTES and (chunk := await content.readany()):
                        size += len(chunk)
        if content.at_eof():
            response.release()

    async def _resume(self, client: aiohttp.ClientSession, rid: int, last_id: str | None,
                      retry: int | None) -> dict[str, Any]:
        """An SSE answer ended without the answer: resumed with ``GET`` + ``Last-Event-ID`` when it had event ids
        (at most :data:`RESUME_ATTEMPTS` failures in a row, waiting as the server's ``retry`` says), else the SDK's
        error for it."""
        failures = 0
        while last_id is not None and failures < RESUME_ATTEMPTS:
            await anyio.sleep((retry if retry is not None else 1000) / 1000)
            headers = {"accept": "text/event-stream", "cache-control": "no-store", "last-event-id": last_id}
            if self.spec.headers:
                headers = {**self.spec.headers, **headers}
            if self.http.session_id:
                headers["mcp-session-id"] = self.http.session_id
            try:
                async with client.get(self.url, headers=headers, allow_redirects=False) as response:
                    kind = response.headers.get("Content-Type", "").lower()
                    if response.status >= 300 or not kind.startswith("text/event-stream"):
                        failures += 1
                        continue
                    new_id, new_retry = await self._events(rid, response)  # raises _Answer with the answer
                    failures = 0 if new_id != last_id else failures + 1
                    last_id, retry = new_id or last_id, new_retry if new_retry is not None else retry
            except (aiohttp.ClientError, TimeoutError):
                failures += 1
        if last_id is not None:
            return _error(rid, CONNECTION_CLOSED, "SSE stream ended and reconnection attempts were exhausted")
        return _error(rid, CONNECTION_CLOSED, "SSE stream ended without a response")


_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r\n")  # a blank line ends an SSE event


def _events_end(pending: bytearray, start: int) -> int:
    """The end of the last complete event in ``pending`` (0: none), looking from ``start``."""
    return max((i + len(m) for m in _EVENT_ENDS if (i := pending.rfind(m, start)) >= 0), default=0)


def _split_events(block: bytes) -> list[list[str]]:
    """Complete SSE events (their lines) in ``block``."""
    text = block.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    return [e.split("\n") for e in text.split("\n\n") if e]


def _fields(lines: list[str]) -> dict[str, str]:
    """An SSE event's fields (``data`` lines joined by newlines; comments skipped), as the SSE spec reads them."""
    out: dict[str, str] = {}
    data: list[str] = []
    for line in lines:
        if not line or line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name in ("event", "retry") or (name == "id" and "\0" not in value):
            out[name] = value
    if data:
        out["data"] = "\n".join(data)
    return out
