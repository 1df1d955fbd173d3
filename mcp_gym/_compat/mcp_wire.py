"""The fast lane for ``tools/call``, ``resources/read`` and raw ``tools/list`` over stdio and Streamable HTTP: the
request goes straight onto the wire and its answer straight back to the caller, without the SDK's machinery.

Through the SDK (mcp 2.3) one ``tools/call`` costs a pydantic model built and dumped, a memory-object stream pair per
request, a hop through the transport's writer task and the dispatcher's reader, and a second validation of the raw
result: about 6× the client CPU of a hand-written asyncio JSON-RPC client over the same pipe
(``scripts/bench/wire.py``). Here, on a connection through mcp-gym's stdio transport (:mod:`mcp_gym.client._stdio`):

* the request is one ``orjson`` encode written to the server's stdin by the calling task (one ``write``: lines never
  interleave with the transport's writer task);
* the transport's reader recognises the answer by its id (one ``orjson`` decode) and resolves the caller's future:
  one task hop, no stream objects; a line that is not a plain answer takes the usual path, and any answer the usual
  path makes for a waiting id (an error for an oversized or unreadable answer) resolves the future too;
* what the SDK does around the wire is kept, through its public API: the request id is the lane's own (from
  :data:`LANE_IDS_FROM` up, never one of the session's), the request is stamped as the session stamps its own (the
  era ``_meta`` of the session's last request, as the transport's writer saw it), progress reaches the callback, a
  timeout or a cancelled call sends the courtesy ``notifications/cancelled`` (the session's ``send_notification``),
  the result is checked as the SDK checks it (negotiated-version validation, the ``CallToolResult`` model, the
  output schema with the validator mcp-gym compiled once per definition while checking the listing:
  :func:`~mcp_gym._compat.mcp_output.check_output`), and an input-required or claimed result is finished by the
  SDK's ``Client``.

Over Streamable HTTP the wire is :class:`mcp_gym.client._http_lane.HttpWire` (one POST on a lean keep-alive client,
the answer read from its body); this module only needs an object with the :class:`Lane` interface. ``tools/list``
goes on the lane raw (:func:`list_tools_raw`: mcp-gym checks it tool by tool); everything else (handshake,
notifications, sampling, elicitation, roots, auth, resumption of other requests) stays on the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, cast

import anyio
import mcp.types as mt
import orjson
from mcp import MCPError
from mcp.shared.jsonrpc_dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, LOG_LEVEL_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from mcp_gym._compat import mcp as mcp_compat
from mcp_gym._compat import mcp_surface, tool_results
from mcp_gym._compat.mcp_output import check_output, nothing_to_check
from mcp_gym._compat.mcp_surface import clamp_ttl
from mcp_gym._compat.stdlib import own_task

try:  # what the SDK's tracing runs on (mcp requires it; pyproject names it too): see _inject()
    from opentelemetry import context as _otel_context
    from opentelemetry import propagate as _otel_propagate
    from opentelemetry.propagators.composite import CompositePropagator
except ImportError:  # pragma: no cover - then no trace context is carried (the SDK needs it: never here)
    _otel_context = None  # type: ignore[assignment]  # _inject() then does nothing

__all__ = ["Wire", "Lane", "LaneIds", "StepAside", "request_key", "call_tool", "read_resource", "list_tools_raw",
           "usable", "missing"]

logger = logging.getLogger(__name__)


def missing() -> list[str]:
    """The private names the lane uses: none (it speaks JSON-RPC itself and uses the SDK's public API); an input
    request is finished by :func:`mcp_gym._compat.mcp.drive_input_required`, listed there."""
    return []


def usable(client: Any) -> bool:
    """Whether the lane can serve ``client``: not when it has client extensions (a result they claim is theirs to
    finish), nor before the handshake."""
    return not getattr(client, "extensions", None) and getattr(client.session, "protocol_version", None) is not None

_NESTING = 128
"""Lines with more brackets than this take the usual path (the SDK's parser refuses nesting past its limit; orjson's
is deeper)."""
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001


class StepAside(Exception):
    """Raised by a lane's :meth:`Lane.exchange` when the server's answer is one the lane does not handle and nothing
    ran on the server (e.g. a redirect): the call is made again on the SDK's own path."""


LANE_IDS_FROM = 1 << 30
"""The first request id of a lane: its ids never meet the SDK session's (which count up from 1) on one connection,
and stay below 2**31 for servers that read ids as 32-bit integers."""
ABANDON_WRITE_TIMEOUT = 2.0
"""Seconds the courtesy ``notifications/cancelled`` of a request the caller stopped waiting for may take to send."""
STAMP_KEYS = (PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY)
"""The ``_meta`` keys the SDK stamps on each request of a 2026-07-28 session (constant over the session)."""


class Lane(Protocol):
    """What :func:`call_tool` / :func:`read_resource` need of a wire: stdio's :class:`Wire` or HTTP's ``HttpWire``
    (both :class:`LaneIds`)."""

    sent: set[int]
    """The ids of requests written and not yet answered (a cancelled one gets the courtesy cancel)."""
    progress: dict[int, Callable[[float, float | None, str | None], Awaitable[None]]]
    """The progress callbacks of the lane's requests in flight, by progress token (the request's id)."""

    def open(self) -> bool:
        """Whether requests can be sent (the connection is up)."""

    def next_id(self) -> int:
        """A request id of this lane's own (never one of the SDK session's)."""

    def stamp(self, client: Any, data: dict[str, Any], opts: dict[str, Any]) -> None:
        """Stamp a request (``{"method", "params"}``) as the SDK's session stamps its own: the protocol era's
        ``_meta`` (into ``data``) and per-message headers (into ``opts["headers"]``). Raises :class:`StepAside` when
        it cannot (nothing was sent)."""

    def exchange(self, rid: int, body: bytes, headers: dict[str, str], timeout: float | None,
                 method: str) -> Awaitable[dict[str, Any]]:
        """Send request ``rid`` (``body``: one JSON-RPC request; ``headers``: the session's per-message headers) and
        return what, awaited, gives its answer (a JSON-RPC response or error, as a dict). Raises ``TimeoutError`` when
        ``timeout`` seconds passed after it was sent, ``MCPError`` for a transport failure, :class:`StepAside` when
        nothing was sent."""


async def _progress_call(fn: Callable[[float, float | None, str | None], Awaitable[None]], progress: float,
                         total: float | None, message: str | None) -> None:
    """A progress callback, its failure logged (as the SDK's dispatcher does: it never ends the connection)."""
    try:
        await fn(progress, total, message)
    except Exception:
        logger.exception("progress callback raised")


class LaneIds:
    """What every lane keeps: its own request ids and the progress callbacks of its requests in flight."""

    def __init__(self) -> None:
        self._ids = itertools.count(LANE_IDS_FROM)
        self.progress: dict[int, Callable[[float, float | None, str | None], Awaitable[None]]] = {}

    def next_id(self) -> int:
        """A request id of this lane's own."""
        return next(self._ids)

    def progress_of(self, method: str, params: Any) -> Any:
        """For a ``notifications/progress`` naming one of the lane's requests in flight: the call of its callback
        (a coroutine to run), else ``None``. Checked as the SDK's dispatcher checks it (numbers, not booleans)."""
        if method != "notifications/progress" or not self.progress or type(params) is not dict:
            return None
        token, progress = params.get("progressToken"), params.get("progress")
        if isinstance(token, bool) or isinstance(progress, bool) or not isinstance(progress, (int, float)):
            return None
        key = request_key(token) if isinstance(token, (int, str)) else None
        fn = self.progress.get(key) if key is not None else None
        if fn is None:
            return None
        total, message = params.get("total"), params.get("message")
        return _progress_call(fn, float(progress), float(total) if isinstance(total, (int, float)) and
                              not isinstance(total, bool) else None, message if isinstance(message, str) else None)


def request_key(rid: Any) -> int | None:
    """The request id a response's ``id`` names, as the SDK's dispatcher correlates it (``"7"`` is 7), or ``None``:
    no request of this client can have it (every id it sends is an int). Never raises: a hostile id (``"²"``, which
    ``str.isdigit`` accepts and ``int`` refuses, or 5,000 digits, past ``int``'s limit) is just not an answer."""
    if type(rid) is str:
        rid = coerce_request_id(rid)  # the SDK's own coercion: it catches int()'s ValueError
    return rid if type(rid) is int else None


def answer_of(obj: Any, waiting: Mapping[int, Any]) -> int | None:
    """The waiting request id ``obj`` (a decoded JSON value) is the plain answer of, or ``None``: not a dict, a
    request or notification, an unknown id, or a malformed answer (the SDK's path then makes an error of it)."""
    if type(obj) is not dict or "method" in obj:
        return None
    rid = obj.get("id")
    if type(rid) is not int:  # (an int is its own key: request_key's call only for the rest)
        rid = request_key(rid)
    if rid is None or rid not in waiting:
        return None
    result, error = obj.get("result"), obj.get("error")
    ok = (type(result) is dict and error is None) or (
        result is None and type(error) is dict and type(error.get("code")) is int
        and type(error.get("message")) is str)
    return rid if ok else None


class Wire(LaneIds):
    """One stdio connection's fast lane: the futures of the requests sent on it, by id (the transport owns one)."""

    __slots__ = ("waiting", "send", "drain", "loop", "closed", "delivered", "sent", "spawn", "stamped", "_seen",
                 "_due", "_watch", "_watch_when", "read_now", "named")

    def __init__(self) -> None:
        super().__init__()
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._due: dict[int, tuple[float, asyncio.Future[dict[str, Any]]]] = {}
        """The loop time past which each request with a timeout fails, and its future."""
        self._watch: asyncio.TimerHandle | None = None
        self._watch_when = math.inf
        """When :attr:`_watch` is due (its ``when()``; infinity: no timer)."""
        """One timer for all of them, due at the earliest (a call costs no timer of its own)."""
        self.send: Callable[[bytes], bool] | None = None
        """Writes one line to the server's stdin now (set by the transport once the process runs); ``False``: the
        pipe is full, await :attr:`drain` before going on."""
        self.drain: Callable[[], Awaitable[None]] | None = None
        """Waits until the server's stdin pipe has room again (set with ``send``)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop the transport runs on (set with ``send``)."""
        self.closed = False
        self.delivered = 0
        """Messages the transport passed to the SDK (the transport counts them)."""
        self.sent: set[int] = set()
        self.spawn: Callable[..., Any] | None = None
        """Starts a task beside the reader (a progress callback; set by the transport)."""
        self.stamped: dict[str, Any] | None = None
        """The era ``_meta`` of the SDK session's last request (:meth:`observe`); ``None`` before one."""
        self._seen = 0
        self.named: set[str] = set()
        """The ids of the SDK session's requests in flight that are strings and not numbers (its
        ``subscriptions/listen`` requests are ``listen-1``, ...): their answers are the session's, not strays."""
        self.read_now: Callable[[float | None], bool] | None = None
        """Set by the transport: reads the server's output in the calling task (a while, bounded by the seconds
        given) when nothing else needs the loop, as the pipe's transport would read it, so a request just written
        may be answered without a turn of the event loop; ``False``: the caller was asked to cancel meanwhile, let
        the loop turn once before taking the answer (``None``: never)."""

    def open(self) -> bool:
        """Whether the process runs and its pipe is open."""
        return not self.closed and self.send is not None

    def observe(self, message: Any) -> None:
        """Note the stamp of a request the SDK's session writes (its ``_meta`` keys of :data:`STAMP_KEYS`), and its
        id if that is a name (:attr:`named`)."""
        if isinstance(message, mt.JSONRPCRequest) and type(message.id) is str and request_key(message.id) is None:
            self.named.add(message.id)
        if isinstance(message, mt.JSONRPCRequest) and message.method not in ("initialize", "server/discover"):
            meta = (message.params or {}).get("_meta")
            if isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta:
                self.stamped = {k: meta[k] for k in STAMP_KEYS if k in meta}

    def answers_session(self, rid: Any) -> bool:
        """Whether a response with id ``rid`` can answer a request of the SDK's session: a number (the session's own
        count, as it correlates them), or the name of one of its requests in flight (then no longer in flight)."""
        if request_key(rid) is not None:
            return True
        if type(rid) is str and rid in self.named:
            self.named.discard(rid)
            return True
        return False

    def stamp(self, client: Any, data: dict[str, Any], opts: dict[str, Any]) -> None:
        """Over stdio a handshake-era request carries no stamp (the SDK's only adds HTTP headers); a 2026-07-28 one
        carries the ``_meta`` the SDK's session stamped on its last request (constant over the session), and before
        the session sent one the call takes the SDK's way (:class:`StepAside`)."""
        if client.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        stamped = self.stamped
        if stamped is None:
            raise StepAside("no request of the SDK's session to take the stamp from yet")
        meta = data["params"].setdefault("_meta", {})
        for key, value in stamped.items():
            if key == LOG_LEVEL_META_KEY:
                meta.setdefault(key, value)  # the caller's own level wins, as with the SDK's stamp
            else:
                meta[key] = value

    def route(self, message: Any) -> None:
        """A notification passing to the SDK's session: a progress one of a lane request runs its callback."""
        if self.progress and isinstance(message, mt.JSONRPCNotification):
            call = self.progress_of(message.method, message.params)
            if call is not None and self.spawn is not None:
                self.spawn(lambda: call)

    def quiet(self, take: bool = True) -> bool:
        """True when the transport passed nothing to the SDK since the last ask: only fast-lane answers came, so no
        notification handler can be waiting for a loop turn (the host then skips its ``sleep(0)``). ``take=False``:
        look without making this the last ask."""
        quiet = self.delivered == self._seen and self.send is not None and not self.closed
        if take:
            self._seen = self.delivered
        return quiet

    def take_line(self, line: bytes) -> bool:
        """Resolve a waiting request with ``line`` if it is that request's plain answer (``False``: not taken)."""
        if len(line) > _NESTING and line.count(b"[") + line.count(b"{") > _NESTING:  # (a short line cannot be)
            return False  # maybe nested deeper than the SDK's parser reads: the usual path decides
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        rid = answer_of(obj, self.waiting)
        if rid is None:
            return False
        fut = self.waiting[rid]
        if not fut.done():
            fut.set_result(obj)
        return True

    def take_message(self, item: Any) -> bool:
        """Resolve a waiting request with a parsed answer from the usual path (e.g. the error for an oversized one)."""
        message = getattr(item, "message", None) if isinstance(item, SessionMessage) else None
        if not isinstance(message, (mt.JSONRPCResponse, mt.JSONRPCError)):
            return False
        rid = request_key(message.id)
        fut = self.waiting.get(rid) if rid is not None else None
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(message.model_dump(by_alias=True, mode="json", exclude_unset=True))
        return True

    def close(self) -> None:
        """The connection ended: every waiting request fails as the SDK fails them (``Connection closed``)."""
        self.closed = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch, self._watch_when = None, math.inf
        self._due.clear()
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(MCPError(code=CONNECTION_CLOSED, message="Connection closed"))
        self.waiting.clear()

    def exchange(self, rid: int, body: bytes, headers: dict[str, str], timeout: float | None,
                 method: str) -> Awaitable[dict[str, Any]]:
        """Write the request line and return what gives its answer (:class:`Lane`): the request's future itself when
        the synchronous read took the answer (``read_now``: the usual inline step, no coroutine of its own), else
        :meth:`_rest`, which waits for the reader to resolve it."""
        assert self.send is not None
        loop = self.loop or asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = asyncio.Future(loop=loop) if type(loop).create_future is \
            _BASE_CREATE_FUTURE else loop.create_future()  # (what the base loop's create_future makes, no call)
        self.waiting[rid] = fut
        try:
            try:
                written = self.send(body + b"\n")  # (written with no await: the pipe had room)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                raise MCPError(code=CONNECTION_CLOSED, message="Connection closed") from None
            if not written:
                return self._rest(rid, fut, timeout, loop, drain=True)
            if not self._sent(rid, fut, timeout, loop):
                return self._rest(rid, fut, timeout, loop, turn=True)
        except BaseException:
            self._forget(rid, fut)
            raise
        if not fut.done():
            return self._rest(rid, fut, timeout, loop)
        self._due.pop(rid, None)  # answered (awaiting the done future does not suspend): _forget without its call
        self.sent.discard(rid)
        if self.waiting.get(rid) is fut:
            del self.waiting[rid]
        return fut

    def _sent(self, rid: int, fut: asyncio.Future[Any], timeout: float | None, loop: asyncio.AbstractEventLoop) -> bool:
        """Request ``rid`` is written: its timeout runs from now, and the synchronous read may take its answer.
        ``False``: a cancellation was asked for meanwhile (the caller lets the loop turn once before it waits)."""
        self.sent.add(rid)
        if timeout is not None:  # (the base loop's time() is monotonic(): no call of it)
            when = (time.monotonic() if type(loop).time is _BASE_TIME else loop.time()) + timeout
            if when >= self._watch_when:  # the timer is due first: what _expire_at does then, without its call
                self._due[rid] = (when, fut)
            else:
                self._expire_at(loop, rid, when, fut)
        return self.read_now is None or self.read_now(timeout)  # it may take the answer

    async def _rest(self, rid: int, fut: asyncio.Future[dict[str, Any]], timeout: float | None,
                    loop: asyncio.AbstractEventLoop, *, drain: bool = False, turn: bool = False) -> dict[str, Any]:
        """The rest of :meth:`exchange` when it must wait: for the pipe's room (``drain``), a loop turn (``turn``:
        a cancellation asked for meanwhile takes effect here), the reader."""
        try:
            if drain:
                try:
                    assert self.drain is not None
                    await self.drain()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    raise MCPError(code=CONNECTION_CLOSED, message="Connection closed") from None
                turn = not self._sent(rid, fut, timeout, loop)
            if turn:
                await asyncio.sleep(0)
            return await fut
        finally:
            self._forget(rid, fut)

    def _forget(self, rid: int, fut: asyncio.Future[Any]) -> None:
        """Request ``rid`` is over (answered, failed or abandoned): no timeout, no courtesy cancel, no future left."""
        self._due.pop(rid, None)
        self.sent.discard(rid)
        if self.waiting.get(rid) is fut:
            del self.waiting[rid]

    def _expire_at(self, loop: asyncio.AbstractEventLoop, rid: int, when: float, fut: asyncio.Future[Any]) -> None:
        """Fail request ``rid`` with ``TimeoutError`` at loop time ``when`` (unless answered first)."""
        self._due[rid] = (when, fut)
        watch = self._watch
        if watch is None or when < watch.when():
            if watch is not None:
                watch.cancel()
            self._watch, self._watch_when = loop.call_at(when, self._expire_due, loop), when

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer: fail the requests that are due, then wait for the next one."""
        self._watch, self._watch_when = None, math.inf
        now = loop.time()
        for rid, (when, fut) in list(self._due.items()):
            if when <= now:
                del self._due[rid]
                _expire(fut)
        if self._due:
            due = min(when for when, _ in self._due.values())
            self._watch, self._watch_when = loop.call_at(due, self._expire_due, loop), due


_BASE_CREATE_FUTURE = asyncio.BaseEventLoop.create_future
_BASE_TIME = asyncio.BaseEventLoop.time


CALL_TOOL_RESULT: TypeAdapter[Any] = TypeAdapter(mt.CallToolResult | mt.InputRequiredResult)
"""What a ``tools/call`` answers (a session without client extensions claims no other shape)."""
READ_RESOURCE_RESULT: TypeAdapter[Any] = TypeAdapter(mt.ReadResourceResult | mt.InputRequiredResult)
"""What a ``resources/read`` answers."""


_textmap: list[Any] = [None, False]  # the global propagator last looked at, and whether it is the default one
_DEFAULT_FIELDS = frozenset(("traceparent", "tracestate", "baggage"))


def inject_trace_context(meta: dict[str, Any]) -> None:
    """W3C trace context (and baggage) into a request's ``_meta``, as the SDK's requests carry it."""
    if _otel_context is not None:
        _otel_propagate.inject(meta)


def _inject(meta: dict[str, Any]) -> None:
    """:func:`inject_trace_context`, skipped where it writes nothing: OpenTelemetry's default propagators (W3C trace
    context and baggage: a composite writing only their fields) with an empty current context."""
    if _otel_context is not None and not _otel_context.get_current():
        textmap = _otel_propagate.get_global_textmap()
        if textmap is not _textmap[0]:
            _textmap[:] = [textmap, type(textmap) is CompositePropagator and set(textmap.fields) <= _DEFAULT_FIELDS]
        if _textmap[1]:
            return
    inject_trace_context(meta)


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


async def _roundtrip(client: Any, wire: Lane, method: str, params: dict[str, Any], timeout: float | None,
                     progress: Any, version: str | None = None) -> dict[str, Any]:
    """Send one request on the lane and return its raw result (what the SDK's ``send_raw_request`` returns): an id
    of the lane's own, stamped as the SDK's session stamps its requests, its progress routed by the lane, and the
    courtesy ``notifications/cancelled`` (sent through the session's public ``send_notification``) when the caller
    stops waiting. ``version``: the session's negotiated protocol version, when the caller read it."""
    if not wire.open():
        raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
    opts: dict[str, Any] = {}
    if wire.__class__ is not Wire or version is None or version in MODERN_PROTOCOL_VERSIONS:
        data: dict[str, Any] = {"method": method, "params": params}  # (Wire.stamp stamps nothing on a
        wire.stamp(client, data, opts)  # handshake-era session: then no call)
        params = data["params"]
    if timeout is None:
        timeout = client.read_timeout_seconds
    rid = wire.next_id()
    out_meta = dict(params.get("_meta") or {})
    if progress is not None:
        out_meta["progressToken"] = rid
    _inject(out_meta)
    if out_meta:
        params["_meta"] = out_meta
    else:
        params.pop("_meta", None)
    body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params} if params else
                        {"jsonrpc": "2.0", "id": rid, "method": method})  # no empty params, as the SDK's dispatcher
    if progress is not None:
        wire.progress[rid] = progress
    try:
        try:
            answer = await wire.exchange(rid, body, opts.get("headers") or {}, timeout, method)
        except TimeoutError:
            await _courtesy_cancel(client, rid, f"timed out after {timeout}s", shield=False)
            raise MCPError(code=REQUEST_TIMEOUT, message=f"Request {method!r} timed out") from None
    except anyio.get_cancelled_exc_class():
        if rid in wire.sent:
            await _courtesy_cancel(client, rid, "caller cancelled", shield=True)
        raise
    finally:
        if progress is not None:
            wire.progress.pop(rid, None)
    error = answer.get("error")
    if error is not None:
        err = mt.ErrorData.model_validate(error)
        raise MCPError(code=err.code, message=err.message, data=err.data)
    return answer["result"]


async def _courtesy_cancel(client: Any, rid: int, reason: str, *, shield: bool) -> None:
    """``notifications/cancelled`` for request ``rid``, through the session (which stamps it, and on a 2026-07-28
    Streamable HTTP session swallows it: there closing the request's POST is the signal). Bounded: a wedged write
    gives up with a warning, as the SDK's does."""
    note = mt.CancelledNotification(params=mt.CancelledNotificationParams(request_id=rid, reason=reason))
    with anyio.move_on_after(ABANDON_WRITE_TIMEOUT, shield=shield) as scope:
        with contextlib.suppress(Exception):  # the session is gone: nothing to tell
            await client.session.send_notification(note)
    if scope.cancelled_caught:
        logger.warning("courtesy cancel for request %r gave up: transport write blocked", rid)


_ASKING_KEYS = frozenset(("inputRequests", "requestState", "input_requests", "request_state"))
"""The keys an ``InputRequiredResult`` needs one of (by alias or by name)."""


def _arms() -> dict[int, Any]:
    """The validator of ``X`` alone for each of the lane's ``X | InputRequiredResult`` adapters, by the adapter's id
    (while ``InputRequiredResult`` has the fields :data:`_ASKING_KEYS` name: else none, and the union decides)."""
    if set(mt.InputRequiredResult.model_fields) != {"meta", "result_type", "input_requests", "request_state"}:
        return {}  # pragma: no cover - a later SDK's InputRequiredResult: the union checks every result
    # (its validator: TypeAdapter.validate_python adds ~0.4 µs)
    return {id(CALL_TOOL_RESULT): TypeAdapter(mt.CallToolResult).validator,
            id(READ_RESOURCE_RESULT): TypeAdapter(mt.ReadResourceResult).validator}


_ARMS = _arms()


def _not_asking(adapter: Any) -> Any:
    """For one of the lane's adapters of ``X | InputRequiredResult``: ``X``'s own validator (a result with none of
    :data:`_ASKING_KEYS` can only be an ``X``), else ``None``."""
    return _ARMS.get(id(adapter))


_PLAIN_SAMPLES = ({"content": [{"type": "text", "text": ""}]}, {"content": [{"type": "text", "text": ""}],
                                                                 "isError": False})


@functools.cache
def _plain_text_ok(version: str) -> bool:
    """Whether a ``tools/call`` result of the plainest shape (:func:`~mcp_gym._compat.tool_results.plain_text`) needs
    no more than ``CallToolResult``'s own validation under ``version``: its schema's check in Python passes that shape
    (its checks look at types only, so the samples stand for every such result), no later revision declares its
    keys, and neither key can make it an ``InputRequiredResult``."""
    quick = mcp_surface.quick_surface("tools/call", version)
    return quick is not None and all(quick(dict(raw)) for raw in _PLAIN_SAMPLES) and \
        mcp_surface.later_fields("tools/call", version).isdisjoint(("content", "isError")) and \
        _ASKING_KEYS.isdisjoint(("content", "isError")) and _not_asking(CALL_TOOL_RESULT) is not None


def _checked(session: Any, method: str, raw: dict[str, Any], adapter: Any, version: str | None = None) -> Any:
    """What the SDK's ``send_request`` does with a raw result: TTL clamp, the negotiated version's schema (without its
    dump of the result), a later revision's fields dropped, then ``adapter``. A tool's plainest result (text blocks,
    ``isError``) goes straight to ``CallToolResult``'s validation where that is all the rest would do
    (:func:`_plain_text_ok`); anything else, or what that validation refuses, takes the whole way. ``version``:
    the session's negotiated protocol version, when the caller read it."""
    version = version or session.protocol_version or "2025-11-25"
    if adapter is CALL_TOOL_RESULT and tool_results.plain_text(raw) and _plain_text_ok(version) and \
            (result := tool_results.call_tool_result(_ARMS[id(CALL_TOOL_RESULT)], raw)) is not None:
        return result
    if "ttlMs" in raw:
        clamp_ttl(raw)
    surface = mcp_surface.surface(method, version)
    if surface is not None and not ((quick := mcp_surface.quick_surface(method, version)) is not None and quick(raw)):
        surface.validate_python(raw, by_name=False)
    if not (foreign := mcp_surface.later_fields(method, version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    # The SDK's adapters are `X | InputRequiredResult`: pydantic tries both arms, and the second one's validator
    # raises for every result that asks for nothing (this whole function, timed in a stdio step: 20 -> 16.5 µs). A
    # result with neither of the keys that arm requires can only be an X: X's own validator gives the same model. When
    # it fails, the union's adapter runs, so the error is the SDK's own.
    arm = _not_asking(adapter)
    if arm is not None and _ASKING_KEYS.isdisjoint(raw):
        if adapter is CALL_TOOL_RESULT and (result := tool_results.call_tool_result(arm, raw)) is not None:
            return result
        try:
            return arm.validate_python(raw, by_name=False)
        except ValidationError:
            pass
    return adapter.validate_python(raw, by_name=False)


async def call_tool(client: Any, name: str, arguments: dict[str, Any] | None, *, wire: Lane | None,
                    read_timeout_seconds: float | None, progress_callback: Any, meta: Mapping[str, Any] | None
                    ) -> mt.CallToolResult:
    """``Client.call_tool`` with the first round on the lane (``wire``; ``None``: the SDK's way): what
    ``ClientSession.call_tool(..., allow_input_required=True)`` does, then the result checked against the tool's
    output schema (:func:`~mcp_gym._compat.mcp_output.check_output`); a result that asks for input is finished by
    the SDK's own code, as ``Client.call_tool`` would; a :class:`StepAside` goes the SDK's way."""
    session = client.session  # (read once: a property of the SDK's; not usable(client), with it)
    version = getattr(session, "protocol_version", None)  # (read once too: a property)
    sdk = wire is None or bool(getattr(client, "extensions", None)) or version is None
    if not sdk:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        if meta is not None:
            params["_meta"] = meta
        try:
            raw = await _roundtrip(client, wire, "tools/call", params,  # type: ignore[arg-type]  # not None: sdk
                                   read_timeout_seconds, progress_callback, version)
        except StepAside:
            sdk = True
        else:
            result = _checked(session, "tools/call", raw, CALL_TOOL_RESULT, version)
    if sdk or not isinstance(result, mt.CallToolResult):
        await own_task()  # the SDK's code: in the call's task (an inline step's first part has none)
    if sdk:
        final: mt.CallToolResult = await client.call_tool(
            name, arguments, read_timeout_seconds=read_timeout_seconds, progress_callback=progress_callback,
            meta=cast(mt.RequestParamsMeta | None, meta))  # (an open TypedDict)
    elif isinstance(result, mt.CallToolResult):
        final = result
    else:
        async def again(r: Any, s: Any) -> Any:
            return await client.session.call_tool(
                name, arguments, read_timeout_seconds=read_timeout_seconds, progress_callback=progress_callback,
                input_responses=r, request_state=s, meta=cast(mt.RequestParamsMeta | None, meta),
                allow_input_required=True)

        final = await mcp_compat.drive_input_required(client, result, again)
        sdk = True  # the last round's result went through the SDK's session.call_tool
    if not nothing_to_check(session, name, final):  # (the usual text result: no coroutine to await)
        await check_output(session, name, final, sdk_checked=sdk)
    return final


async def list_tools_raw(client: Any, wire: Lane, params: dict[str, Any]) -> Any:
    """One ``tools/list`` page (``params`` as the request's JSON dump makes them) on the lane, its raw result (mcp-gym
    checks it tool by tool); :class:`StepAside` when the lane cannot send it (nothing was sent)."""
    if not usable(client) or not wire.open():
        raise StepAside("the lane cannot serve this session")
    return await _roundtrip(client, wire, "tools/list", dict(params), None, None)


async def read_resource(client: Any, uri: str, *, wire: Lane, meta: mt.RequestParamsMeta | None
                        ) -> mt.ReadResourceResult:
    """``Client.read_resource`` (with no response cache, as mcp-gym's sessions have) with the first round on the
    lane; an input-required result is finished by the SDK's own code; a :class:`StepAside` goes the SDK's way."""
    if not usable(client):
        return await client.read_resource(uri, meta=meta, cache_mode="bypass")  # nothing is cached
    params: dict[str, Any] = {"uri": uri}
    if meta is not None:
        params["_meta"] = meta
    try:
        raw = await _roundtrip(client, wire, "resources/read", params, None, None)
    except StepAside:
        return await client.read_resource(uri, meta=meta, cache_mode="bypass")  # nothing is cached
    result = _checked(client.session, "resources/read", raw, READ_RESOURCE_RESULT)
    if isinstance(result, mt.ReadResourceResult):
        return result

    async def again(r: Any, s: Any) -> Any:
        return await client.session.read_resource(uri, input_responses=r, request_state=s, meta=meta,
                                                  allow_input_required=True)

    final: mt.ReadResourceResult = await mcp_compat.drive_input_required(client, result, again)
    return final
