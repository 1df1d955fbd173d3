"""The host duties MCP asks of a client, answered for :class:`~mcp_gym.client.host.MCPHost`: ``sampling/createMessage``
and ``elicitation/create`` through the user's callables (sync or async), ``roots/list`` from the roots it advertises,
and the servers' logging notifications collected for the env's ``info["logs"]``."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt

from mcp_gym.client.elicitation import with_defaults

__all__ = ["HostDuties", "SamplingFn", "ElicitationFn"]

SamplingFn = Callable[[list[dict[str, Any]], mt.CreateMessageRequestParams], Any]
"""``(messages, params) -> str | CreateMessageResult`` (sync or async). ``messages`` are ``{"role", "content"}``
dicts with the text of each sampling message; ``params`` is the full SDK request (max_tokens, system prompt, ...)."""
ElicitationFn = Callable[[str, dict[str, Any], mt.ElicitRequestParams], Any]
"""``(message, requested_schema, params) -> dict | None | ElicitResult`` (sync or async): a dict accepts with that
content, ``None`` declines. Properties an accepting answer omits get the schema's ``default`` (SEP-1034);
:func:`mcp_gym.client.elicitation.accept_defaults` is a ready handler that accepts with the defaults."""


class HostDuties:
    """The callbacks :class:`~mcp_gym.client.host.MCPHost` hands each connection for the server's requests and
    notifications (the host sets the attributes below in its ``__init__``)."""

    sampling: SamplingFn | None
    elicitation: ElicitationFn | None
    roots: list[str] | None
    logs: list[dict[str, Any]]
    sampling_log: list[dict[str, Any]]

    async def _on_sampling(self, context: Any, params: mt.CreateMessageRequestParams) -> Any:
        if self.sampling is None:
            return mt.ErrorData(
                code=-32600,
                message="sampling refused by mcp-gym: no sampling callable is configured (pass sampling=... to MCPEnv)",
            )
        messages = [{"role": m.role, "content": _content_text(m.content)} for m in params.messages]
        try:
            reply = await _maybe_await(self.sampling, messages, params)
        except Exception as e:  # noqa: BLE001 - a failing callable becomes a JSON-RPC error for the server
            return mt.ErrorData(code=-32603, message=f"sampling callable failed: {type(e).__name__}: {e}")
        self.sampling_log.append({"messages": messages, "reply": reply if isinstance(reply, str) else repr(reply)})
        if isinstance(reply, (mt.CreateMessageResult, mt.ErrorData)):
            return reply
        return mt.CreateMessageResult(
            role="assistant", content=mt.TextContent(type="text", text=str(reply)), model="mcp-gym-sampling"
        )

    async def _on_elicitation(self, context: Any, params: mt.ElicitRequestParams) -> Any:
        if self.elicitation is None:
            return mt.ElicitResult(action="decline")
        schema = dict(getattr(params, "requested_schema", None) or {})
        try:
            reply = await _maybe_await(self.elicitation, params.message, schema, params)
        except Exception as e:  # noqa: BLE001
            return mt.ErrorData(code=-32603, message=f"elicitation callable failed: {type(e).__name__}: {e}")
        if isinstance(reply, mt.ErrorData):
            return reply
        if reply is None:
            return mt.ElicitResult(action="decline")
        if isinstance(reply, mt.ElicitResult):
            if reply.action != "accept" or not schema:
                return reply
            return reply.model_copy(update={"content": with_defaults(reply.content, schema)})
        return mt.ElicitResult(action="accept", content=with_defaults(reply, schema))  # SEP-1034 defaults

    async def _on_list_roots(self, context: Any) -> mt.ListRootsResult:
        return mt.ListRootsResult(roots=[mt.Root.model_validate({"uri": u}) for u in self.roots or []])

    async def _on_log(self, alias: str, params: mt.LoggingMessageNotificationParams) -> None:
        self.logs.append({"server": alias, "level": params.level, "logger": params.logger, "data": params.data})
        del self.logs[:-1000]


def _root_uri(r: str | Path) -> str:
    s = str(r)
    return s if "://" in s else Path(s).resolve().as_uri()


def _content_text(content: Any) -> str:
    items = content if isinstance(content, list) else [content]
    parts = []
    for c in items:
        parts.append(getattr(c, "text", None) or f"[{getattr(c, 'type', 'content')}]")
    return "\n".join(parts)


async def _maybe_await(fn: Callable[..., Any], *args: Any) -> Any:
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        return await fn(*args)
    res = await anyio.to_thread.run_sync(lambda: fn(*args))
    if isinstance(res, Awaitable):
        res = await res
    return res
