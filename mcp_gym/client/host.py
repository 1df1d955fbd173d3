"""The host: several server connections behind one tool catalogue, and the host duties MCP asks of a client.

:class:`MCPHost` connects to every server concurrently, lists their tools (``{server}__{tool}`` names when there is
more than one server), routes calls back to each server's own tool name, answers sampling / elicitation / roots
requests through user callables, and collects logging and progress notifications. A server that fails or dies loses
only its own tools.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
from mcp import MCPError
from pydantic import ValidationError

from mcp_gym.client._duties import ElicitationFn, HostDuties, SamplingFn, _root_uri
from mcp_gym.client._http import CONNECTION_LOST, HTTP_CONNECTION_DATA_KEY, HTTP_TIMEOUT_DATA_KEY
from mcp_gym.client._stdio import MESSAGE_TOO_LARGE
from mcp_gym.client._tools import ToolFilter, show_name
from mcp_gym.client.connection import ConnectionLost, HostCallbacks, ListingTimeout, ServerConnection, TapFactory
from mcp_gym.client.specs import ServerSpec
from mcp_gym.protocol import (
    CHANGES_META_KEY,
    EPISODE_META_KEY,
    HIDDEN_META_KEY,
    HIDDEN_TOOLS,
    RESET_TOOL,
    SEED_META_KEY,
    TASK_META_KEY,
    ToolCallError,
    catalogue_fingerprint,
    openai_function,
    redact_text,
)

log = logging.getLogger("mcp_gym.client")


class ServerUnavailableWarning(RuntimeWarning):
    """A server is not available for an episode (it failed to start, died or timed out): its tools are missing."""


__all__ = ["ServerUnavailableWarning", "MCPHost", "ToolEntry", "SamplingFn", "ElicitationFn", "catalogue_hash",
           "render_content", "content_json"]


@dataclass(frozen=True)
class ToolEntry:
    """One tool as offered to the agent."""

    name: str
    server: str
    server_tool: str
    tool: mt.Tool

    @classmethod
    def of(cls, tool: mt.Tool | Mapping[str, Any], *, server: str = "", name: str | None = None) -> ToolEntry:
        """The entry of a tool from any of its forms: an SDK ``Tool``, an MCP tool dict (camelCase, as ``tools/list``
        answers and cassettes hold it) or a recorded :meth:`to_record` dict (snake_case). ``name``: the name it is
        offered under (default: its own; also fills a dict without one). Raises ``ValueError`` naming the tool when
        the dict is not a tool definition.

        >>> ToolEntry.of({"name": "add", "inputSchema": {"type": "object"}}).to_record()["input_schema"]
        {'type': 'object'}
        """
        if not isinstance(tool, mt.Tool):
            data = {"name": name, **tool} if name is not None else dict(tool)
            try:
                tool = mt.Tool.model_validate(data)
            except ValidationError as e:
                what = show_name(data.get("name", "(no name)"))
                raise ValueError(f"tool {what!r}: not a tool definition: {e.errors()[0].get('msg', e)} "
                                 f"(at {'.'.join(str(x) for x in e.errors()[0].get('loc', ())) or 'top'})") from e
        return cls(name or tool.name, server, tool.name, tool)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The tool's JSON Schema for its arguments."""
        return dict(self.tool.input_schema or {"type": "object"})

    @property
    def annotations(self) -> dict[str, Any]:
        """The tool's annotations (readOnlyHint, destructiveHint, ...) as a dict (empty if none)."""
        a = self.tool.annotations
        return a.model_dump(by_alias=True, exclude_none=True) if a is not None else {}

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool (for chat-completions ``tools=``)."""
        return openai_function({"name": self.name, "description": self.tool.description,
                                "input_schema": self.input_schema})

    def to_record(self) -> dict[str, Any]:
        """The JSON-able form recordings store (``name``, ``server``, ``server_tool``, ``description``,
        ``input_schema``, ``output_schema``, ``annotations``), which :func:`catalogue_hash` fingerprints."""
        t = self.tool
        return {
            "name": self.name,
            "server": self.server,
            "server_tool": self.server_tool,
            "description": t.description or "",
            "input_schema": self.input_schema,
            "output_schema": dict(t.output_schema) if t.output_schema else None,
            "annotations": self.annotations,
        }


def catalogue_hash(entries: Sequence[ToolEntry]) -> str:
    """A stable hash of a tool catalogue (names, descriptions, schemas, annotations): the
    :func:`~mcp_gym.protocol.catalogue_fingerprint` of its :meth:`ToolEntry.to_record` dicts, as recordings store
    it."""
    return catalogue_fingerprint([e.to_record() for e in entries])


def render_content(blocks: Sequence[Any], limit: int | None = None) -> str:
    """Text of result content blocks; non-text blocks become placeholders such as ``[image: image/png, 1.2 kB]``."""
    parts: list[str] = []
    for b in blocks:
        kind = getattr(b, "type", None)
        if kind == "text":
            parts.append(b.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {b.mime_type}, {len(b.data) * 3 // 4} bytes]")
        elif kind == "resource":
            r = b.resource
            text = getattr(r, "text", None)
            parts.append(text if text is not None else f"[resource: {r.uri} ({r.mime_type or 'binary'})]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {b.uri}" + (f" {b.name}" if b.name else "") + "]")
        else:
            parts.append(f"[{kind or type(b).__name__}]")
    text = "\n".join(parts)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n…[truncated {len(text) - limit} characters]"
    return text


def content_json(blocks: Sequence[Any]) -> list[dict[str, Any]]:
    """Result content blocks as JSON dicts (by alias, ``None`` fields left out), as ``info["content"]`` gives them."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        # A plain text block (nothing but its text) is {"type": "text", "text": ...}: what model_dump below returns.
        if b.__class__ is mt.TextContent and b.annotations is None and b.meta is None and not b.__pydantic_extra__:
            out.append({"type": "text", "text": b.text})
        else:
            out.append(b.model_dump(mode="json", by_alias=True, exclude_none=True))
    return out


@dataclass
class CallOutcome:
    """The outcome of one routed tool call: a result, or an error description (never an exception)."""

    tool: str
    server: str | None
    server_tool: str | None
    result: mt.CallToolResult | None = None
    error: dict[str, Any] | None = None
    duration: float = 0.0
    progress: list[dict[str, Any]] = field(default_factory=list)

    async def _on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        """The call's progress callback (a bound method: no closure per call)."""
        self.progress.append({"progress": progress, "total": total, "message": message, "t": time.time()})


def _requires_task(tool: mt.Tool) -> bool:
    execution = getattr(tool, "execution", None)
    return getattr(execution, "task_support", None) == "required"


def _is_destructive(tool: mt.Tool) -> bool:
    a = tool.annotations
    if a is None:
        return True  # MCP default: a tool may be destructive unless it says otherwise
    if a.read_only_hint:
        return False
    return a.destructive_hint is not False


class MCPHost(HostDuties):
    """Connections to several MCP servers behind one catalogue of tools.

    Args:
        servers: alias -> server spec.
        sampling: answers ``sampling/createMessage`` (default: a clear refusal).
        elicitation: answers ``elicitation/create`` (default: decline); an accepting answer's omitted properties get
            the requested schema's ``default`` values (SEP-1034).
        roots: root URIs or paths to advertise (default: none, and no roots capability).
        prefix_tools: expose ``{alias}{separator}{tool}`` names; ``None`` = only with more than one server.
        separator: between alias and tool name.
        hidden_tools: tool names never offered to the agent (the env's reset/state tools by default); tools whose
            ``_meta`` has ``"mcp-gym/hidden": true`` are hidden too.
        block_destructive: hide and refuse tools that may be destructive (``destructiveHint`` not false and not
            ``readOnlyHint``; unannotated tools count as destructive, as the MCP spec says).
        tool_filter: the ``include_tools``/``exclude_tools`` settings: tools it hides are neither offered nor called.
        tap: makes each connection's :class:`~mcp_gym.client.connection.Tap` (needed for specs with ``record=``:
            ``mcp_gym.cassette.recorder.record_tap``; :class:`~mcp_gym.env.MCPEnv` passes it).
    """

    def __init__(
        self,
        servers: Mapping[str, ServerSpec],
        *,
        sampling: SamplingFn | None = None,
        elicitation: ElicitationFn | None = None,
        roots: Sequence[str | Path] | None = None,
        prefix_tools: bool | None = None,
        separator: str = "__",
        hidden_tools: Sequence[str] = HIDDEN_TOOLS,
        block_destructive: bool = False,
        tool_filter: ToolFilter | None = None,
        tap: TapFactory | None = None,
    ) -> None:
        if not servers:
            raise ValueError("MCPHost needs at least one server")
        self.sampling = sampling
        self.elicitation = elicitation
        self.roots = [_root_uri(r) for r in roots] if roots is not None else None
        self.prefix = (len(servers) > 1) if prefix_tools is None else prefix_tools
        self.separator = separator
        self.hidden = set(hidden_tools)
        self.block_destructive = block_destructive
        self.tool_filter = tool_filter or ToolFilter()
        callbacks = HostCallbacks(
            sampling=self._on_sampling,
            elicitation=self._on_elicitation,
            list_roots=self._on_list_roots if self.roots is not None else None,
            logging=self._on_log,
        )
        self.connections: dict[str, ServerConnection] = {
            alias: ServerConnection(alias, spec, callbacks, tap) for alias, spec in servers.items()
        }
        self.catalogue: dict[str, ToolEntry] = {}
        self._hashed: tuple[dict[str, ToolEntry], str] | None = None  # (catalogue, its catalogue_hash)
        self.all_tools: dict[str, dict[str, mt.Tool]] = {}
        self.clashes: dict[str, list[dict[str, str]]] = {}  # per alias: tools hidden by a same-named earlier tool
        self.logs: list[dict[str, Any]] = []
        self.sampling_log: list[dict[str, Any]] = []
        self.episode_id: str | None = None
        self.episode_task: str | None = None  # set by the env at reset, with episode_seed
        self.episode_seed: int | None = None
        # per alias: the connection and its count of tools changes when its tools were last listed for an episode
        self._episode_listing: dict[str, tuple[ServerConnection, int]] = {}
        self.start_failures: set[str] = set()  # failed in start(), not yet seen by a reset (see revive())

    # -- lifecycle ------------------------------------------------------------------------------------------------
    async def start(self, task_group: Any) -> None:
        """Connect to every server concurrently and list their tools, each within its ``connect_timeout`` (start,
        handshake and first listing together); failures become statuses."""
        async with anyio.create_task_group() as tg:
            for conn in self.connections.values():
                tg.start_soon(self._connect, conn, task_group)
        self.start_failures = {a for a, c in self.connections.items() if c.status != "ready"}
        self._rebuild()

    async def _connect(self, conn: ServerConnection, task_group: Any) -> None:
        t0 = anyio.current_time()
        await conn.start(task_group)
        if conn.status == "ready":
            mark = conn.events.tool_changes
            await self._list(conn, conn.spec.connect_timeout - (anyio.current_time() - t0),
                             bound=f"connect_timeout={conn.spec.connect_timeout:g} s")
            if conn.stale_discover:  # its reused server/discover answer did not hold: connect again (this one asks)
                await conn.close()
                self.connections[conn.alias] = new = ServerConnection(conn.alias, conn.spec, conn.callbacks,
                                                                      conn.tap_factory)
                await self._connect(new, task_group)
                return
            if self.episode_id is not None:  # listed for this episode: its reset need not list again (unless a
                self._episode_listing[conn.alias] = (conn, mark)  # change is reported: see listing_current)

    async def restart(self, alias: str, task_group: Any) -> None:
        """Close one server's connection and connect anew (reset by restart), within its ``connect_timeout``."""
        old = self.connections[alias]
        await old.close()
        self.connections[alias] = new = ServerConnection(alias, old.spec, old.callbacks, old.tap_factory)
        await self._connect(new, task_group)
        self._rebuild()

    async def adopt(self, conns: Mapping[str, ServerConnection], task_group: Any,
                    retire: Callable[[ServerConnection], None] | None = None) -> None:
        """Put ``conns`` (started servers) in place at once (cancelled later, the host owns them all), close the old
        ones (``retire``: hand each over, closed in the background), list the new ones' tools (stale: restart)."""
        old = [self.connections[alias] for alias in conns]
        self.connections.update(conns)
        for conn in old:
            await conn.close() if retire is None else retire(conn)
        for alias, conn in conns.items():
            if conn.status != "ready":
                continue
            mark = conn.events.tool_changes
            await self._list(conn, conn.spec.connect_timeout, bound=f"connect_timeout={conn.spec.connect_timeout:g} s")
            if conn.stale_discover:
                await self.restart(alias, task_group)
            elif self.episode_id is not None:
                self._episode_listing[alias] = (conn, mark)
        self._rebuild()

    async def revive(self, alias: str, task_group: Any) -> None:
        """Restart a failed or dead server for a new episode, saying so on the ``mcp_gym.client`` logger. A server
        whose :meth:`start` just failed is not retried by the reset that follows (that would double the wait, e.g.
        ``connect_timeout``, for the same answer): the reset reports it, and the next reset restarts it."""
        if alias in self.start_failures:
            self.start_failures.discard(alias)
            return
        conn = self.connections[alias]
        log.warning("mcp-gym: restarting server '%s' (%s: %s)", alias, conn.status, conn.error)
        await self.restart(alias, task_group)

    def report_unavailable(self, errors: list[dict[str, Any]]) -> str:
        """After a reset: every server that is not ready gets a ``server_dead`` entry in ``errors`` (unless one names
        it already) and a :class:`ServerUnavailableWarning`; returns the notice for the first observation's
        ``result`` (one ``Error: ...`` line per server; ``""`` when every server is up)."""
        lines = []
        for alias, conn in self.connections.items():
            if conn.status == "ready":
                continue
            message = (f"server '{alias}' is unavailable ({conn.status}: {conn.error}); "
                       "its tools are not offered this episode")
            if not any(e.get("server") == alias for e in errors):
                errors.append(ToolCallError("server_dead", message, server=alias).as_dict())
            warnings.warn(f"mcp-gym: {message}", ServerUnavailableWarning, stacklevel=2)
            lines.append(f"Error: {message}")
        return "\n".join(lines)

    async def close(self) -> None:
        """Close every connection."""
        async with anyio.create_task_group() as tg:
            for conn in self.connections.values():
                tg.start_soon(conn.close)

    def server_info(self) -> dict[str, dict[str, Any]]:
        """Per server: name, version, negotiated protocol version, status, error, and ``skipped_tools`` (each
        ``{"name", "reason"}``: listed tools that are not offered because their definition is unusable)."""
        out = {}
        for alias, conn in self.connections.items():
            info = conn.info()
            info["skipped_tools"] = info["skipped_tools"] + self.clashes.get(alias, [])
            out[alias] = info
        return out

    def startup_seconds(self, since: float) -> float:
        """Seconds the servers that connected after ``since`` (an ``anyio.current_time()``) took to start: spawn and
        handshake, summed over servers."""
        return sum(c.connect_seconds or 0.0 for c in self.connections.values()
                   if c.connected_at is not None and c.connected_at >= since)

    @property
    def meta(self) -> dict[str, Any]:
        """The ``_meta`` sent with every request: the episode id, and the episode's task id and seed when known."""
        if not self.episode_id:
            return {}
        meta: dict[str, Any] = {EPISODE_META_KEY: self.episode_id}
        if self.episode_task is not None:
            meta[TASK_META_KEY] = self.episode_task
        if self.episode_seed is not None:
            meta[SEED_META_KEY] = self.episode_seed
        return meta

    # -- catalogue ------------------------------------------------------------------------------------------------
    def exposed_name(self, alias: str, tool: str) -> str:
        """The agent-facing name of a server's tool."""
        return f"{alias}{self.separator}{tool}" if self.prefix else tool

    async def refresh_tools(self, aliases: Sequence[str] | None = None, *, timeout: float | None = None) -> bool:
        """Re-list tools (of ``aliases``, default all) and rebuild the catalogue; True if it changed.

        Each server's listing waits at most ``timeout`` seconds; a server that does not answer in time is failed
        (status ``failed``, "timed out after X s listing tools") and closed in the background.
        """
        targets = [a for a in (aliases or self.connections) if a in self.connections]
        async with anyio.create_task_group() as tg:
            for alias in targets:
                tg.start_soon(self._list, self.connections[alias], timeout)
        return self._rebuild()

    def listing_current(self, alias: str) -> bool:
        """Whether the tools listed for the last episode still hold for a new one on ``alias``: the same connection,
        ready, listed without error, no tools change reported since (nor pending), and a server that does report
        changes (result hints, or declared ``list_changed`` notifications that this connection receives)."""
        conn = self.connections[alias]
        mark = self._episode_listing.get(alias)
        return (mark is not None and mark[0] is conn and mark[1] == conn.events.tool_changes
                and not conn.events.tools_changed and conn.status == "ready" and conn.tools_error is None
                and alias in self.all_tools and conn.reports_tool_changes)

    async def refresh_for_episode(self, *, timeout: float | None = None) -> bool:
        """Re-list the tools of the servers whose listing may not hold for a new episode (see
        :meth:`listing_current`) and rebuild the catalogue; True if it changed. Servers whose tools cannot have
        changed are not asked again (a reset without waste)."""
        for _ in range(3):  # let change reports already received reach their handlers
            await anyio.sleep(0)
        stale = [a for a in self.connections if not self.listing_current(a)]
        if not stale:
            return False
        marks = {a: (self.connections[a], self.connections[a].events.tool_changes) for a in stale}
        changed = await self.refresh_tools(stale, timeout=timeout)
        for alias, mark in marks.items():
            self._episode_listing[alias] = mark  # a change reported during the listing leaves it stale
        return changed

    async def _list(self, conn: ServerConnection, timeout: float | None, bound: str | None = None) -> None:
        """List one server's tools into ``all_tools`` (a failed listing drops them, with the reason in its info)."""
        alias = conn.alias
        conn.events.tools_changed = False
        if conn.status != "ready":
            self.all_tools.pop(alias, None)
            return
        try:
            tools = await conn.list_tools(self.meta, timeout=timeout, bound=bound)
        except ListingTimeout:
            self.all_tools.pop(alias, None)  # the connection is failed with the reason
            return
        except Exception as e:  # noqa: BLE001 - a broken listing loses the server's tools, and says why
            self.all_tools.pop(alias, None)
            caps = conn.capabilities
            if conn.status == "ready" and caps is not None and caps.tools is not None:
                conn.tools_error = redact_text(f"tools/list failed: {_short_error(e)}")
            return
        conn.tools_error = None
        self.all_tools[alias] = {t.name: t for t in tools}
        conn.set_hints(RESET_TOOL in self.all_tools[alias])  # mcp-gym servers report changes in result _meta
        await conn.listener_acknowledged(timeout)  # a change the next call makes is then reported

    def rebuild(self) -> bool:
        """Rebuild :attr:`catalogue` from the ready servers' tools (after :attr:`all_tools` or a connection's status
        changed outside the host); ``True`` if the catalogue changed."""
        return self._rebuild()

    def _rebuild(self) -> bool:
        before = [(e.name, e.tool) for e in self.catalogue.values()]
        cat: dict[str, ToolEntry] = {}
        self.clashes, self.tool_filter.hidden = {}, {}
        for alias in self.connections:
            if self.connections[alias].status != "ready":
                continue
            for name, tool in self.all_tools.get(alias, {}).items():
                if name in self.hidden or (tool.meta or {}).get(HIDDEN_META_KEY) is True:
                    continue
                if self.block_destructive and _is_destructive(tool):
                    continue
                if _requires_task(tool):
                    continue  # task-augmented execution is not supported: the call could never succeed
                exposed = self.exposed_name(alias, name)
                if self.tool_filter.hide(exposed):
                    continue
                if exposed in cat:  # two servers, one name (prefixed: an alias holding the separator): first keeps it
                    first = cat[exposed]
                    advice = (f"its tool {show_name(first.server_tool)!r} is also {show_name(exposed)!r}: rename "
                              f"server {alias!r}" if self.prefix else "use prefix_tools=True")
                    self.clashes.setdefault(alias, []).append({
                        "name": show_name(name), "reason": f"the name is taken by server '{first.server}' ({advice})"})
                    continue
                cat[exposed] = ToolEntry(exposed, alias, name, tool)
        self.catalogue = cat
        if self.tool_filter.include is not None and all(c.status == "ready" for c in self.connections.values()):
            missing = self.tool_filter.unlisted({self.exposed_name(a, n) for a in self.connections
                                                 for n in self.all_tools.get(a, {})})
            if missing:  # every server is up and none lists them: a typo, or tools listed later (list_changed)
                warnings.warn(f"mcp-gym: include_tools names {', '.join(map(repr, missing))}, which no server lists "
                              f"now (the agent is shown: {', '.join(sorted(cat)) or 'no tool'}, submit)",
                              UserWarning, stacklevel=2)
        return before != [(e.name, e.tool) for e in cat.values()]

    def catalogue_hash(self) -> str:
        """:func:`catalogue_hash` of the current catalogue (computed once per catalogue: every change replaces it)."""
        if self._hashed is None or self._hashed[0] is not self.catalogue:
            self._hashed = (self.catalogue, catalogue_hash(list(self.catalogue.values())))
        return self._hashed[1]

    def has_tool(self, alias: str, tool: str) -> bool:
        """Whether the server lists ``tool`` (hidden tools included)."""
        return tool in self.all_tools.get(alias, {})

    def resolve(self, name: str) -> ToolEntry | None:
        """The catalogue entry for an agent-facing tool name."""
        return self.catalogue.get(name)

    def any_ready(self) -> bool:
        """Whether some server is ready (connected and usable)."""
        for c in self.connections.values():  # noqa: SIM110 - every step asks: a loop, not any()'s generator
            if c.status == "ready":
                return True
        return False

    def updates_pending(self) -> bool:
        """Whether some server sent ``resources/updated`` for a resource not re-read yet."""
        for c in self.connections.values():  # noqa: SIM110 - every step asks: a loop, not any()'s generator
            if c.events.updated:
                return True
        return False

    def poll_changes_now(self) -> bool | None:
        """:meth:`poll_changes` where it has nothing to do, without awaiting: ``False`` (no connection passed anything
        to the SDK since the last poll, none has a tools change pending, none died); ``None``: await it."""
        for c in self.connections.values():  # (a server that died while its tools are listed: the poll drops them)
            if not c.quiet(take=False) or c.events.tools_changed or (c.status != "ready" and c.alias in self.all_tools):
                return None
        return False

    def settled(self) -> bool:
        """Whether a step has nothing to poll: every server ready and quiet, nothing pending (so
        :meth:`poll_changes_now` is ``False``, :meth:`updates_pending` ``False`` and :meth:`any_ready` ``True``)."""
        for c in self.connections.values():
            if c.status != "ready" or not c.quiet(take=False) or c.events.tools_changed or c.events.updated:
                return False
        return bool(self.connections)

    async def poll_changes(self, *, timeout: float | None = None) -> bool:
        """Apply pending ``tools/list_changed`` and server deaths; True if the catalogue changed. Each re-listing
        waits at most ``timeout`` seconds (see :meth:`refresh_tools`)."""
        conns = self.connections
        quiet = True
        for c in conns.values():
            quiet = c.quiet() and quiet  # every connection's mark is taken
        if not quiet:
            await anyio.sleep(0)  # let notification handlers that are already queued run
        dirty = [a for a, c in conns.items() if c.events.tools_changed]
        dead = any(c.status != "ready" and c.alias in self.all_tools for c in conns.values())  # (died, still listed)
        if not dirty and not dead:
            return False
        if dead:
            for a, c in self.connections.items():
                if c.status != "ready":
                    self.all_tools.pop(a, None)
        changed = await self.refresh_tools(dirty, timeout=timeout) if dirty else False
        return self._rebuild() or changed or dead

    # -- calls ----------------------------------------------------------------------------------------------------
    async def call(
        self, name: str, arguments: Mapping[str, Any], *, timeout: float | None, meta: Mapping[str, Any] | None = None
    ) -> CallOutcome:
        """Call an agent-facing tool; every failure is described in ``outcome.error`` (kind, tool, server, message)."""
        entry = self.catalogue.get(name)  # (resolve() without its call)
        if entry is None:
            return CallOutcome(name, None, None, error=self._error("unknown_tool", name, None, self._unknown_msg(name)))
        return await self.call_server(entry.server, entry.server_tool, arguments, timeout=timeout, exposed=name,
                                      meta=meta)

    async def call_server(
        self,
        alias: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None,
        exposed: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> CallOutcome:
        """Call a tool by server alias and the server's own tool name (hidden tools included)."""
        exposed = exposed or self.exposed_name(alias, tool)
        out = CallOutcome(exposed, alias, tool)
        conn = self.connections[alias]
        t0 = time.perf_counter()
        try:
            out.result = await conn.call_tool(tool, arguments, timeout=timeout, progress=out._on_progress,
                                              meta={**self.meta, **meta} if meta else self.meta)
        except ConnectionLost as e:
            out.error = self._error("server_dead", exposed, alias, str(e))
        except MCPError as e:
            if e.code == -32001:
                http = isinstance(e.error.data, dict) and HTTP_TIMEOUT_DATA_KEY in e.error.data
                out.error = self._error("timeout", exposed, alias, e.error.message if http or timeout is None
                                        else f"no result within {timeout:g} s", code=e.code)
            elif e.code == CONNECTION_LOST and isinstance(e.error.data, dict) and \
                    HTTP_CONNECTION_DATA_KEY in e.error.data:
                out.error = self._error("connection_lost", exposed, alias, e.error.message, code=e.code)
            elif e.code == MESSAGE_TOO_LARGE:
                out.error = self._error("too_large", exposed, alias, e.error.message, code=e.code)
            else:
                out.error = self._error("jsonrpc", exposed, alias, e.error.message, code=e.code)
        except ValidationError as e:  # the result is not a valid CallToolResult
            out.error = self._error("invalid_result", exposed, alias,
                                    f"the server's result is not a valid CallToolResult: {_short_error(e)}")
        except RuntimeError as e:  # e.g. the SDK's structured-output validation against outputSchema
            out.error = self._error("invalid_result", exposed, alias, str(e))
        except Exception as e:  # noqa: BLE001 - whatever else the SDK raises costs this call only
            out.error = self._error("client_error", exposed, alias, _short_error(e))
        out.duration = time.perf_counter() - t0
        if out.result is not None and out.result.meta:
            hint = out.result.meta.get(CHANGES_META_KEY)
            if isinstance(hint, dict):  # an mcp-gym server says what changed (before its notification may arrive)
                conn.events.tools_changed |= hint.get("tools") is True
                conn.events.updated.update(u for u in hint.get("resources") or () if isinstance(u, str))
        return out

    def _unknown_msg(self, name: str) -> str:
        avail = ", ".join(sorted(self.catalogue)) or "none"
        return self.tool_filter.message(name, avail) or f"unknown tool '{name}' (available: {avail})"

    def _error(
        self, kind: str, tool: str | None, server: str | None, message: str, *, code: int | None = None,
        argument: str | None = None,
    ) -> dict[str, Any]:
        where = f"tool '{tool}'" + (f" on server '{server}'" if server else "")
        message = f"{where}: {message}" if kind != "unknown_tool" else message
        return ToolCallError(kind, message, tool=tool, server=server, argument=argument, code=code).as_dict()

    def drain_logs(self) -> list[dict[str, Any]]:
        """Logging notifications received since the last drain."""
        out, self.logs = self.logs, []
        return out


def _short_error(e: BaseException, limit: int = 500) -> str:
    """One line for an exception: pydantic errors as ``field: message`` (never the whole offending input)."""
    if isinstance(e, ValidationError):
        errs = e.errors()
        parts = [f"{'.'.join(str(x) for x in err.get('loc', ())) or 'result'}: {err.get('msg', 'invalid')}"
                 for err in errs[:3]]
        text = "; ".join(parts) + (f" (+{len(errs) - 3} more)" if len(errs) > 3 else "")
    else:
        text = f"{type(e).__name__}: {e}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
