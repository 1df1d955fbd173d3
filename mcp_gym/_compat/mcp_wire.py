"""The fast lane for ``tools/call`` over stdio: the request goes straight onto the pipe and its answer straight back to
the caller, without the SDK's per-request machinery in between.

Through the SDK (mcp 2.3) one ``tools/call`` costs a pydantic model built and dumped, a memory-object stream pair per
request, a hop through the transport's writer task and the dispatcher's reader, and a second validation of the raw
result: about 6× the client CPU of a hand-written asyncio JSON-RPC client over the same pipe
(``scripts/bench/wire.py``). Here, on a connection through mcp-gym's stdio transport (:mod:`mcp_gym.client._stdio`):

* the request is one ``orjson`` encode written to the server's stdin by the calling task (one ``write``: lines never
  interleave with the transport's writer task);
* the transport's reader recognises the answer by its id (one ``orjson`` decode) and resolves the caller's future:
  one task hop, no stream objects; a line that is not a plain answer takes the usual path, and any answer the usual
  path makes for a waiting id (an error for an oversized or unreadable answer) resolves the future too;
* what the SDK does around the wire is kept, with its own code: the request id comes from the session's dispatcher
  (one id space), the request is stamped by the session (protocol era ``_meta``), progress notifications reach the
  callback through the dispatcher's table, a timeout or a cancelled call sends the dispatcher's courtesy
  ``notifications/cancelled``, the result is checked as the SDK checks it (negotiated-version validation, the
  ``CallToolResult`` model, the output schema with the SDK's compiled validator, once per schema), and an
  input-required or claimed result is finished by the SDK's ``Client``.

Everything else (handshake, listings, resources, notifications, sampling, elicitation, roots, HTTP) stays on the SDK.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp.types as mt
import orjson
from mcp import MCPError
from mcp.client import session as _session
from mcp.shared import jsonrpc_dispatcher as _jd
from mcp.shared.message import SessionMessage
from mcp_types import methods as _methods

from mcp_gym._compat import moved

try:
    from mcp.shared._otel import inject_trace_context
except ImportError:  # reported by missing(); the lane is then not used (usable())
    inject_trace_context = None  # type: ignore[assignment]  # checked by usable() before any call

__all__ = ["Wire", "call_tool", "usable", "missing", "missing_on"]

# The SDK's private names the lane uses (mcp 2.3): where it lives, what. missing() / missing_on() list the gone ones,
# tests/test_compat.py fails naming them, and usable() then sends every call the SDK's own way (said once).
_MODULE_NAMES = ((_jd, "mcp.shared.jsonrpc_dispatcher", ("_Pending", "_ABANDON_WRITE_TIMEOUT")),
                 (_methods, "mcp_types.methods", ("_check_known_version", "_adapter", "SERVER_RESULTS")),
                 (_session, "mcp.client.session", ("_clamp_inbound_ttl", "_later_revision_fields")))
_CLIENT_NAMES = ("_drive_input_required", "_folded_extensions")
_SESSION_NAMES = ("_dispatcher", "_stamp", "_session_read_timeout_seconds", "_negotiated_version",
                  "_call_tool_adapter")
_DISPATCHER_NAMES = ("_closed", "_allocate_id", "_pending", "_final_write", "_cancel_outbound")
_usable: dict[tuple[type, type], bool] = {}


def missing() -> list[str]:
    """The SDK's module-level names the lane uses that the installed SDK lacks (``[]`` when all are there)."""
    out = [f"{where}.{name}" for module, where, names in _MODULE_NAMES for name in names if not hasattr(module, name)]
    return out + ([] if inject_trace_context is not None else ["mcp.shared._otel.inject_trace_context"])


def missing_on(client: Any) -> list[str]:
    """The private attributes the lane uses that a connected SDK ``Client``, its session or dispatcher lack."""
    session = getattr(client, "session", None)
    out = [f"Client.{n}" for n in _CLIENT_NAMES if not hasattr(client, n)]
    out += [f"ClientSession.{n}" for n in _SESSION_NAMES if not hasattr(session, n)]
    disp = getattr(session, "_dispatcher", None)
    return out + [f"JSONRPCDispatcher.{n}" for n in _DISPATCHER_NAMES if not hasattr(disp, n)]


def usable(client: Any) -> bool:
    """Whether the lane can serve ``client`` (checked once per client and session class); when not, each name gone
    is said once with a :class:`~mcp_gym._compat.CompatWarning` and calls take ``Client.call_tool``."""
    key = (type(client), type(getattr(client, "session", None)))
    ok = _usable.get(key)
    if ok is None:
        gone = missing() + missing_on(client)
        for name in gone:
            moved("mcp", name, "tools/call over stdio takes the SDK's own path (more client CPU per call)")
        ok = _usable[key] = not gone
    return ok

_NESTING = 128
"""Lines with more brackets than this take the usual path (the SDK's parser refuses nesting past its limit; orjson's
is deeper)."""
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001


def _closed_streams() -> tuple[Any, Any]:
    send, receive = anyio.create_memory_object_stream[Any](0)
    send.close()
    receive.close()
    return send, receive


class Wire:
    """One stdio connection's fast lane: the futures of the requests sent on it, by id (the transport owns one)."""

    __slots__ = ("waiting", "send", "closed", "delivered", "_seen", "_dummy")

    def __init__(self) -> None:
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.send: Callable[[bytes], Awaitable[None]] | None = None
        """Writes one line to the server's stdin (set by the transport once the process runs)."""
        self.closed = False
        self.delivered = 0
        """Messages the transport passed to the SDK (the transport counts them)."""
        self._seen = 0
        self._dummy: tuple[Any, Any] | None = None

    def quiet(self) -> bool:
        """True when the transport passed nothing to the SDK since the last ask: only fast-lane answers came, so no
        notification handler can be waiting for a loop turn (the host then skips its ``sleep(0)``)."""
        quiet = self.delivered == self._seen and self.send is not None and not self.closed
        self._seen = self.delivered
        return quiet

    def take_line(self, line: bytes) -> bool:
        """Resolve a waiting request with ``line`` if it is that request's plain answer (``False``: not taken)."""
        if line.count(b"[") + line.count(b"{") > _NESTING:
            return False  # maybe nested deeper than the SDK's parser reads: the usual path decides
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        if type(obj) is not dict or "method" in obj:
            return False
        rid = obj.get("id")
        if type(rid) is str and rid.isdigit():  # the SDK correlates "7" with 7 too
            rid = int(rid)
        fut = self.waiting.get(rid) if type(rid) is int else None
        if fut is None:
            return False
        result, error = obj.get("result"), obj.get("error")
        ok = (type(result) is dict and error is None) or (
            result is None and type(error) is dict and type(error.get("code")) is int
            and type(error.get("message")) is str)
        if not ok:
            return False  # malformed: the usual path makes an error of it (take_message)
        if not fut.done():
            fut.set_result(obj)
        return True

    def take_message(self, item: Any) -> bool:
        """Resolve a waiting request with a parsed answer from the usual path (e.g. the error for an oversized one)."""
        message = getattr(item, "message", None) if isinstance(item, SessionMessage) else None
        if not isinstance(message, (mt.JSONRPCResponse, mt.JSONRPCError)):
            return False
        rid = message.id
        if isinstance(rid, str) and rid.isdigit():
            rid = int(rid)
        fut = self.waiting.get(rid) if type(rid) is int else None
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(message.model_dump(by_alias=True, mode="json", exclude_unset=True))
        return True

    def close(self) -> None:
        """The connection ended: every waiting request fails as the SDK fails them (``Connection closed``)."""
        self.closed = True
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(MCPError(code=CONNECTION_CLOSED, message="Connection closed"))
        self.waiting.clear()

    def pending(self, on_progress: Any) -> Any:
        """A dispatcher ``_Pending`` entry that only routes progress (its answer comes through this lane)."""
        if self._dummy is None:
            self._dummy = _closed_streams()
        return _jd._Pending(send=self._dummy[0], receive=self._dummy[1], on_progress=on_progress)


@functools.cache
def _surface(version: str) -> Any:
    """The adapter checking a ``tools/call`` result against protocol ``version``'s schema (``None``: none)."""
    _methods._check_known_version(version)
    row = _methods.SERVER_RESULTS.get(("tools/call", version))
    return None if row is None else _methods._adapter(row)


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


async def _roundtrip(client: Any, wire: Wire, name: str, arguments: dict[str, Any] | None, timeout: float | None,
                     progress: Any, meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """Send one ``tools/call`` and return its raw result (what the dispatcher's ``send_raw_request`` returns)."""
    session = client.session
    disp = session._dispatcher
    if disp._closed or wire.closed or wire.send is None:
        raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    if meta is not None:
        params["_meta"] = meta
    data: dict[str, Any] = {"method": "tools/call", "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    params = data["params"]
    if timeout is None:
        timeout = session._session_read_timeout_seconds
    rid = disp._allocate_id()
    while rid in disp._pending or rid in wire.waiting:
        rid = disp._allocate_id()
    out_meta = dict(params.get("_meta") or {})
    if progress is not None:
        out_meta["progressToken"] = rid
    inject_trace_context(out_meta)
    if out_meta:
        params["_meta"] = out_meta
    else:
        params.pop("_meta", None)
    line = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}) + b"\n"
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[dict[str, Any]] = loop.create_future()
    wire.waiting[rid] = fut
    if progress is not None:
        disp._pending[rid] = wire.pending(progress)
    timer = None
    sent = False
    try:
        try:
            await wire.send(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed") from None
        sent = True
        if timeout is not None:
            timer = loop.call_later(timeout, _expire, fut)
        try:
            answer = await fut
        except TimeoutError:
            await disp._final_write(
                lambda: disp._cancel_outbound(rid, f"timed out after {timeout}s", None), shield=False,
                timeout=_jd._ABANDON_WRITE_TIMEOUT, describe=f"courtesy cancel for timed-out request {rid!r}")
            raise MCPError(code=REQUEST_TIMEOUT, message="Request 'tools/call' timed out") from None
    except anyio.get_cancelled_exc_class():
        if sent:
            await disp._final_write(
                lambda: disp._cancel_outbound(rid, "caller cancelled", None), shield=True,
                timeout=_jd._ABANDON_WRITE_TIMEOUT, describe=f"courtesy cancel for caller-cancelled request {rid!r}")
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if wire.waiting.get(rid) is fut:
            del wire.waiting[rid]
        if progress is not None:
            disp._pending.pop(rid, None)
    error = answer.get("error")
    if error is not None:
        err = mt.ErrorData.model_validate(error)
        raise MCPError(code=err.code, message=err.message, data=err.data)
    return answer["result"]


async def _session_call(client: Any, wire: Wire, name: str, arguments: dict[str, Any] | None, timeout: float | None,
                        progress: Any, meta: Mapping[str, Any] | None) -> Any:
    """What ``ClientSession.call_tool(..., allow_input_required=True, allow_claimed=True)`` does, on the lane."""
    session = client.session
    raw = await _roundtrip(client, wire, name, arguments, timeout, progress, meta)
    _session._clamp_inbound_ttl(raw)
    version = session._negotiated_version or "2025-11-25"
    surface = _surface(version)
    if surface is not None:  # what the SDK's validate_server_result checks, without its dump of the result
        surface.validate_python(raw, by_name=False)
    if not (foreign := _session._later_revision_fields("tools/call", version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    result = session._call_tool_adapter.validate_python(raw, by_name=False)
    if isinstance(result, mt.CallToolResult) and not result.is_error:
        await session.validate_tool_result(name, result)
    return result


async def call_tool(client: Any, name: str, arguments: dict[str, Any] | None, *, wire: Wire,
                    read_timeout_seconds: float | None, progress_callback: Any, meta: mt.RequestParamsMeta | None
                    ) -> mt.CallToolResult:
    """``Client.call_tool`` with the first round on the lane; a result that needs more (input required, a claimed
    shape) is finished by the SDK's own code, as ``Client.call_tool`` would."""
    if not usable(client):
        return await client.call_tool(name, arguments, read_timeout_seconds=read_timeout_seconds,
                                      progress_callback=progress_callback, meta=meta)
    result = await _session_call(client, wire, name, arguments, read_timeout_seconds, progress_callback, meta)
    if isinstance(result, mt.CallToolResult):
        return result

    async def again(r: Any, s: Any) -> Any:
        return await client.session.call_tool(
            name, arguments, read_timeout_seconds=read_timeout_seconds, progress_callback=progress_callback,
            input_responses=r, request_state=s, meta=meta, allow_input_required=True, allow_claimed=True)

    result = await client._drive_input_required(result, again)
    if isinstance(result, mt.CallToolResult):
        return result
    from mcp.client.client import ClaimContext

    claim = client._folded_extensions.by_model[type(result)]
    final = await claim.resolve(result, ClaimContext(session=client.session, tool_name=name,
                                                     read_timeout_seconds=read_timeout_seconds))
    if not final.is_error:
        await client.session.validate_tool_result(name, final)
    return final
