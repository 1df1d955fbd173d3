"""Connections: one long-lived MCP session per server, owned by one task on the
:class:`~mcp_gym.client.runtime.Runtime`.

A :class:`ServerConnection` reaches a server described by a spec (:mod:`mcp_gym.client.specs`) through the SDK's
``Client`` with explicit connect and per-call timeouts, follows change notifications in both protocol eras, and turns
transport failures into a status (``ready`` / ``failed`` / ``dead`` / ``closed``) instead of exceptions that would
escape into a training loop. A :class:`Tap` (e.g. the cassette recorder, :mod:`mcp_gym.cassette`) injected by the layer
above sees every exchange; this module knows nothing of what it does with them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from typing import Protocol as _Interface

import anyio
import mcp.types as mt
from mcp import Client, MCPError, StdioServerParameters
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.subscriptions import ResourceUpdated

from mcp_gym._compat import mcp_wire as _wire
from mcp_gym._compat.stdlib import own_task
from mcp_gym._version import __version__
from mcp_gym.client import _discovery, _http, _npx
from mcp_gym.client._connection_hooks import Events, HostCallbacks
from mcp_gym.client._inline import session_started
from mcp_gym.client._notice import started, wait_ready
from mcp_gym.client._stdio import StdioState, stdio_transport
from mcp_gym.client._tools import list_tools_checked, listing_cache
from mcp_gym.client.specs import Http, ServerSpec, Sse, Stdio
from mcp_gym.errors import MCPGymError
from mcp_gym.protocol import redact_text, redact_url

if TYPE_CHECKING:
    from mcp_gym.client._http_lane import HttpWire  # imported with aiohttp, for an HTTP server only

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger("mcp_gym.client")


__all__ = ["ServerConnection", "ConnectionLost", "Tap", "TapFactory"]

CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
_LISTEN_ACK_WAIT = 10.0
"""Seconds a subscription waits, at most, for its listen stream's acknowledgment when given no timeout."""


class ConnectionLost(MCPGymError):
    """The server is not reachable (failed to start, crashed or closed)."""


class ListingTimeout(MCPGymError, TimeoutError):
    """``tools/list`` (all pages) took longer than its bound; the connection was failed and is being closed."""


class Tap(_Interface):
    """What a connection tells an observer of its traffic (the cassette's ``Recorder`` is one). All on the runtime loop.
    """

    def connected(self, conn: ServerConnection) -> None:
        """The session is established (``conn.client`` is entered; server info and capabilities are known)."""

    def notification(self, message: Any) -> None:
        """A server notification arrived (the SDK's notification model)."""

    async def exchange(self, method: str, params: Mapping[str, Any] | None, send: Callable[[], Awaitable[Any]]) -> Any:
        """Run one request: ``await send()`` performs it; return (or raise) what it does."""

    def close(self) -> None:
        """The session is over."""


TapFactory = Callable[["ServerConnection"], "Tap | None"]
"""Makes the tap of a connection when it (re)connects, or ``None`` for no tap (e.g.
``mcp_gym.cassette.recorder.record_tap``, which taps connections whose spec has ``record=``)."""


class ServerConnection:
    """One MCP session to one server, owned by a single task on the runtime loop.

    All methods must be awaited on the runtime loop (the env and host do this). Failures never raise out of
    :meth:`start`; calls on a failed or dead connection raise :class:`ConnectionLost`.
    """

    def __init__(
        self, alias: str, spec: ServerSpec, callbacks: HostCallbacks | None = None, tap: TapFactory | None = None
    ) -> None:
        if spec.record is not None and tap is None:
            raise ValueError(f"server '{alias}': record= needs a recording tap; connect through MCPEnv or MCPHost(..., "
                             "tap=mcp_gym.cassette.recorder.record_tap)")
        self.alias = alias
        self.spec = spec
        self.callbacks = callbacks or HostCallbacks()
        self.status: Literal["new", "connecting", "ready", "failed", "dead", "closed"] = "new"
        self._error: str | None = None
        self.client: Client | None = None
        self.events = Events()
        self.connect_seconds: float | None = None
        self.connected_at: float | None = None  # anyio.current_time() when it last connected
        self._ready = anyio.Event()
        self._close = anyio.Event()
        self._done = anyio.Event()
        self._connecting: anyio.CancelScope | None = None  # the handshake's scope, cancelled by close() and fail()
        self._stdio: StdioState | None = None
        self._npx: _npx.NpxStart | None = None  # a stdio server run by npx: its start (resolved or learning)
        self.http_wire: HttpWire | None = None  # the fast lane of a Streamable HTTP session (client._http_lane)
        self.skipped_tools: list[dict[str, str]] = []  # tools of the last listing that were unusable, with reasons
        self.tools_error: str | None = None  # why the last tools/list failed as a whole (the server has no tools)
        self._subscriptions: tuple[str, ...] = ()
        self._subscribed: frozenset[str] = frozenset()  # the same, to test an update's URI against
        self._listen_scope: anyio.CancelScope | None = None
        self._listen_tg: Any = None
        self._listening = 0  # listen streams (2026-07-28) open and delivering events
        self._listen_ready: anyio.Event | None = None  # set once the latest listen stream is acknowledged (or gone)
        # the server reports changes in result _meta (an mcp-gym server); None until the first listing tells
        self.hints: bool | None = None
        self.tap_factory = tap
        self.tap: Tap | None = None  # made by tap_factory on connecting (e.g. a cassette Recorder)
        self.http_refusal: str | None = None  # a hosted server's last error answer ("HTTP 401 Unauthorized at URL")
        self._unconfirmed = self.stale_discover = False  # reused a cached server/discover answer: unlisted / failed

    def _http_refused(self, status: int | None, reason: str, url: str) -> None:
        """Note (or, given ``None``, forget after a success) the last HTTP error status met while connecting."""
        self.http_refusal = None if status is None else f"HTTP {status} {reason}".strip() + f" at {redact_url(url)}"

    # -- lifecycle ------------------------------------------------------------------------------------------------
    async def start(self, task_group: Any) -> None:
        """Start the owner task and wait until connected or failed (never raises)."""
        self.status = "connecting"
        try:
            task_group.start_soon(self._own, name=f"mcp-gym:{self.alias}")
        except Exception as e:  # noqa: BLE001 - e.g. a runtime that is not running: say so, never wait for it
            self.status = "failed"
            self.error = f"could not start its connection task: {e}"
            self._ready.set()
            self._done.set()
            return
        await wait_ready(self.alias, self.spec, self._ready)  # said on stderr when the wait matters

    def _client(self, prior: tuple[mt.DiscoverResult, str] | None = None) -> Client:
        spec = self.spec
        cb = self.callbacks
        target: Any
        mode: str = spec.protocol if prior is None else prior[1]  # a fresh answer of the server's: no server/discover
        self._unconfirmed = prior is not None
        if isinstance(spec, Stdio):
            self._stdio = StdioState(spec.stderr_tail_bytes)
            env, cwd = None if spec.env is None else dict(spec.env), None if spec.cwd is None else Path(spec.cwd)
            self._npx = _npx.start_for(self.alias, spec)  # run by npx: what npx ran, directly, once known
            command, args, env, cwd = self._npx.command() if self._npx and self._npx.resolved else \
                (spec.command, list(spec.args), env, cwd)
            params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
            target = stdio_transport(params, self._stdio, max_message_bytes=spec.max_message_bytes)
        elif isinstance(spec, (Http, Sse)):
            from mcp_gym.client._http_transport import http_transport  # with aiohttp: for HTTP servers only

            self.http_wire, target = http_transport(spec, self._http_refused)
        else:
            target = spec.server

        async def logging_cb(params: mt.LoggingMessageNotificationParams) -> None:
            if cb.logging is not None:
                await cb.logging(self.alias, params)

        return Client(target, mode=mode, prior_discover=prior[0] if prior is not None else None,
                      cache=listing_cache(),  # caches nothing: hands mcp-gym's checked tool listing to the session
                      message_handler=self._on_message, sampling_callback=cb.sampling,
                      elicitation_callback=cb.elicitation, list_roots_callback=cb.list_roots,
                      logging_callback=logging_cb, log_level="info" if cb.logging is not None else None,
                      client_info=mt.Implementation(name="mcp-gym", version=__version__))

    async def _own(self) -> None:
        # Enter and exit the Client in this one task. The connect deadline lives on a scope that encloses the whole
        # session (the Client's own scopes must nest inside it) and is lifted once connected.
        t0, ended, entered = time.perf_counter(), session_started(), False  # (ended: counted for inline sync calls)
        exc: BaseException | None = None
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.spec.connect_timeout) as scope:
                self._connecting = scope
                if self._close.is_set():  # closed (or failed) before this task ran: no handshake to wait out
                    scope.cancel()
                if self.tap_factory is not None and self.tap is None:
                    self.tap = self.tap_factory(self)
                prior, lead = await _discovery.fresh_or_lead(self.spec)
                try:
                    client = self._client(prior)
                    if self.spec.protocol == "auto" and prior is None:
                        client = await _discovery.enter_auto(self.alias, self.spec, client, self._client)
                        _discovery.remember(self.spec, client.session.discover_result, client.protocol_version)
                    else:
                        await client.__aenter__()
                finally:
                    _discovery.release(self.spec, lead)
                entered = True
                self._connecting = None  # from here on close() ends the session gracefully (below)
                scope.deadline = math.inf
                self.client = client
                self.connect_seconds, self.connected_at = time.perf_counter() - t0, anyio.current_time()
                started(self.alias, self.spec)
                if self._npx is not None:  # a first start through npx: what did it run?
                    self._npx.learn(self.pid, self.spec.describe())
                if self.status == "connecting":  # not failed meanwhile (fail() also asked to close)
                    self.status = "ready"
                if self.tap is not None:
                    self.tap.connected(self)
                try:
                    async with anyio.create_task_group() as tg:
                        self._listen_tg = tg
                        self._restart_listener()
                        await self._set_log_level(client)
                        self._ready.set()
                        await self._close.wait()
                        tg.cancel_scope.cancel()
                except BaseException as e:  # noqa: BLE001 - a dying transport surfaces here
                    exc = e
                finally:
                    self._listen_tg = None
                    # No wrapping scope here: the Client's scopes were entered first and must be exited first.
                    with contextlib.suppress(Exception):
                        await client.__aexit__(None, None, None)
                    if exc is not None and self.status == "ready":
                        self.status = "dead"
                        self.error = self._why(exc, "connection lost") + self._stderr_tail()
            if not entered and self.status == "connecting":  # (a fail() in the handshake said why already)
                self.status = "failed"
                self.error = ("closed while connecting" if self._close.is_set() else
                              f"could not connect within {self.spec.connect_timeout:g} s") + self._stderr_tail()
        except BaseException as e:  # noqa: BLE001 - every failure becomes a status
            exc = e
            if not entered:
                self.status = "failed"
                self.error = self._http_why() + _describe_exc(e, "could not connect") + self._stderr_tail()
        finally:
            if not entered and self._npx is not None and not self._close.is_set():  # (closed: it proved nothing)
                self._npx.failed()  # a resolved start that did not connect: npx again next time
            ended()
            if self.tap is not None:
                self.tap.close()
            if self.status in ("ready", "connecting"):
                self.status = "closed"
            self._ready.set()
            self._done.set()
        # A cancellation is passed on only when it comes from outside (the runtime is stopping: an enclosing scope is
        # cancelled). One from the SDK's own scopes (its transport died and cancelled the session's task group) ends
        # this session only: passed on, it would cancel the runtime's task group and so every other session.
        if exc is not None and isinstance(exc, anyio.get_cancelled_exc_class()) and \
                anyio.current_effective_deadline() == -math.inf:
            raise exc

    async def _set_log_level(self, client: Client) -> None:
        """Handshake era: ask for ``info`` and above with ``logging/setLevel``, as the per-request opt-in
        (``log_level``, which only reaches 2026-07-28 servers) does on modern connections. Best effort."""
        caps = self.capabilities
        if self.callbacks.logging is None or self.modern or caps is None or caps.logging is None:
            return
        with contextlib.suppress(Exception):
            await client.session.send_request(
                mt.SetLevelRequest(params=mt.SetLevelRequestParams(level="info")),
                mt.EmptyResult,
                request_read_timeout_seconds=min(self.spec.connect_timeout, 5.0),
            )

    async def close(self) -> None:
        """Close the session (and stop a stdio subprocess); idempotent."""
        if self.status == "new":
            self.status = "closed"
            return
        self._close.set()
        if self._connecting is not None:  # still in the handshake: stop it (the process stops), never wait it out
            self._connecting.cancel()
        await self._done.wait()
        if self.status == "ready":
            self.status = "closed"

    def fail(self, reason: str) -> None:
        """Mark the server ``failed`` for ``reason`` and close it in the background (its tools go; the next reset
        reconnects). Returns at once: the owner task stops the server within the transport's bounded shutdown."""
        if self.status in ("ready", "connecting"):
            self.status = "failed"
            self.error = reason + self._stderr_tail()
        self._close.set()
        if self._connecting is not None:  # still in the handshake: stop it
            self._connecting.cancel()

    @property
    def pid(self) -> int | None:
        """Process id of a stdio server (``None`` for other transports or before it started)."""
        return self._stdio.pid if self._stdio is not None else None

    def quiet(self, take: bool = True) -> bool:
        """True when nothing reached the SDK since the last ask (a stdio fast lane): no notification handler waits.
        ``take=False``: look without making this the last ask."""
        return self._stdio is not None and self._stdio.wire.quiet(take)

    def _http_why(self) -> str:
        if self.http_refusal is None:
            return ""
        status = self.http_refusal[5:8]
        hint = " (check its headers= / auth= credentials)" if status in ("401", "403") else ""
        if status in ("404", "405") and isinstance(self.spec, Http):  # what an HTTP+SSE endpoint answers a POST
            hint = f" (a server of the older HTTP+SSE transport? then use sse+{redact_url(self.spec.url)})"
        return f"server '{self.alias}' ({self.spec.describe()}): {self.http_refusal}{hint}: "

    def _stderr_tail(self) -> str:
        tail = self._stdio.stderr_tail().strip() if self._stdio is not None else ""
        return f"; server stderr: {tail}" if tail else ""

    def _why(self, e: BaseException, default: str) -> str:
        failure = self._stdio.failure if self._stdio is not None else None
        return failure if failure else _describe_exc(e, default)

    # -- info -----------------------------------------------------------------------------------------------------
    @property
    def protocol_version(self) -> str | None:
        """Negotiated protocol version (``None`` until connected)."""
        try:
            return self.client.protocol_version if self.client is not None else None
        except RuntimeError:
            return None

    @property
    def modern(self) -> bool:
        """True on a 2026-07-28 (discover-era) connection."""
        return (self.protocol_version or "") >= "2026"

    @property
    def error(self) -> str | None:
        """Why the server is not ready (``None`` when it is); URLs in it are redacted (it reaches agents and runs)."""
        return self._error

    @error.setter
    def error(self, why: str | None) -> None:
        self._error = redact_text(why) if why else why

    def info(self) -> dict[str, Any]:
        """Name, version, negotiated protocol, status and error of this server, for ``info["servers"]``."""
        si = None
        with contextlib.suppress(RuntimeError):
            si = self.client.server_info if self.client is not None else None
        return {
            "alias": self.alias,
            "transport": self.spec.transport,
            "target": self.spec.describe(),
            "name": si.name if si else None,
            "version": si.version if si else None,
            "protocol_version": self.protocol_version,
            "status": self.status,
            "error": self.error,
            "skipped_tools": list(self.skipped_tools),
            "tools_error": self.tools_error,
        }

    @property
    def capabilities(self) -> mt.ServerCapabilities | None:
        """Capabilities the server declared."""
        try:
            return self.client.server_capabilities if self.client is not None else None
        except RuntimeError:
            return None

    # -- notifications --------------------------------------------------------------------------------------------
    async def _on_message(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if self.tap is not None and getattr(root, "method", None) != "notifications/subscriptions/acknowledged":
            # an ack reaches here only when its listen stream was already restarted: driver state, not server news
            self.tap.notification(root)
        if isinstance(root, mt.ToolListChangedNotification):
            self.events.tools_changed = True
        elif isinstance(root, mt.ResourceUpdatedNotification):
            self._updated(str(root.params.uri))
        elif isinstance(root, mt.ResourceListChangedNotification):
            self.events.resources_changed = True

    def _updated(self, uri: str) -> None:
        """Note a ``resources/updated``: only for a URI subscribed to (round 9: every URI a server named was kept
        until the next step, so a flood of distinct 20 MB URIs during one call held gigabytes; an update of a URI
        nobody observes changes nothing)."""
        if uri in self._subscribed:
            self.events.updated.add(uri)

    async def subscribe(self, uris: Sequence[str], *, timeout: float | None = None) -> None:
        """Ask for ``resources/updated`` on these URIs (handshake era: ``resources/subscribe``; modern: listen).
        Best effort; each ``resources/subscribe`` waits at most ``timeout`` seconds."""
        uris = tuple(dict.fromkeys(uris))
        if uris == self._subscriptions or self.client is None or self.status != "ready":
            return
        new = [u for u in uris if u not in self._subscriptions]
        self._subscriptions, self._subscribed = uris, frozenset(uris)
        caps = self.capabilities
        if self.modern:
            self._restart_listener()
            await self.listener_acknowledged(timeout)
        elif caps is not None and caps.resources is not None and caps.resources.subscribe:
            for uri in new:
                with contextlib.suppress(Exception):
                    # send_request, not the deprecated subscribe_resource: its MCPDeprecationWarning would be
                    # swallowed here as an exception under -W error, silently dropping the subscription.
                    await self.client.session.send_request(
                        mt.SubscribeRequest(params=mt.SubscribeRequestParams(uri=uri)), mt.EmptyResult,
                        request_read_timeout_seconds=None if timeout is None or math.isinf(timeout) else timeout,
                    )

    async def listener_acknowledged(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds, 10 without one) until the latest listen stream (2026-07-28) is
        acknowledged, refused or gone. The stream is the subscription: a call sent before the server acknowledges
        it would change a resource or the tools unseen (a step's request goes straight onto the pipe, and can
        overtake the stream's)."""
        ready = self._listen_ready
        if ready is not None and not ready.is_set():
            with anyio.move_on_after(_LISTEN_ACK_WAIT if timeout is None or math.isinf(timeout) else timeout) as cs:
                await ready.wait()
            if cs.cancelled_caught and self._listen_ready is ready:
                self._listen_ready = None  # a server that does not answer it: waited for once, not at every reset

    def set_hints(self, hints: bool) -> None:
        """Record whether the server piggy-backs changes on results (the host calls this after each listing). With
        ``listen=None`` the change stream opens once the first listing shows the server does not, and closes if it
        does: a session never opens a stream only to close it at once (a wasted request and connection each)."""
        if hints != self.hints:
            before = self._wants_listener()
            self.hints = hints
            if self._wants_listener() != before:
                self._restart_listener()

    @property
    def reports_tool_changes(self) -> bool:
        """Whether a change of this server's tool list reaches the client: in result hints (an mcp-gym server), or as
        ``list_changed`` notifications it declared (on a 2026-07-28 connection only while the listen stream runs)."""
        if self.hints:
            return True
        caps = self.capabilities
        if not (caps and caps.tools and caps.tools.list_changed):
            return False
        return not self.modern or self._listening > 0

    def _wants_listener(self) -> bool:
        if self.spec.listen is not None:
            return self.spec.listen
        return self.hints is False

    def _restart_listener(self) -> None:
        if self._listen_scope is not None:
            self._listen_scope.cancel()
            self._listen_scope = None
        wanted = self._wants_listener()
        if not self.modern or self._listen_tg is None or not wanted:
            return
        scope = anyio.CancelScope()
        self._listen_scope = scope
        self._listen_ready = anyio.Event()
        self._listen_tg.start_soon(self._listen, scope, self._subscriptions, self._listen_ready)

    async def _listen(self, scope: anyio.CancelScope, uris: tuple[str, ...], ready: anyio.Event) -> None:
        try:
            await self._listen_until_cancelled(scope, uris, ready)
        finally:
            ready.set()  # acknowledged, refused, or ended: nobody waits for it any longer

    async def _listen_until_cancelled(self, scope: anyio.CancelScope, uris: tuple[str, ...],
                                      ready: anyio.Event) -> None:
        caps = self.capabilities
        want_tools = bool(caps and caps.tools and caps.tools.list_changed)
        want_res = bool(caps and caps.resources)
        if not (want_tools or (want_res and uris)) or self.client is None:
            return
        with scope:
            try:
                async with self.client.listen(
                    tools_list_changed=want_tools,
                    resources_list_changed=want_res and bool(caps and caps.resources and caps.resources.list_changed),
                    resource_subscriptions=list(uris) if want_res else [],
                ) as sub:
                    self._listening += 1
                    ready.set()
                    try:
                        async for ev in sub:
                            kind = type(ev).__name__
                            if kind == "ToolsListChanged":
                                self.events.tools_changed = True
                            elif isinstance(ev, ResourceUpdated):
                                self._updated(str(ev.uri))
                            elif kind == "ResourcesListChanged":
                                self.events.resources_changed = True
                    finally:
                        self._listening -= 1
            except Exception:  # noqa: BLE001 - a server without listen support just sends no events
                return

    # -- requests -------------------------------------------------------------------------------------------------
    def _check(self) -> Client:
        if self.status != "ready" or self.client is None:
            raise ConnectionLost(f"server '{self.alias}' is {self.status}" + (f": {self.error}" if self.error else ""))
        return self.client

    def _lost(self, e: BaseException, why: str | None = None) -> ConnectionLost:
        if self.status == "ready":
            self.status = "dead"
            self.error = (why or self._why(e, "connection lost")) + self._stderr_tail()
        self._close.set()
        return ConnectionLost(f"server '{self.alias}' died: {self.error}")

    async def request(self, fn: Callable[[Client], Awaitable[Any]], *, method: str | None = None,
                      params: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Run one SDK request; connection loss becomes :class:`ConnectionLost` and marks the server dead.

        JSON-RPC errors (``MCPError``) other than a closed connection propagate unchanged. ``method`` and ``params``
        describe the request for the tap (e.g. the cassette recorder of ``spec.record``). ``timeout`` (seconds)
        bounds the request: past it, ``MCPError`` -32001 (the session stays usable).
        """
        client = self._check()
        t = None if timeout is None or math.isinf(timeout) else max(0.0, timeout)
        if t is None:  # no bound of ours: no cancel scope either (tools/call is bounded by the SDK's read timeout)
            if self.tap is not None and method is not None:
                return await self.tap.exchange(method, params, lambda: self._send(client, fn))
            return await self._send(client, fn)
        try:
            with anyio.fail_after(t):
                if self.tap is not None and method is not None:
                    return await self.tap.exchange(method, params, lambda: self._send(client, fn))
                return await self._send(client, fn)
        except TimeoutError as e:
            if t is None:
                raise
            raise MCPError(REQUEST_TIMEOUT, f"no answer to {method or 'the request'} within {t:g} s") from e

    async def _send(self, client: Client, fn: Callable[[Client], Awaitable[Any]]) -> Any:
        if self.http_wire is not None:  # session_gone reads this request's HTTP status (or a concurrent one's)
            self.http_refusal = None
        try:
            return await fn(client)
        except (Exception, BaseExceptionGroup) as e:
            lost = self._failure(e)
            if lost is None:
                raise
            raise lost from e

    def _failure(self, e: BaseException) -> ConnectionLost | None:
        """What a request that raised ``e`` raises instead: :class:`ConnectionLost` (the server is marked dead) when
        ``e`` means the connection is gone, else ``None`` (``e`` itself propagates)."""
        if isinstance(e, MCPError):
            gone = _http.session_gone(self.http_refusal, self.http_wire and self.http_wire.http, e.error.message)
            return self._lost(e, gone) if gone or e.code == CONNECTION_CLOSED else None
        if isinstance(e, TimeoutError):
            return None  # a bound of ours (fail_after) ran out: not a lost connection (TimeoutError is an OSError)
        if isinstance(e, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)):
            return self._lost(e)
        if isinstance(e, BaseExceptionGroup):  # the SDK may raise groups from its task groups
            return None if e.subgroup(lambda x: isinstance(x, anyio.get_cancelled_exc_class())) else self._lost(e)
        return None

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        progress: ProgressFnT | None = None,
    ) -> mt.CallToolResult:
        """Call a tool by the server's own name. Raises ``MCPError`` (incl. timeout -32001) or ConnectionLost."""
        t = None if timeout is None or math.isinf(timeout) else timeout
        arguments, sent = dict(arguments), dict(meta or {})  # (sent: an open TypedDict, mt.RequestParamsMeta)
        stdio = self._stdio
        wire: _wire.Lane | None = stdio.wire if stdio is not None else self.http_wire  # (_lane() without its call)
        if wire is not None and not wire.open():
            wire = None
        if stdio is None or wire is None or self.tap is not None:  # only the stdio lane's I/O runs inline
            await own_task()  # (an inline step's first part has no task: aiohttp, the SDK, the tap need the call's)
        if wire is None or self.tap is not None:
            return await self._call_tool_request(name, arguments, t, sent, progress, wire)
        # the fast lane, nothing to tap: request() and _send() without their frames, no closure (so no cells)
        client = (self.client if self.status == "ready" else None) or self._check()  # (_check() without its call)
        if self.http_wire is not None:  # (as _send)
            self.http_refusal = None
        try:
            return await _wire.call_tool(client, name, arguments, wire=wire, read_timeout_seconds=t,
                                         progress_callback=progress, meta=sent)
        except (Exception, BaseExceptionGroup) as e:
            lost = self._failure(e)
            if lost is None:
                raise
            raise lost from e

    async def _call_tool_request(self, name: str, arguments: dict[str, Any], t: float | None, sent: dict[str, Any],
                                 progress: ProgressFnT | None, wire: _wire.Lane | None) -> mt.CallToolResult:
        """:meth:`call_tool` through :meth:`request` (the SDK's way, or a tap)."""
        call = functools.partial(_wire.call_tool, wire=wire)  # the fast lane (wire None: the SDK's way)
        return await self.request(
            lambda c: call(c, name, arguments, read_timeout_seconds=t, progress_callback=progress, meta=sent),
            method="tools/call",
            params={"name": name, "arguments": dict(arguments), "_meta": dict(sent)} if self.tap is not None else None,
        )

    def _lane(self) -> _wire.Lane | None:
        """The fast lane of this session (stdio, Streamable HTTP) when it can send, else ``None`` (the SDK's way)."""
        wire: _wire.Lane | None = self._stdio.wire if self._stdio is not None else self.http_wire
        return wire if wire is not None and wire.open() else None

    async def list_tools(
        self, meta: Mapping[str, Any] | None = None, *, timeout: float | None = None, bound: str | None = None
    ) -> list[mt.Tool]:
        """All usable tools (following pagination), checked one by one: a bad tool definition costs only that tool
        and is listed with its reason in :attr:`skipped_tools` (and ``info()["skipped_tools"]``).

        ``timeout`` bounds the whole listing: past it the server is failed (status ``failed``, "timed out after X s
        listing tools"), closed in the background, and :class:`ListingTimeout` is raised. An unusable result as a
        whole raises ``ListingError``. ``bound`` names the bound in that reason (default: ``timeout`` in seconds).
        """
        tools: list[mt.Tool] = []
        metas: list[Any] = []

        async def go(c: Client) -> mt.ListToolsResult:
            good, skipped, result = await list_tools_checked(c, meta, timeout, metas, wire=self._lane())
            if self.http_wire is not None:  # the Mcp-Param-* headers of the lane's calls, as the session's
                self.http_wire.listed(good, c.protocol_version)
            tools.extend(good)
            self.skipped_tools = skipped
            return result  # all good tools of all pages (as one page in a cassette)

        try:
            await self.request(go, method="tools/list", params={"_meta": dict(meta or {})})
        except TimeoutError as e:
            reason = f"timed out after {bound or f'{timeout:g} s'} listing tools"
            self.fail(reason)
            raise ListingTimeout(f"server '{self.alias}' {reason}") from e
        except Exception as e:
            self._adoption_failed(e)
            raise
        if self._unconfirmed and self.client is not None:
            why = _discovery.mismatch(self.client.session.discover_result, metas)
            if why is not None:
                self._adoption_failed(ValueError(why))
                raise ConnectionLost(f"server '{self.alias}' {self.error}")
        self._unconfirmed = False
        return tools

    def _adoption_failed(self, e: BaseException) -> None:
        """A first listing on a reused server/discover answer failed: drop it, fail the connection (host reconnects)."""
        if self._unconfirmed and isinstance(self.spec, Http):
            self._unconfirmed = False
            _discovery.forget(self.spec)
            if self.status == "ready" and getattr(e, "code", None) != REQUEST_TIMEOUT:
                self.stale_discover = True
                self.fail(f"its reused server/discover answer did not hold ({_describe_exc(e, 'failed')})")

    async def list_resources(self, *, timeout: float | None = None) -> list[mt.Resource]:
        """Listed resources ([] if the server has no resources capability); ``timeout`` as in :meth:`request`."""
        caps = self.capabilities
        if caps is None or caps.resources is None:
            return []
        res = await self.request(lambda c: c.list_resources(cache_mode="bypass"), method="resources/list",
                                 timeout=timeout)
        return list(res.resources)

    async def list_resource_templates(self, *, timeout: float | None = None) -> list[mt.ResourceTemplate]:
        """Listed resource templates ([] if none)."""
        caps = self.capabilities
        if caps is None or caps.resources is None:
            return []
        res = await self.request(lambda c: c.list_resource_templates(cache_mode="bypass"),
                                 method="resources/templates/list", timeout=timeout)
        return list(res.resource_templates)

    async def read_resource(
        self, uri: str, meta: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> mt.ReadResourceResult:
        """Read one resource; ``timeout`` as in :meth:`request`."""
        sent, wire = cast(mt.RequestParamsMeta, dict(meta or {})), self._lane()  # an open TypedDict
        return await self.request(
            (lambda c: c.read_resource(uri, meta=sent, cache_mode="bypass")) if wire is None else
            (lambda c: _wire.read_resource(c, uri, wire=wire, meta=sent)),  # the fast lane
            method="resources/read",
            params={"uri": uri, "_meta": dict(meta or {})},
            timeout=timeout,
        )


def _describe_exc(e: BaseException, default: str) -> str:
    """A one-line description of (the first leaf of) an exception or exception group."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, TimeoutError):
        return default
    msg = str(e).strip()
    return f"{type(e).__name__}: {msg}" if msg else f"{type(e).__name__} ({default})"

