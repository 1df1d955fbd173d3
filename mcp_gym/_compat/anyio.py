"""anyio's private names mcp-gym uses (``anyio`` 4), each with why; see :mod:`mcp_gym._compat`.

* ``anyio._backends._asyncio.StreamWriterWrapper._stream``: the asyncio ``StreamWriter`` under a subprocess's stdin,
  written to directly by the stdio fast lane (:mod:`mcp_gym._compat.mcp_wire`) when its pipe has room: anyio's
  ``send`` always awaits a drain (a loop turn per request). Without it every request takes anyio's ``send``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp_gym._compat import moved

__all__ = ["stdin_writer", "missing"]

_DIST = "anyio"


def stdin_writer(stdin: Any) -> asyncio.StreamWriter | None:
    """The asyncio ``StreamWriter`` behind a process's anyio stdin stream, or ``None`` (the stream is not on
    asyncio, or anyio moved it: then said once with a :class:`~mcp_gym._compat.CompatWarning`)."""
    writer = getattr(stdin, "_stream", None)
    if isinstance(writer, asyncio.StreamWriter):
        return writer
    if stdin is not None and type(stdin).__name__ == "StreamWriterWrapper":
        moved(_DIST, "anyio StreamWriterWrapper._stream", "each stdio fast-lane request awaits anyio's send")
    return None


def missing() -> list[str]:
    """The anyio names used here that the installed anyio lacks (``[]`` when all are there)."""
    from anyio._backends import _asyncio  # noqa: F401 - the backend whose wrapper is read

    wrapper = getattr(_asyncio, "StreamWriterWrapper", None)
    if wrapper is None:
        return ["anyio._backends._asyncio.StreamWriterWrapper"]
    fields = getattr(wrapper, "__dataclass_fields__", {}) or getattr(wrapper, "__annotations__", {})
    return [] if "_stream" in fields else ["anyio._backends._asyncio.StreamWriterWrapper._stream"]
