"""httpx2's and httpcore2's private names mcp-gym uses (httpx2 2.x), each with why; see :mod:`mcp_gym._compat`.

* ``AsyncClient._transport._pool``: the httpcore2 connection pool under a client's default transport;
* ``AsyncConnectionPool._keepalive_expiry``, ``._connections`` and each connection's ``._connection`` and
  ``._keepalive_expiry``: how long idle connections are kept. httpcore2 has no public setter, and a server's
  ``Keep-Alive: timeout=N`` header says how long it keeps them (:func:`set_keepalive_expiry`); and the pool's
  ``._connections`` list and its queued ``._requests`` (a connection assigned to one is not idle), to close the idle
  ones when a session's calls move to the HTTP fast lane (:func:`close_idle`);
* ``httpx2._sse._SSEEventDecoder.decode``: its ``retry:`` field takes whatever ``int()`` reads (``-5``, 400
  digits), which the MCP SDK then sleeps on (a negative or overflowing sleep ends the connection);
  :func:`spec_sse_retry` makes it ignore a value the SSE spec would (not ASCII digits) or one past
  :data:`MAX_SSE_RETRY_MS`.
"""

from __future__ import annotations

from typing import Any

import httpx2

from mcp_gym._compat import moved

__all__ = ["set_keepalive_expiry", "close_idle", "missing", "spec_sse_retry", "MAX_SSE_RETRY_MS", "sse_retry_ok"]

MAX_SSE_RETRY_MS = 600_000
"""The longest SSE ``retry:`` a server may ask for (10 minutes); a longer one is ignored, as a malformed one is."""


def sse_retry_ok(value: str) -> bool:
    """Whether an SSE ``retry:`` value is one to obey: ASCII digits only, as the SSE spec says (``"²"`` passes
    ``str.isdigit`` and fails ``int``), and at most :data:`MAX_SSE_RETRY_MS` (400 digits would overflow a sleep)."""
    return value.isascii() and value.isdigit() and len(value) <= 7 and int(value) <= MAX_SSE_RETRY_MS


def spec_sse_retry() -> None:
    """Make httpx2's SSE decoder (the MCP SDK's Streamable HTTP and SSE transports read through it) ignore a
    ``retry:`` field :func:`sse_retry_ok` refuses. Idempotent; said once if the name moved."""
    from httpx2 import _sse

    decoder = getattr(_sse, "_SSEEventDecoder", None)
    decode = getattr(decoder, "decode", None)
    if decoder is None or decode is None:
        moved("httpx2", "_sse._SSEEventDecoder.decode", "a malformed SSE retry: field reaches the SDK as is")
        return
    if getattr(decode, "_mcp_gym_spec_retry", False):
        return

    def spec_decode(self: Any, line: str) -> Any:
        if line.startswith("retry:"):
            value = line[6:]
            if not sse_retry_ok(value[1:] if value.startswith(" ") else value):
                return None  # ignored, as the spec says (a blank line still ends the event)
        return decode(self, line)

    setattr(spec_decode, "_mcp_gym_spec_retry", True)  # noqa: B010 - a function attribute mypy does not know
    decoder.decode = spec_decode

_DIST = "httpcore2"


def _pool(client: httpx2.AsyncClient) -> Any:
    return getattr(getattr(client, "_transport", None), "_pool", None)


def missing(client: httpx2.AsyncClient | None = None) -> list[str]:
    """The private names used here that ``client`` (default: a new ``httpx2.AsyncClient``) lacks."""
    client = client if client is not None else httpx2.AsyncClient()
    if not hasattr(client, "_transport"):
        return ["httpx2.AsyncClient._transport"]
    pool = _pool(client)
    if pool is None:
        return ["httpx2.AsyncHTTPTransport._pool"]
    return [f"{type(pool).__name__}.{n}" for n in ("_keepalive_expiry", "_connections", "_requests")
            if not hasattr(pool, n)]


def set_keepalive_expiry(client: httpx2.AsyncClient, seconds: float) -> None:
    """Keep ``client``'s idle connections ``seconds`` (its pool's setting and that of each connection it holds);
    without these names (warned once) the client's own ``keepalive_expiry`` stays, which is only slower."""
    pool = _pool(client)
    if pool is None or not hasattr(pool, "_keepalive_expiry"):
        moved(_DIST, "AsyncConnectionPool._keepalive_expiry (via AsyncClient._transport._pool)",
              "idle connections are kept as long as httpx2.Limits says, not as the server's Keep-Alive asks")
        return
    pool._keepalive_expiry = seconds
    for conn in getattr(pool, "_connections", ()):
        for c in (conn, getattr(conn, "_connection", None)):
            if c is not None and hasattr(c, "_keepalive_expiry"):
                c._keepalive_expiry = seconds


async def close_idle(client: httpx2.AsyncClient) -> int:
    """Close ``client``'s idle keep-alive connections now (httpcore2 closes them only when a later request or
    response touches the pool); returns how many. Used when a session's calls move to the HTTP fast lane, which has
    its own connection: the idle one would otherwise be held (~20 kB) until the session closes. Without these names
    (warned once) nothing is closed, which only costs that memory."""
    pool = _pool(client)
    conns = getattr(pool, "_connections", None)
    if not isinstance(conns, list):
        moved(_DIST, "AsyncConnectionPool._connections (via AsyncClient._transport._pool)",
              "a session's idle httpx2 connection is kept beside the fast lane's")
        return 0
    reserved = {id(getattr(r, "connection", None)) for r in getattr(pool, "_requests", ())}  # assigned, not yet sent
    idle = [c for c in conns if c.is_idle() and id(c) not in reserved]
    for c in idle:
        conns.remove(c)  # no await between the check and the removal: the pool sees a consistent list
    for c in idle:
        await c.aclose()
    return len(idle)
