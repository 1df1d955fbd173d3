"""The MCP SDK's private names mcp-gym uses (``mcp`` 2.3), each with why; see :mod:`mcp_gym._compat`.

* ``mcp.client.session.DISCOVER_TIMEOUT_SECONDS``: the ``server/discover`` probe's timeout is a module global the SDK
  reads when it sends the probe; there is no per-client setting (:func:`set_discover_timeout` writes it).
* ``Client._drive_input_required``: a ``tools/call`` or ``resources/read`` the fast lane sent whose result asks for
  input (2026-07-28) is finished by the SDK's own driver (its callbacks answer, the request is sent again), as
  ``Client.call_tool`` finishes it (:func:`drive_input_required`).
* ``MCPServer._lowlevel_server``: its request handler table, to acknowledge legacy ``resources/subscribe``.

Given up for public API: ``ClientSession._dispatcher`` and ``._stamp``. ``tools/list`` is fetched raw on the fast
lanes (mcp-gym's own JSON-RPC request: :func:`mcp_gym._compat.mcp_wire.list_tools_raw`) and otherwise through the
session's public ``send_request``; the lanes stamp their requests themselves (stdio and HTTP: the era ``_meta`` the
session stamped on its own last request, as the transport's write stream saw it; HTTP: the per-message headers made
with ``mcp.shared.inbound``'s public functions, :meth:`mcp_gym.client._http_lane.HttpWire.stamp`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp.client.session as _session
import mcp.types as mt

from mcp_gym._compat import moved

__all__ = ["drive_input_required", "set_discover_timeout", "lowlevel_server", "missing"]

_DIST = "mcp"


def missing() -> list[str]:
    """The SDK's module-level names used here that the installed SDK lacks (``[]`` when all are there)."""
    from mcp.server.mcpserver import MCPServer

    wanted = [(_session, "mcp.client.session", ("DISCOVER_TIMEOUT_SECONDS",))]
    out = [f"{where}.{name}" for module, where, names in wanted for name in names if not hasattr(module, name)]
    from mcp import Client

    if not hasattr(Client, "_drive_input_required"):
        out.append("mcp.Client._drive_input_required")
    if not hasattr(MCPServer("probe"), "_lowlevel_server"):
        out.append("mcp.server.mcpserver.MCPServer()._lowlevel_server")
    return out


async def drive_input_required(client: Any, first: Any, again: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    """Finish ``first`` (a result, maybe an ``InputRequiredResult``) as ``Client.call_tool`` does: the client's
    callbacks answer each input request and ``again(responses, request_state)`` sends the request anew, until a
    result asks for nothing. Raises ``RuntimeError`` naming the name when the SDK moved it."""
    if not isinstance(first, mt.InputRequiredResult):
        return first
    drive = getattr(client, "_drive_input_required", None)
    if drive is None:
        raise RuntimeError("mcp-gym cannot answer a server's input request on this mcp SDK: it has no "
                           "Client._drive_input_required (mcp_gym/_compat/mcp.py needs an update)")
    return await drive(first, again)


def set_discover_timeout(seconds: float) -> None:
    """Make the SDK's next ``server/discover`` probes wait at most ``seconds`` (the SDK reads the global when it sends
    the probe; :data:`mcp_gym.client._discovery.DISCOVER_TIMEOUT` serialises handshakes with different values)."""
    if not hasattr(_session, "DISCOVER_TIMEOUT_SECONDS"):
        moved(_DIST, "mcp.client.session.DISCOVER_TIMEOUT_SECONDS",
              "server/discover probes wait the SDK's own time, not the spec's discover_timeout")
        return
    _session.DISCOVER_TIMEOUT_SECONDS = seconds


def lowlevel_server(server: Any) -> Any | None:
    """The low-level ``Server`` under an ``MCPServer`` (its request handler table; ``MCPServer`` has no public
    accessor); ``None`` (warned once) when it moved."""
    low = getattr(server, "_lowlevel_server", None)
    if low is None:
        moved(_DIST, "MCPServer._lowlevel_server", "legacy resources/subscribe requests are not acknowledged")
    return low
