"""HTTP clients for Streamable HTTP / SSE sessions that share one TLS context per process.

The SDK gives each session its own ``httpx2.AsyncClient``, and each builds its own TLS context (loading the CA
bundle): about 27 ms of CPU and 0.8 MB of memory per session on a 2-core machine, which was most of what a session
cost at 1,000+ concurrent episodes (``scripts/bench/scale.py``). Here every session still gets its own client and
connection pool (its own headers, auth, hooks, cookies and proxies from the environment, exactly as before) built on
one shared ``ssl.SSLContext``: about 0.1 ms and 3 kB per session.

One pool for all sessions was measured and rejected: httpcore's pool scans all its connections (probing each idle
socket) whenever a request starts or ends, so at 10,000 sessions every request pays for the other 9,999.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

__all__ = ["session_http_client", "shared_ssl_context"]

_ctx: ssl.SSLContext | None = None
_lock = threading.Lock()


def shared_ssl_context() -> ssl.SSLContext:
    """The process's TLS context for MCP sessions (httpx2's default: certifi or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
    as set when the first session starts), made once."""
    global _ctx
    with _lock:
        if _ctx is None:
            _ctx = httpx2.create_ssl_context(trust_env=True)
        return _ctx


def session_http_client(
    headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None,
    **kw: Any,
) -> httpx2.AsyncClient:
    """What the SDK's ``create_mcp_http_client`` makes (its timeouts: 30 s, 300 s to read a stream), on the shared
    TLS context. Extra keywords go to ``httpx2.AsyncClient``."""
    return httpx2.AsyncClient(
        headers=headers, auth=auth, verify=shared_ssl_context(),
        timeout=timeout if timeout is not None else
        httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        **kw,
    )
