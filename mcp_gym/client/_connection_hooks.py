"""What a connection keeps for the host above it: the callbacks the host answers on a server's behalf
(:class:`HostCallbacks`, re-exported by :mod:`mcp_gym.client.connection`) and the changes a server reported that
the client has not applied yet (:class:`Events`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import mcp.types as mt

__all__ = ["HostCallbacks", "Events"]


@dataclass
class HostCallbacks:
    """What the host answers on the server's behalf: SDK-level callbacks built by :mod:`mcp_gym.client.host`."""

    sampling: Callable[..., Coroutine[Any, Any, Any]] | None = None
    elicitation: Callable[..., Coroutine[Any, Any, Any]] | None = None
    list_roots: Callable[..., Coroutine[Any, Any, Any]] | None = None
    logging: Callable[[str, mt.LoggingMessageNotificationParams], Awaitable[None]] | None = None


class Events:
    """Changes a server reported and the client has not applied yet. ``tool_changes`` counts every report of a tools
    change (notification or result hint) over the connection's life: a listing that saw the same count is current."""

    __slots__ = ("_tools_changed", "tool_changes", "resources_changed", "updated")

    def __init__(self) -> None:
        self._tools_changed = False
        self.tool_changes = 0
        self.resources_changed = False
        self.updated: set[str] = set()

    @property
    def tools_changed(self) -> bool:
        """A tools change is pending (cleared by the next listing)."""
        return self._tools_changed

    @tools_changed.setter
    def tools_changed(self, value: bool) -> None:
        if value:
            self.tool_changes += 1
        self._tools_changed = value
