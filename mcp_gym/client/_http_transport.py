"""The transport of an HTTP server, for :class:`~mcp_gym.client.connection.ServerConnection`: the client imports this
module, and with it the HTTP lane and aiohttp, only when an HTTP server connects (a stdio-only process never does).

Streamable HTTP is the SDK's transport over an HTTP client of :mod:`mcp_gym.client._http` (:func:`streamable_http`),
with the lane (:class:`~mcp_gym.client._http_lane.HttpWire`) beside it: the session reads one stream that both feed.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import mcp.types as mt
from mcp.shared.message import SessionMessage

from mcp_gym.client._http import session_http_client
from mcp_gym.client._http_lane import HttpWire
from mcp_gym.client.specs import Http, Sse

__all__ = ["http_transport", "streamable_http", "http_client_factory"]

_RELEASE = SessionMessage(mt.JSONRPCResponse(jsonrpc="2.0", id="mcp-gym:release", result={}))


def http_transport(spec: Http | Sse, on_refusal: Callable[[int | None, str, str], None]) -> tuple[HttpWire | None, Any]:
    """``(wire, transport)`` of an HTTP server: Streamable HTTP through the lane (:func:`streamable_http` and its
    :class:`HttpWire`), or the older HTTP+SSE through the SDK's ``sse_client`` (no wire)."""
    if isinstance(spec, Http):
        wire = HttpWire(spec, on_refusal)
        return wire, streamable_http(spec, on_refusal, wire)
    from mcp.client.sse import sse_client

    return None, sse_client(spec.url, headers=dict(spec.headers or {}) or None, auth=spec.auth,
                            timeout=spec.http_timeout, sse_read_timeout=spec.read_timeout,
                            httpx_client_factory=http_client_factory(on_refusal, spec.max_in_flight))


# -- the transport ----------------------------------------------------------------------------------------------------
def http_client_factory(
    on_refusal: Callable[[int | None, str, str], None], max_in_flight: int | None, answer_errors: bool = False,
    max_message_bytes: int | None = None, lane_pools: bool = False,
) -> Callable[..., Any]:
    """The SDK's HTTP client factory, with a hook reporting each response's error status, or ``None`` for a success
    (the SDK's own errors, e.g. on Streamable HTTP, do not say which status it was). All clients share one TLS
    context and, per server, ``max_in_flight`` request slots; ``answer_errors`` (Streamable HTTP only: the old SSE
    transport's POSTs carry no answer) turns an HTTP timeout or a connection broken under a request into that
    request's error, and bounds each answer's body by ``max_message_bytes`` and the caller's wait
    (:mod:`mcp_gym.client._http`).
    """
    async def hook(response: Any) -> None:
        bad = response.status_code >= 400
        on_refusal(response.status_code if bad else None, response.reason_phrase, str(response.request.url))

    def factory(**kw: Any) -> Any:
        http = session_http_client(**kw, max_in_flight=max_in_flight, answer_errors=answer_errors,
                                   max_message_bytes=max_message_bytes, lane_pools=lane_pools)
        http.event_hooks = {"request": [], "response": [hook]}
        return http

    return factory


@contextlib.asynccontextmanager
async def streamable_http(spec: Http, on_refusal: Callable[[int | None, str, str], None],
                          wire: HttpWire | None = None) -> AsyncIterator[Any]:
    """The SDK's Streamable HTTP transport over an HTTP client carrying the spec's headers and auth, its answers
    bounded by ``spec.max_message_bytes`` (also the SDK's own bound on one SSE event, 1 MiB by default); with
    ``wire``, the session's read stream also carries what the lane hands to the SDK."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = http_client_factory(on_refusal, spec.max_in_flight, answer_errors=True,
                               max_message_bytes=spec.max_message_bytes,
                               lane_pools=wire is not None and wire.off is None)(
        headers=dict(spec.headers or {}) or None, auth=spec.auth,
        timeout=httpx2.Timeout(spec.http_timeout, read=spec.read_timeout))
    async with http, streamable_http_client(spec.url, http_client=http,
                                            max_sse_event_size=spec.max_message_bytes) as (read, write):
        if wire is None:
            yield read, write  # the SDK's way for every request
            return
        # The session reads one stream fed by two writers: a task forwarding the SDK transport's messages (each with
        # the context it was sent in, which the SDK's dispatcher restores for its handlers) and the lane, handing over
        # what its answers carried besides the answer. The forwarder's send end is the original: the lane sends on a
        # clone closed at once, so the session sees the end when the transport's stream ends.
        send, receive = anyio.create_memory_object_stream[tuple[Any, Any]](0)

        async def inject(message: SessionMessage) -> None:
            with send.clone() as sender:
                await sender.send((contextvars.copy_context(), message))

        def release() -> bool:
            # The session's reader holds the last message it took until the next one comes (its `async for`
            # variable): after the SDK's own traffic (a tools/list answer, ~45 kB for the Counter) the lane's calls
            # would leave it held for the session's life. A response to no request is dropped by the reader (a debug
            # log line).
            try:
                with send.clone() as sender:
                    sender.send_nowait((contextvars.copy_context(), _RELEASE))
            except anyio.WouldBlock:
                return False
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            return True

        async with anyio.create_task_group() as tg:
            tg.start_soon(_forward, read, send)
            wire.http, wire.inject, wire.release = http, inject, release
            try:
                yield _SessionReads(receive), _SessionWrites(write, wire.observe)
            finally:
                wire.inject = wire.release = None
                await wire.close()
                tg.cancel_scope.cancel()


async def _forward(read: Any, send: Any) -> None:
    """The SDK transport's messages into the session's stream, each with the context it was sent in."""
    async with send:
        try:
            async for item in read:
                await send.send((getattr(read, "last_context", None), item))
                del item  # not held until the next one comes (a listing's answer is tens of kB)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the session is gone


class _SessionReads:
    """The session's read stream (what the SDK's dispatcher reads: it iterates, and restores ``last_context``, the
    context each message was sent in, for the handlers it runs)."""

    __slots__ = ("_receive", "last_context")

    def __init__(self, receive: Any) -> None:
        self._receive = receive
        self.last_context: contextvars.Context | None = None

    async def receive(self) -> Any:
        """The next message (``anyio.EndOfStream`` after the last)."""
        ctx, item = await self._receive.receive()
        self.last_context = ctx
        return item

    def close(self) -> None:
        """Stop reading (the writers then see the stream closed)."""
        self._receive.close()

    async def aclose(self) -> None:
        """Stop reading."""
        await self._receive.aclose()

    def __aiter__(self) -> _SessionReads:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _SessionReads:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _SessionWrites:
    """The session's write stream: the SDK transport's, each message noted by the lane first (:meth:`HttpWire.
    observe`: the session's stamp, for the lane's requests)."""

    __slots__ = ("_write", "_observe")

    def __init__(self, write: Any, observe: Callable[[Any], None]) -> None:
        self._write = write
        self._observe = observe

    async def send(self, item: SessionMessage) -> None:
        """Note the message, then hand it to the transport."""
        self._observe(item.message)
        await self._write.send(item)

    async def aclose(self) -> None:
        """Close the transport's write stream."""
        await self._write.aclose()

    async def __aenter__(self) -> _SessionWrites:
        await self._write.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._write.__aexit__(*exc)
