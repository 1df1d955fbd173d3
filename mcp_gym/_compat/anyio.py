"""anyio's private names mcp-gym uses (``anyio`` 4), each with why; see :mod:`mcp_gym._compat`.

* ``MemoryObjectReceiveStream._state``: a new send end of a memory stream the SDK made, from its receive end
  (:func:`sender_for`): the HTTP fast lane hands messages to the SDK's session through the session's own read stream.
"""

from __future__ import annotations

from typing import Any

from mcp_gym._compat import moved

__all__ = ["sender_for", "missing"]

_DIST = "anyio"


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
    from anyio.streams.memory import MemoryObjectReceiveStream

    return [] if "_state" in getattr(MemoryObjectReceiveStream, "__dataclass_fields__", {}) else [
        "anyio.streams.memory.MemoryObjectReceiveStream._state"]
