"""The MCP SDK's private names mcp-gym uses (``mcp`` 2.3), each with why; see :mod:`mcp_gym._compat`.

* ``mcp.client.session.DISCOVER_TIMEOUT_SECONDS``: the ``server/discover`` probe's timeout is a module global the SDK
  reads when it sends the probe; there is no per-client setting (:func:`set_discover_timeout` writes it).
* ``ClientSession._dispatcher`` and ``._stamp``: a request sent without the SDK's whole-result validation
  (:func:`raw_sender`), so one bad tool definition costs only that tool.
* ``Client._drive_input_required``: a ``tools/call`` or ``resources/read`` the fast lane sent whose result asks for
  input (2026-07-28) is finished by the SDK's own driver (its callbacks answer, the request is sent again), as
  ``Client.call_tool`` finishes it (:func:`drive_input_required`).
* ``ClientSession._stamp`` is also the Streamable HTTP fast lane's stamp of its requests (:func:`stamp`): the era's
  ``_meta`` and the per-message headers (``Mcp-Method``, ``Mcp-Name``, a tool's ``x-mcp-header`` parameters).
* ``MCPServer._lowlevel_server``: its request handler table, to acknowledge legacy ``resources/subscribe``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp.client.session as _session
import mcp.types as mt

from mcp_gym._compat import moved

__all__ = ["drive_input_required", "stamp", "set_discover_timeout", "raw_sender", "lowlevel_server", "missing",
           "missing_on_session"]

_DIST = "mcp"
_SESSION_ATTRIBUTES = ("_dispatcher", "_stamp")


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


def missing_on_session(session: Any) -> list[str]:
    """The private attributes used here that a connected SDK ``ClientSession`` lacks."""
    return [f"ClientSession.{name}" for name in _SESSION_ATTRIBUTES if not hasattr(session, name)]


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


def stamp(session: Any, data: dict[str, Any], opts: dict[str, Any]) -> bool:
    """Stamp a request (``{"method", "params"}``) as ``session`` stamps its own; ``False`` (warned once) when the
    SDK moved its stamp (the caller then sends the request the SDK's way)."""
    fn = getattr(session, "_stamp", None)
    if fn is None:
        moved(_DIST, "ClientSession._stamp", "Streamable HTTP calls take the SDK's own path (more client CPU)")
        return False
    fn(data, opts)
    return True


def set_discover_timeout(seconds: float) -> None:
    """Make the SDK's next ``server/discover`` probes wait at most ``seconds`` (the SDK reads the global when it sends
    the probe; :data:`mcp_gym.client._discovery.DISCOVER_TIMEOUT` serialises handshakes with different values)."""
    if not hasattr(_session, "DISCOVER_TIMEOUT_SECONDS"):
        moved(_DIST, "mcp.client.session.DISCOVER_TIMEOUT_SECONDS",
              "server/discover probes wait the SDK's own time, not the spec's discover_timeout")
        return
    _session.DISCOVER_TIMEOUT_SECONDS = seconds


def raw_sender(session: Any) -> Callable[[str, dict[str, Any]], Awaitable[Any]] | None:
    """A function sending a request (``{"method", "params"}``, as ``model_dump(by_alias=True, mode="json")`` makes
    it) on ``session`` the way the SDK does (stamped for the negotiated protocol) and returning the raw result,
    unvalidated; ``None`` (warned once) when the SDK's session has no such channel."""
    dispatcher = getattr(session, "_dispatcher", None)
    stamp = getattr(session, "_stamp", None)
    if dispatcher is None or stamp is None:
        moved(_DIST, "ClientSession._dispatcher/_stamp",
              "tools/list is validated whole by the SDK: one bad tool definition fails the whole listing")
        return None

    async def send(method: str, request: dict[str, Any]) -> Any:
        opts: dict[str, Any] = {}
        stamp(request, opts)
        return await dispatcher.send_raw_request(method, request.get("params"), opts)

    return send


def lowlevel_server(server: Any) -> Any | None:
    """The low-level ``Server`` under an ``MCPServer`` (its request handler table; ``MCPServer`` has no public
    accessor); ``None`` (warned once) when it moved."""
    low = getattr(server, "_lowlevel_server", None)
    if low is None:
        moved(_DIST, "MCPServer._lowlevel_server", "legacy resources/subscribe requests are not acknowledged")
    return low
