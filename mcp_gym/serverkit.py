"""Toolkit for writing MCP servers that serve as RL environments.

An environment server must keep one independent state per *episode*, because one server process (over stdio, HTTP or
in-process) may serve many concurrent episodes. mcp-gym identifies the episode of every request it sends with the
``_meta`` key :data:`EPISODE_META_KEY`; :class:`EpisodeServer` reads it in a server middleware and hands each tool the
state of its own episode. Requests without the key (a plain MCP client such as ``mcp dev``) share the episode
``"default"``, so every server also works as an ordinary MCP server.

Conventions an env server follows (all implemented here):

* ``mcp_gym_reset(task_id, seed)`` — hidden tool: make the initial state of ``task_id`` reproducibly from ``seed``.
* ``mcp_gym_state()`` — hidden tool: a JSON snapshot of the episode state, which task verifiers grade.
* Per-episode tool visibility: a tool registered with ``hidden_until_shown=True`` is absent from ``tools/list`` and
  refused by ``tools/call`` until :meth:`EpisodeServer.show_tool` is called for the current episode (the Maze's
  ``unlock``); :meth:`EpisodeServer.notify_tools_changed` then tells the client in either protocol era.
* Rewards: a tool may return ``{"reward": float, "done": bool, ...}`` as structured content (see ``mcp_gym.rewards``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import anyio.to_thread
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CallToolResult,
    EmptyResult,
    SubscribeRequestParams,
    TextContent,
    ToolAnnotations,
    UnsubscribeRequestParams,
)

from mcp_gym._compat import mcp as mcp_compat
from mcp_gym._compat.uvicorn import guarded_protocol
from mcp_gym.protocol import CHANGES_META_KEY, EPISODE_META_KEY, HIDDEN_META_KEY, RESET_TOOL, STATE_TOOL

__all__ = ["EpisodeServer", "current_episode", "HandlerResult", "DEFAULT_EPISODE", "serve_http", "SERVER_KEEPALIVE",
           "transport_security", "RequestGuard"]

DEFAULT_EPISODE = "default"

DISCOVER_TTL_MS = 60_000
"""How long a client may reuse this server's ``server/discover`` answer (its ``ttlMs``, private to the authorization
context): the answer (versions, capabilities, instructions, name) is fixed for the server's life, so the sessions a
client opens within this time need no handshake request of their own (:mod:`mcp_gym.client._discovery`)."""

SERVER_KEEPALIVE = 30
"""Seconds an HTTP server run by :func:`serve_http` keeps an idle connection open (uvicorn's default: 5), said in
every response's ``Keep-Alive: timeout=30`` header. mcp-gym's clients then keep theirs for half of it instead of 2 s
(``mcp_gym.client._http``): with 1,000 concurrent sessions a session's next request often comes more than 2 s after
its last, and each new TCP connection costs both sides CPU (``scripts/bench/scale.py``, 1,000 sessions: 86-91
steps/s, 64-65 with 2 s)."""

S = TypeVar("S")

_current_episode: contextvars.ContextVar[str] = contextvars.ContextVar("mcp_gym_episode", default=DEFAULT_EPISODE)
_changes: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("mcp_gym_changes", default=None)


def current_episode() -> str:
    """Episode id of the request being handled (``"default"`` outside mcp-gym)."""
    return _current_episode.get()


@dataclass
class _Episode(Generic[S]):
    state: S
    shown: set[str] = field(default_factory=set)


class EpisodeServer(Generic[S]):
    """An :class:`~mcp.server.mcpserver.MCPServer` with per-episode state, hidden reset/state tools and per-episode
    tool visibility.

    Args:
        name: Server name reported to clients.
        new_state: ``(task_id, seed) -> state``; ``task_id`` is ``None`` for the default episode of a plain client.
        snapshot: ``state -> JSON-able dict`` returned by ``mcp_gym_state`` (for verifiers).
        version: Server version reported to clients.
        instructions: Instructions for the LLM reading this server.
        max_episodes: Most episodes kept; the least recently used is dropped beyond it (bounded memory). A request
            for a dropped episode (or any episode other than ``"default"`` that was never reset) gets a clear
            error, never a fresh state.
        on_reset: Optional ``(state) -> Any`` whose result is returned by the reset tool (e.g. an intro text).
        preflight: Optional check run (on a worker thread) whenever the server starts serving: a stdio or HTTP
            process at start-up, an in-process server at each client connection. Raising refuses to start, with the
            exception's message (e.g. the Code server without an OS sandbox).
    """

    def __init__(
        self,
        name: str,
        new_state: Callable[[str | None, int], S],
        *,
        snapshot: Callable[[S], dict[str, Any]] | None = None,
        version: str = "0.1.0",
        instructions: str | None = None,
        max_episodes: int = 4096,
        on_reset: Callable[[S], Any] | None = None,
        preflight: Callable[[], object] | None = None,
    ) -> None:
        self._preflight = preflight
        self.mcp = MCPServer(
            name, version=version, instructions=instructions, log_level="WARNING", middleware=[self._middleware],
            lifespan=self._lifespan if preflight is not None else None,
            cache_hints={"server/discover": CacheHint(ttl_ms=DISCOVER_TTL_MS, scope="private")},
        )
        self._new_state = new_state
        self._snapshot = snapshot
        self._on_reset = on_reset
        self._episodes: OrderedDict[str, _Episode[S]] = OrderedDict()
        self._max_episodes = max_episodes
        self._evicted: OrderedDict[str, None] = OrderedDict()
        self._gated: set[str] = set()
        self._reset_showed = False  # a reset showed gated tools: a later episode's listing may hold them no more
        self._register_hidden_tools()
        self._accept_legacy_subscriptions()

    def preflight(self) -> None:
        """Run the server's start-up check (see ``preflight=``); raises if the server must not start."""
        if self._preflight is not None:
            self._preflight()

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Any) -> AsyncIterator[dict[str, Any]]:
        await anyio.to_thread.run_sync(self.preflight)
        yield {}

    # -- episodes -----------------------------------------------------------------------------------------------
    def _episode(self) -> _Episode[S]:
        """The current episode. Only ``"default"`` (plain clients) is created on first use: any other episode must
        have been started by the reset tool, so a request for one this server does not hold (never reset here, or
        evicted) is refused with a clear error instead of being served from a fresh, wrong state."""
        key = _current_episode.get()
        ep = self._episodes.get(key)
        if ep is not None:
            self._episodes.move_to_end(key)
            return ep
        if key != DEFAULT_EPISODE:
            raise ToolError(self._unknown_episode(key))
        ep = _Episode(self._new_state(None, 0))
        self._store(key, ep)
        return ep

    def _unknown_episode(self, key: str) -> str:
        if key in self._evicted:
            why = (f"it was evicted: this server holds at most {self._max_episodes} episodes (max_episodes) and "
                   "drops the least recently used beyond that; run fewer episodes at once on it, or raise max_episodes")
        else:
            why = "it was never reset here (or was evicted long ago)"
        return (f"Episode {key!r} is not held by server {self.mcp.name!r}: {why}. Reset the episode "
                f"({RESET_TOOL}) to start it again; no state of another episode is used.")

    def _store(self, key: str, ep: _Episode[S]) -> None:
        self._episodes[key] = ep
        self._episodes.move_to_end(key)
        self._evicted.pop(key, None)
        while len(self._episodes) > self._max_episodes:
            old, _ = self._episodes.popitem(last=False)
            self._evicted[old] = None  # remembered (bounded) only to explain the refusal
            while len(self._evicted) > 4 * self._max_episodes:
                self._evicted.popitem(last=False)

    @property
    def state(self) -> S:
        """The state of the episode of the request being handled."""
        return self._episode().state

    @property
    def episode_count(self) -> int:
        """How many episodes are held in memory."""
        return len(self._episodes)

    def reset_episode(self, task_id: str | None, seed: int) -> S:
        """Start the current episode afresh for ``task_id`` and ``seed``; returns the new state."""
        ep = _Episode(self._new_state(task_id, seed))
        self._store(_current_episode.get(), ep)
        return ep.state

    # -- tools --------------------------------------------------------------------------------------------------
    def tool(
        self,
        *,
        read_only: bool = False,
        destructive: bool = False,
        idempotent: bool = False,
        title: str | None = None,
        hidden_until_shown: bool = False,
        structured_output: bool | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a tool with its annotations (``readOnlyHint`` etc.); see :meth:`show_tool` for gated tools."""

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            annotations = ToolAnnotations(
                title=title,
                read_only_hint=read_only,
                destructive_hint=destructive,
                idempotent_hint=idempotent,
                open_world_hint=False,
            )
            self.mcp.add_tool(fn, annotations=annotations, structured_output=structured_output)
            if hidden_until_shown:
                self._gated.add(fn.__name__)
            return fn

        return decorator

    def show_tool(self, name: str) -> None:
        """Make a gated tool visible in the current episode."""
        self._episode().shown.add(name)

    def tool_visible(self, name: str) -> bool:
        """Whether ``name`` is offered in the current episode (a gated tool is hidden in an unknown episode)."""
        if name not in self._gated:
            return True
        ep = self._episodes.get(_current_episode.get())
        return ep is not None and name in ep.shown

    async def notify_tools_changed(self, ctx: Context) -> None:
        """Send ``notifications/tools/list_changed`` in the negotiated protocol era (and hint it in the result)."""
        changes = _changes.get()
        if changes is not None:
            changes["tools"] = True
        if ctx.protocol_version == "2026-07-28":
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()

    async def notify_resource_updated(self, ctx: Context, uri: str) -> None:
        """Send ``notifications/resources/updated`` for ``uri`` in the negotiated protocol era (and hint it)."""
        changes = _changes.get()
        if changes is not None and uri not in changes.setdefault("resources", []):
            changes["resources"].append(uri)
        if ctx.protocol_version == "2026-07-28":
            await ctx.notify_resource_updated(uri)
        else:
            await ctx.session.send_resource_updated(uri)

    def _register_hidden_tools(self) -> None:
        hidden = {HIDDEN_META_KEY: True}

        async def mcp_gym_reset(task_id: str | None = None, seed: int = 0) -> dict[str, Any]:
            """Reset this episode to the initial state of a task (used by the mcp-gym environment, not by agents)."""
            try:
                state = self.reset_episode(task_id, seed)
            except ToolError:
                raise
            except Exception as e:  # noqa: BLE001 - the SDK would hide the reason (an unknown task id, bad data)
                raise ToolError(f"{self.mcp.name} cannot reset to task {task_id!r}: {_reason(e)}") from e
            extra = self._on_reset(state) if self._on_reset else None
            changes = _changes.get()
            showed = bool(self._episode().shown)
            if changes is not None and self._gated and (showed or self._reset_showed):
                # on_reset showed gated tools: a fresh episode's listing no longer holds; or an earlier reset showed
                # some, which a client may still list for this episode (that does not show them)
                changes["tools"] = True
            self._reset_showed = self._reset_showed or showed
            return {"episode": _current_episode.get(), "task_id": task_id, "seed": seed, "info": extra}

        async def mcp_gym_state() -> dict[str, Any]:
            """Snapshot of this episode's state, for task verifiers (used by mcp-gym, not by agents)."""
            if self._snapshot is None:
                return {}
            return self._snapshot(self._episode().state)

        ro = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
        rw = ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False)
        self.mcp.add_tool(mcp_gym_reset, name=RESET_TOOL, annotations=rw, meta=hidden, structured_output=False)
        self.mcp.add_tool(mcp_gym_state, name=STATE_TOOL, annotations=ro, meta=hidden, structured_output=False)

    def _accept_legacy_subscriptions(self) -> None:
        # MCPServer installs no handler for handshake-era resources/subscribe; updates go to every session anyway,
        # so acknowledging is enough (and makes the server advertise resources.subscribe).
        async def acknowledge(ctx: Any, params: Any) -> EmptyResult:
            return EmptyResult()

        low = mcp_compat.lowlevel_server(self.mcp)
        if low is None:  # the SDK moved it (warned once)
            return
        low.add_request_handler("resources/subscribe", SubscribeRequestParams, acknowledge)
        low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, acknowledge)

    # -- middleware -----------------------------------------------------------------------------------------------
    async def _middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        episode = None
        if ctx.meta is not None:
            episode = ctx.meta.get(EPISODE_META_KEY) if isinstance(ctx.meta, dict) else getattr(ctx.meta, "get", None)
            if not isinstance(episode, str):
                extra = getattr(ctx.meta, "model_extra", None)  # a pydantic meta (older SDKs)
                episode = extra.get(EPISODE_META_KEY) if isinstance(extra, dict) else None
        token = _current_episode.set(episode if isinstance(episode, str) and episode else DEFAULT_EPISODE)
        changes: dict[str, Any] = {}
        ctoken = _changes.set(changes)
        try:
            if ctx.method == "tools/call" and self._gated and ctx.params:
                name = ctx.params.get("name")
                if isinstance(name, str) and not self.tool_visible(name):
                    return CallToolResult(
                        content=[TextContent(type="text", text=f"Unknown tool: '{name}' is not available now")],
                        is_error=True,
                    )
            result = await call_next(ctx)
            if ctx.method == "tools/list" and self._gated:
                result = self._filter_tools(result)
            elif ctx.method == "tools/call" and changes:
                result = _with_meta(result, {CHANGES_META_KEY: changes})
            return result
        finally:
            _changes.reset(ctoken)
            _current_episode.reset(token)

    def _filter_tools(self, result: HandlerResult) -> HandlerResult:
        if result is None:
            return result
        data = result if isinstance(result, dict) else result.model_dump(by_alias=True, mode="json", exclude_none=True)
        data = dict(data)
        data["tools"] = [t for t in data.get("tools", []) if self.tool_visible(t["name"])]
        return data


def _reason(e: BaseException) -> str:
    """An exception's own text (a ``KeyError``'s message without its repr quotes), else its type name."""
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        return e.args[0]
    return str(e) or type(e).__name__


def _with_meta(result: HandlerResult, meta: dict[str, Any]) -> HandlerResult:
    if result is None:
        return result
    data = result if isinstance(result, dict) else result.model_dump(by_alias=True, mode="json", exclude_none=True)
    data = dict(data)
    data["_meta"] = {**(data.get("_meta") or {}), **meta}
    return data


REQUEST_READ_TIMEOUT = 30.0
"""Seconds a client of :func:`serve_http` has to send a whole request (request line, headers and body) from its first
byte, or from opening the connection: uvicorn bounds only the idle time between requests, and restarts even that at
every byte, so a client sending its headers a byte at a time (slowloris) held its connection for good."""

MAX_CONNECTIONS = 1024
"""Most connections (HTTP and WebSocket) a server run by :func:`serve_http` holds at once; one more is answered
``503`` and closed at once, before a byte of it is read."""


def serve_http(app: Any, host: str, port: int, *, log_level: str = "warning",
               keep_alive: int = SERVER_KEEPALIVE, ready: Callable[[int], None] | None = None,
               read_timeout: float = REQUEST_READ_TIMEOUT, max_connections: int = MAX_CONNECTIONS) -> None:
    """Serve the ASGI ``app`` (e.g. ``MCPServer.streamable_http_app()``) with uvicorn on ``host:port`` until stopped,
    keeping idle connections ``keep_alive`` seconds and saying so in each response's ``Keep-Alive`` header (what
    :data:`SERVER_KEEPALIVE` is for). ``port=0`` listens on any free port. ``ready`` is called with the port the
    server listens on (the one it got for ``port=0``) once it listens.

    A client must send each request whole within ``read_timeout`` seconds of its first byte (or of connecting), else
    its connection is closed; past ``max_connections`` open connections a new one is answered ``503`` and closed."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and ready is not None:
                ready(int(self.servers[0].sockets[0].getsockname()[1]))

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_keep_alive=keep_alive,
                            headers=[("Keep-Alive", f"timeout={keep_alive}")],
                            http=guarded_protocol(read_timeout, max_connections))
    anyio.run(Server(config).serve)


# -- who may talk to an HTTP server mcp-gym serves --------------------------------------------------------------------
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def transport_security(host: str) -> Any:
    """The MCP SDK's ``TransportSecuritySettings`` for a server bound to ``host``: on a loopback address, DNS-rebinding
    protection (only a local ``Host`` header and, when a browser sends one, a local ``Origin``); elsewhere ``None``
    (no Host/Origin check: the address is meant to be reached by other names; use a token). The SDK picks the same
    by itself for its own apps; every HTTP server mcp-gym serves (``mcp-gym serve --transport http``,
    ``serve-openenv``) takes it from here."""
    from mcp.server.transport_security import TransportSecuritySettings

    if host not in LOCAL_HOSTS:
        return None
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                                     allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])


class RequestGuard:
    """ASGI middleware for HTTP and WebSocket requests (checked before a WebSocket is accepted): a foreign ``Host``
    is answered 421 and a foreign ``Origin`` 403, by the MCP SDK's own check with :func:`transport_security`'s
    settings (as ``mcp-gym serve --transport http`` answers); with a ``token``, a request without
    ``Authorization: Bearer TOKEN`` (or HTTP Basic auth whose password is the token: ``http://user:TOKEN@host``,
    which OpenEnv's and ``websockets``' clients send) is answered 401."""

    def __init__(self, app: Any, host: str, token: str | None = None) -> None:
        from mcp.server.transport_security import TransportSecurityMiddleware

        self.app, self.token = app, token or None
        self.check = TransportSecurityMiddleware(transport_security(host))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            from starlette.requests import HTTPConnection, Request
            from starlette.responses import Response

            conn = HTTPConnection(scope)
            refused = await self.check.validate_request(cast(Request, conn))
            if refused is None and self.token is not None and not self._authorized(conn.headers.get("authorization")):
                refused = Response("Missing or wrong token (Authorization: Bearer TOKEN)", status_code=401,
                                   headers={"WWW-Authenticate": "Bearer"})
            if refused is not None:
                if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
                    await send({"type": "websocket.close", "code": 1008})  # the server answers the upgrade 403
                else:
                    await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _authorized(self, header: str | None) -> bool:
        import base64
        import hmac

        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() == "basic":
            try:
                value = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
            except ValueError:
                return False
        elif scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(value.strip().encode(), str(self.token).encode())
