"""httpx2's and httpcore2's private names mcp-gym uses (httpx2 2.x), each with why; see :mod:`mcp_gym._compat`.

* ``AsyncClient._transport._pool``: the httpcore2 connection pool under a client's default transport, its
  ``._connections`` list and its queued ``._requests`` (a connection assigned to one is not idle), to close the idle
  ones when a session's calls move to the HTTP fast lane (:func:`close_idle`): httpcore2 closes an idle connection
  only when a later request or response touches the pool, and has no public way to close idle ones.

Idle connections are kept ``httpx2.Limits(keepalive_expiry=...)`` seconds and a malformed SSE ``retry:`` field is
removed from the byte stream (:class:`mcp_gym.client._http.RetryLines`), both with public API.
"""

from __future__ import annotations

from typing import Any

import httpx2

from mcp_gym._compat import moved

__all__ = ["close_idle", "missing"]

_DIST = "httpcore2"


def _pool_of(client: httpx2.AsyncClient) -> Any:
    """The httpcore2 pool under ``client``'s default transport (``AsyncClient._transport._pool``)."""
    return getattr(getattr(client, "_transport", None), "_pool", None)


def missing(client: httpx2.AsyncClient | None = None) -> list[str]:
    """The private names used here that ``client`` (default: a new ``httpx2.AsyncClient``) lacks."""
    client = client if client is not None else httpx2.AsyncClient()
    if not hasattr(client, "_transport"):
        return ["httpx2.AsyncClient._transport"]
    pool = _pool_of(client)
    if pool is None:
        return ["httpx2.AsyncHTTPTransport._pool"]
    return [f"{type(pool).__name__}.{n}" for n in ("_connections", "_requests")
            if not hasattr(pool, n)]


async def close_idle(client: httpx2.AsyncClient) -> int:
    """Close ``client``'s idle keep-alive connections now (httpcore2 closes them only when a later request or
    response touches the pool); returns how many. Used when a session's calls move to the HTTP fast lane, which has
    its own connection: the idle one would otherwise be held (~20 kB) until the session closes. Without these names
    (warned once) nothing is closed, which only costs that memory."""
    pool = _pool_of(client)
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
