"""The transport of an HTTP server, for :class:`~mcp_gym.client.connection.ServerConnection`: the client imports this
module, and with it the HTTP lane and aiohttp, only when an HTTP server connects (a stdio-only process never does)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp_gym.client._http_lane import HttpWire, http_client_factory, streamable_http
from mcp_gym.client.specs import Http, Sse

__all__ = ["http_transport"]


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
