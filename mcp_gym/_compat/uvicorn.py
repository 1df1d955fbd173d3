"""uvicorn's undocumented attributes mcp-gym uses (``uvicorn`` 0.31-0.55), each with why; see :mod:`mcp_gym._compat`.

uvicorn bounds only the idle time between requests (restarted at every byte), so :func:`mcp_gym.serverkit.serve_http`
serves with a subclass of its HTTP protocol class (:func:`guarded_protocol`) that bounds the time to receive each
request and the number of connections. uvicorn has no public hook for either; the subclass reads attributes its
protocol classes (``H11Protocol``, ``HttpToolsProtocol``) and their ``RequestResponseCycle`` set, none of them
documented (they have no leading underscore, so the scans of private names do not see them; :data:`REACHED` lists
them for ``tests/test_private_names.py``):

* a protocol's ``connections`` (the server's set of open connections, this one included once it is made): the cap;
* a protocol's ``cycle`` (the request being received or answered, ``None`` before the first) and a cycle's
  ``more_body`` (``True`` until the request's body is whole): whether the bytes just received completed a request,
  which stops the request's deadline;
* a protocol's ``loop``, ``transport``, ``logger`` and ``client`` (set by its ``__init__`` and ``connection_made``):
  the deadline's timer, closing the connection, and the line that says why.

Without one of them the guard fails at its first connection (``AttributeError``); ``tests/test_compat.py`` fails first,
naming what moved (:func:`missing`), and ``tests/test_hostile_slow_clients.py`` checks the guard against a real server.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REACHED", "guarded_protocol", "missing"]

REACHED: dict[str, tuple[str, ...]] = {
    "protocol": ("client", "connections", "cycle", "logger", "loop", "transport"),
    "RequestResponseCycle": ("more_body",),
}
"""The undocumented attributes :func:`guarded_protocol` reads, by the uvicorn class that sets them (``protocol``:
``H11Protocol`` and ``HttpToolsProtocol``)."""


def guarded_protocol(read_timeout: float, max_connections: int) -> type[Any]:
    """uvicorn's HTTP protocol class (h11 or httptools, as ``http="auto"`` picks) with a deadline on receiving each
    request (:data:`mcp_gym.serverkit.REQUEST_READ_TIMEOUT`) and a cap on connections
    (:data:`mcp_gym.serverkit.MAX_CONNECTIONS`)."""
    import asyncio

    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class Guarded(base):
        _deadline: asyncio.TimerHandle | None = None
        _refused = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:  # answered now, closed once its request is read (or at the
                self._refused = True  # deadline): closing with the request unread would reset the connection
                transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
                                b"connection: close\r\ncontent-length: 25\r\n\r\ntoo many open connections")
            self._deadline = self.loop.call_later(read_timeout, self._expired)  # its first request is due

        def data_received(self, data: bytes) -> None:
            if self._refused:
                self.transport.close()
                return
            before = self.cycle
            pending = before is not None and before.more_body
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and not cycle.more_body and (cycle is not before or pending):
                if self._deadline is not None:  # these bytes completed a request: nothing is due until the next
                    self._deadline.cancel()
                    self._deadline = None
            elif self._deadline is None:  # part of a request (its line, headers or body): the rest is due in time
                self._deadline = self.loop.call_later(read_timeout, self._expired)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing() and self.transport.get_protocol() is self:  # not a WebSocket now
                self.logger.warning("closing a connection from %s that did not send a whole request within %g s",
                                    self.client, read_timeout)
                self.transport.close()

    return Guarded


def absent(source: str, names: tuple[str, ...]) -> list[str]:
    """The ``names`` that ``source`` (a class's code) never sets as ``self.<name> = ...`` (annotated or not)."""
    return [n for n in names if not re.search(rf"\bself\.{n}\s*(:[^=\n]*)?=(?!=)", source)]


def missing() -> list[str]:
    """The uvicorn attributes used here that the installed uvicorn's protocol classes no longer set (``[]`` when all
    are there): each of h11's and, where ``httptools`` is installed, httptools' protocol and request cycle."""
    import importlib
    import importlib.util
    import inspect

    out: list[str] = []
    for module, protocol in (("h11_impl", "H11Protocol"), ("httptools_impl", "HttpToolsProtocol")):
        if module == "httptools_impl" and importlib.util.find_spec("httptools") is None:
            continue
        impl = importlib.import_module(f"uvicorn.protocols.http.{module}")
        for cls, names in ((protocol, REACHED["protocol"]),
                           ("RequestResponseCycle", REACHED["RequestResponseCycle"])):
            where = getattr(impl, cls, None)
            source = inspect.getsource(where) if isinstance(where, type) else ""
            out += [f"uvicorn.protocols.http.{module}.{cls}.{n}" for n in absent(source, names)]
    return out
