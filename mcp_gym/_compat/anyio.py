"""anyio's private names mcp-gym uses (``anyio`` 4), each with why; see :mod:`mcp_gym._compat`.

* ``anyio._backends._asyncio.StreamWriterWrapper._stream``: the asyncio ``StreamWriter`` under a subprocess's stdin,
  written to directly by the stdio fast lane (:mod:`mcp_gym._compat.mcp_wire`) when its pipe has room: anyio's
  ``send`` always awaits a drain (a loop turn per request). Without it every request takes anyio's ``send``.
* ``MemoryObjectReceiveStream._state``: a new send end of a memory stream the SDK made, from its receive end
  (:func:`sender_for`): the HTTP fast lane hands messages to the SDK's session through the session's own read stream.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp_gym._compat import moved

__all__ = ["stdin_writer", "sender_for", "missing"]

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


def sender_for(receive: Any) -> Any:
    """A new send end (close it after use) of the anyio memory stream that ``receive`` reads, or ``None`` (said once
    with a :class:`~mcp_gym._compat.CompatWarning`)."""
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    state = getattr(receive, "_state", None) if isinstance(receive, MemoryObjectReceiveStream) else None
    if state is None:
        moved(_DIST, "anyio MemoryObjectReceiveStream._state", "the HTTP fast lane is not used")
        return None
    return MemoryObjectSendStream(state)


def missing() -> list[str]:
    """The anyio names used here that the installed anyio lacks (``[]`` when all are there)."""
    from anyio._backends import _asyncio  # noqa: F401 - the backend whose wrapper is read
    from anyio.streams.memory import MemoryObjectReceiveStream

    out = [] if "_state" in getattr(MemoryObjectReceiveStream, "__dataclass_fields__", {}) else [
        "anyio.streams.memory.MemoryObjectReceiveStream._state"]
    wrapper = getattr(_asyncio, "StreamWriterWrapper", None)
    if wrapper is None:
        return out + ["anyio._backends._asyncio.StreamWriterWrapper"]
    fields = getattr(wrapper, "__dataclass_fields__", {}) or getattr(wrapper, "__annotations__", {})
    return out + ([] if "_stream" in fields else ["anyio._backends._asyncio.StreamWriterWrapper._stream"])
