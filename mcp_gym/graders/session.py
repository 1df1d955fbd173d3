"""The episode's own sessions, as graders see them: a final tool call or resource read through the env's host."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp_gym.client.host import render_content
from mcp_gym.graders.base import GraderError
from mcp_gym.protocol import STATE_TOOL, result_problem

__all__: list[str] = []  # internal to mcp_gym.graders: used by its sibling modules only


def _text(blocks: Sequence[Any]) -> str:
    """The text of content blocks (text blocks and embedded text resources)."""
    parts = []
    for b in blocks:
        if isinstance(getattr(b, "text", None), str):  # text blocks and text resource contents
            parts.append(b.text)
        elif getattr(b, "type", None) == "resource" and getattr(b.resource, "text", None) is not None:
            parts.append(b.resource.text)
    return "\n".join(parts)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class SessionAccess:
    """Calls and reads on an env's connections (``host``: its :class:`~mcp_gym.client.host.MCPHost`), for state graders.

    Results come back as JSON values: a tool's structured content, else its text parsed as JSON, else the text.
    Failures raise :class:`GraderError` naming the server and the tool or resource: a JSON-RPC error, an ``isError``
    result, and a result that is neither (:func:`~mcp_gym.protocol.result_problem`: no content and no
    ``structuredContent``, or the two disagreeing), so a grader never passes on a value the server did not give."""

    def __init__(self, host: Any, timeout: float | None) -> None:
        self.host = host
        self.timeout = timeout

    def _alias(self, server: str | None) -> str:
        names = list(self.host.connections)
        if server is not None:
            if server not in names:
                raise GraderError(f"no server '{server}' (servers: {', '.join(names)})")
            return server
        if len(names) != 1:
            raise GraderError(f"several servers ({', '.join(names)}): name one with server=")
        return names[0]

    async def call(self, server: str | None, tool: str, arguments: Mapping[str, Any]) -> Any:
        """Call ``tool`` on the server (the only one when ``server`` is ``None``)."""
        alias = self._alias(server)
        out = await self.host.call_server(alias, tool, dict(arguments), timeout=self.timeout)
        if out.error is not None or out.result is None:
            why = out.error["message"] if out.error is not None else "no result"
            raise GraderError(f"final call {tool} on server '{alias}' failed: {why}")
        text = _text(out.result.content)
        if out.result.is_error:
            raise GraderError(f"final call {tool} on server '{alias}' returned an error: {text[:300]}")
        problem = result_problem(out.result)
        if problem is not None:
            raise GraderError(f"final call {tool} on server '{alias}' {problem}")
        return out.result.structured_content if out.result.structured_content is not None else _value(text)

    async def read(self, server: str | None, uri: str) -> Any:
        """Read the resource ``uri``."""
        alias = self._alias(server)
        try:
            res = await self.host.connections[alias].read_resource(uri, self.host.meta)
        except Exception as e:  # noqa: BLE001 - ConnectionLost, MCPError: reported with the server and uri
            raise GraderError(f"reading {uri} on server '{alias}' failed: {e}") from None
        if not res.contents:
            raise GraderError(f"reading {uri} on server '{alias}' returned no contents")
        return _value(_text(res.contents))


async def state_snapshot(host: Any, timeout: float | None) -> dict[str, Any]:
    """The servers' ``mcp_gym_state`` snapshots (``host``: an :class:`~mcp_gym.client.host.MCPHost`): the one server's
    when a single server has the tool, else ``{alias: snapshot}`` (``{}`` when none has it; a server that is down is
    left out). A ready server whose state call fails (a JSON-RPC error, ``isError``, a result that is no JSON or whose
    :func:`~mcp_gym.protocol.result_problem` says it cannot be read) raises :class:`GraderError` naming the
    server: graded on a state the server did not give, a check could pass."""
    states: dict[str, Any] = {}
    for alias, conn in host.connections.items():
        if conn.status != "ready" or not host.has_tool(alias, STATE_TOOL):
            continue
        out = await host.call_server(alias, STATE_TOOL, {}, timeout=timeout)
        where = f"state call {STATE_TOOL} on server '{alias}'"
        if out.error is not None or out.result is None:
            raise GraderError(f"{where} failed: {out.error['message'] if out.error is not None else 'no result'}")
        if out.result.is_error:
            raise GraderError(f"{where} returned an error: {_text(out.result.content)[:300]}")
        problem = result_problem(out.result)
        if problem is not None:
            raise GraderError(f"{where} {problem}")
        sc = out.result.structured_content
        if not isinstance(sc, dict) or set(sc) == {"result"}:
            text = render_content(out.result.content)
            try:
                sc = json.loads(text)
            except ValueError:
                raise GraderError(f"{where} returned no JSON: {text[:300]!r}") from None
        states[alias] = sc
    if len(states) == 1:
        return next(iter(states.values()))
    return states
