"""Record and replay MCP servers: cassettes make benchmarks on live servers reproducible, offline.

**Record.** Any server spec takes ``record=path`` (a ``.jsonl`` file, or a directory that receives
``<alias>.jsonl``; by convention ``<run>/cassettes/``, next to the trajectory files)::

    env = MCPEnv({"memory": Stdio("mcp-server-memory", record="runs/mem/cassettes")}, tasks)

Every exchange of that connection is appended to the cassette: the negotiated protocol version, server info and
capabilities, then each request (method, canonical params, result or JSON-RPC error) and each notification, in the
order they happened, per episode.

**Replay.** :class:`Replay` is a server spec that answers from a cassette, in-process, with the original server
absent; :func:`serve_replay` (``mcp-gym serve --replay``) serves a cassette over stdio or Streamable HTTP::

    env = MCPEnv({"memory": Replay("runs/mem/cassettes/memory.jsonl")}, tasks)   # same tools, results, rewards

**File format** (``mcp-gym-cassette`` version 1): JSON Lines, UTF-8, one JSON object per line, appended with one
``write`` per line (``O_APPEND``) as events complete, so a crash loses at most the line being written and a torn last
line is skipped on reading; several connections (restarts, processes of a vector env) may append to one file. Kinds:

* ``header`` - written when a connection is established, so the first line of every file is one: ``format``,
  ``version``, ``connection`` (id of this connection), ``alias``, ``transport``, ``target``, ``protocol_version``,
  ``server_info``, ``capabilities``, ``instructions``, ``library_version``, ``t``.
* ``episode`` - the first time a connection sees an episode: ``connection``, ``episode`` (the recorded episode id,
  which joins the trajectory files' ``episode_id``), ``task_id``, ``seed``, ``t``.
* ``request`` - ``connection``, ``episode`` (``null`` before the first episode), ``seq``, ``method``, ``params``,
  then ``result`` (the MCP result object) or ``error`` (``{code, message, data}``), ``t`` (start, Unix seconds) and
  ``duration``. A paginated ``tools/list`` is stored as one page holding every tool.
* ``notification`` - ``connection``, ``episode``, ``seq``, ``method``, ``params``, ``t``; ``via: "listen"`` when it
  came on a 2026-07-28 ``subscriptions/listen`` stream.

``seq`` counts per connection: a request takes its number when it is *sent* (its line is written when it completes),
a notification when it *arrives*; a notification belongs to the last request sent before it on its connection (the
call it happened during, or right after). Requests without an episode in ``_meta`` (``resources/list``) belong to
the connection's current episode. Params are canonical: ``_meta`` keys that differ between runs (episode id, task,
seed, progress tokens, SDK envelope keys ``io.modelcontextprotocol/*``) are dropped, and matching compares JSON with
sorted keys. Session plumbing (``initialize``, ``resources/subscribe``, ``logging/setLevel``, ``subscriptions/listen``,
``ping``) is not recorded: the replay server acknowledges it.

**Matching on replay.** A new episode (a new ``mcp-gym/episode`` id) is mapped to a recorded episode with the same
``(task_id, seed)`` (sent as ``_meta`` by the env), the least replayed first, in recording order; without them, the
next recorded episode in order. Within an episode, the k-th occurrence of a call ``(method, canonical params)`` gets
the k-th recorded answer. Listings (``tools/list``, ``resources/list``, ...) and ``resources/read`` are side-effect
free and match by position instead: the answer recorded after the last replayed call (if no other call came between),
else the latest one before it - so a read repeated or moved by notification timing still sees its step's state. The
notifications recorded with a request are sent again while answering it (era-aware: handshake
``notifications/...`` or ``subscriptions/listen`` events) and, for ``tools/call``, also listed under the result's
``_meta["mcp-gym/changes"]`` so the env applies them in the same step. A request that was never recorded gets a tool
result with ``isError`` (``tools/call``) or a JSON-RPC error :data:`REPLAY_MISS` (other methods, and every method
with ``strict=True``) whose message names the closest recorded call.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import time
import uuid
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)

from mcp_gym._version import __version__
from mcp_gym.client.connection import ConnectionLost, ServerConnection
from mcp_gym.client.specs import InProcess, Protocol, ServerSpec, normalise_servers
from mcp_gym.protocol import CHANGES_META_KEY, EPISODE_META_KEY, SEED_META_KEY, TASK_META_KEY

__all__ = [
    "FORMAT",
    "VERSION",
    "REPLAY_MISS",
    "Recorder",
    "record_tap",
    "Cassette",
    "Exchange",
    "Replay",
    "ReplayServer",
    "serve_replay",
    "cassette_path",
    "cassette_dir",
    "with_record",
    "record_servers",
    "replay_spec",
    "replay_servers",
    "canonical_params",
    "canonical_json",
    "main",
]

FORMAT = "mcp-gym-cassette"
VERSION = 1
REPLAY_MISS = -32042
"""JSON-RPC error code of a request the cassette has no answer for."""
CASSETTES_DIR = "cassettes"
"""Conventional sub-directory of a run directory holding its cassettes."""

_VOLATILE_META = frozenset({EPISODE_META_KEY, TASK_META_KEY, SEED_META_KEY, "progressToken"})
_SDK_META_PREFIX = "io.modelcontextprotocol/"
_LISTINGS = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})
_REPEATABLE = _LISTINGS | {"resources/read"}
_NOT_RECORDED = frozenset({"notifications/progress", "notifications/cancelled"})


# -- canonical form -----------------------------------------------------------------------------------------------
def _clean_meta(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, Mapping):
        return {}
    return {k: v for k, v in meta.items() if k not in _VOLATILE_META and not str(k).startswith(_SDK_META_PREFIX)}


def canonical_params(method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Request params without the ``_meta`` keys that differ between runs (episode id, task, seed, progress token,
    SDK envelope keys), without ``null`` values, and with ``tools/call`` arguments defaulting to ``{}``."""
    out = {k: v for k, v in dict(params or {}).items() if v is not None and k != "_meta"}
    meta = _clean_meta((params or {}).get("_meta"))
    if meta:
        out["_meta"] = meta
    if method == "tools/call":
        out.setdefault("arguments", {})
    return out


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: the matching key of params."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def _result_dict(result: Any) -> dict[str, Any]:
    data = dict(_dump(result) or {})
    meta = data.get("_meta")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if not k.startswith(_SDK_META_PREFIX)}
        if meta:
            data["_meta"] = meta
        else:
            data.pop("_meta")
    return data


def _error_dict(e: BaseException) -> dict[str, Any]:
    if isinstance(e, MCPError):
        err: dict[str, Any] = {"code": e.code, "message": e.error.message}
        if e.error.data is not None:
            err["data"] = _dump(e.error.data)
        return err
    if isinstance(e, ConnectionLost):
        return {"code": -32000, "message": str(e), "data": {"exception": "ConnectionLost"}}
    return {"code": -32603, "message": f"{type(e).__name__}: {e}", "data": {"exception": type(e).__name__}}


# -- recording ----------------------------------------------------------------------------------------------------
def cassette_path(record: str | os.PathLike[str], alias: str) -> Path:
    """The cassette file for ``record=`` of server ``alias``: the path itself if it ends in ``.jsonl``, else
    ``<record>/<alias>.jsonl``."""
    p = Path(record)
    return p if p.suffix == ".jsonl" else p / f"{alias}.jsonl"


def cassette_dir(run_dir: str | os.PathLike[str]) -> Path:
    """Where a run directory keeps its cassettes (``<run>/cassettes``)."""
    return Path(run_dir) / CASSETTES_DIR


def with_record(spec: ServerSpec, record: str | os.PathLike[str] | None) -> ServerSpec:
    """A copy of ``spec`` that records to ``record`` (see :func:`cassette_path`)."""
    import copy

    new = copy.copy(spec)
    object.__setattr__(new, "record", record)
    return new


def record_servers(servers: Any, directory: str | os.PathLike[str]) -> dict[str, ServerSpec]:
    """Every server of an env (``MCPEnv``'s ``servers`` argument: specs, command lines, URLs or server objects)
    recording to ``directory/<alias>.jsonl``."""
    return {alias: with_record(spec, directory) for alias, spec in normalise_servers(servers).items()}


def record_tap(conn: ServerConnection) -> Recorder | None:
    """The :data:`~mcp_gym.client.connection.TapFactory` of recording: a :class:`Recorder` for a connection whose
    spec has ``record=``, else no tap (:class:`~mcp_gym.env.MCPEnv` passes it to its host when a spec records)."""
    return Recorder.open(conn) if conn.spec.record is not None else None


class Recorder:
    """The :class:`~mcp_gym.client.connection.Tap` a connection feeds when its spec has ``record=``.

    All methods run on the runtime loop; each event is one ``write`` of one line to the cassette (``O_APPEND``).
    """

    def __init__(self, path: Path, alias: str) -> None:
        self.path = path
        self.alias = alias
        self.connection = uuid.uuid4().hex[:12]
        self.episode: str | None = None
        self._episodes: set[str] = set()
        self._seq = 0
        self._pending: list[dict[str, Any]] | None = []  # events before the header (none expected)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @classmethod
    def open(cls, conn: Any) -> Recorder:
        """Open the cassette of a connection (``conn.spec.record``, ``conn.alias``)."""
        return cls(cassette_path(conn.spec.record, conn.alias), conn.alias)

    def _write(self, event: dict[str, Any]) -> None:
        if self._pending is not None:
            self._pending.append(event)
            return
        if self._fd is None:
            return
        data = (json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def connected(self, conn: Any) -> None:
        """Write the header: protocol version, server info and capabilities of the established connection."""
        client = conn.client
        info = caps = instructions = None
        with contextlib.suppress(RuntimeError):
            info = _dump(client.server_info)
        with contextlib.suppress(RuntimeError):
            caps = _dump(client.server_capabilities)
        with contextlib.suppress(RuntimeError, AttributeError):
            instructions = client.instructions
        pending, self._pending = self._pending or [], None
        self._write({
            "kind": "header", "format": FORMAT, "version": VERSION, "connection": self.connection,
            "alias": self.alias, "transport": conn.spec.transport, "target": conn.spec.describe(),
            "protocol_version": conn.protocol_version, "server_info": info, "capabilities": caps,
            "instructions": instructions, "library_version": __version__, "t": time.time(),
        })
        for event in pending:
            self._write(event)

    def _enter(self, meta: Mapping[str, Any]) -> None:
        episode = meta.get(EPISODE_META_KEY)
        if not isinstance(episode, str) or not episode:
            return
        self.episode = episode
        if episode not in self._episodes:
            self._episodes.add(episode)
            self._write({"kind": "episode", "connection": self.connection, "episode": episode,
                         "task_id": meta.get(TASK_META_KEY), "seed": meta.get(SEED_META_KEY), "t": time.time()})

    async def exchange(self, method: str, params: Mapping[str, Any] | None, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run one request (``call``) and record it with its result or error (cancelled requests are not kept)."""
        self._enter((params or {}).get("_meta") or {})
        self._seq += 1
        event: dict[str, Any] = {"kind": "request", "connection": self.connection, "episode": self.episode,
                                 "seq": self._seq, "method": method, "params": canonical_params(method, params),
                                 "t": time.time()}
        t0 = time.perf_counter()
        try:
            result = await call()
        except BaseException as e:
            if not isinstance(e, anyio.get_cancelled_exc_class()):
                event["error"] = _error_dict(e)
                event["duration"] = time.perf_counter() - t0
                self._write(event)
            raise
        event["result"] = _result_dict(result)
        event["duration"] = time.perf_counter() - t0
        self._write(event)
        return result

    def notification(self, note: Any) -> None:
        """Record a server notification (both protocol eras reach the connection's message handler)."""
        method = getattr(note, "method", None)
        if not isinstance(method, str) or method in _NOT_RECORDED:
            return
        params = _dump(getattr(note, "params", None)) or {}
        via = None
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and any(k.startswith(_SDK_META_PREFIX) for k in meta):
            via = "listen" if any(k.endswith("subscriptionId") for k in meta) else None
            params = canonical_params(method, params)
        self._seq += 1
        event = {"kind": "notification", "connection": self.connection, "episode": self.episode, "seq": self._seq,
                 "method": method, "params": params, "t": time.time()}
        if via:
            event["via"] = via
        self._write(event)

    def close(self) -> None:
        """Close the file (idempotent); a file left empty by a connection that never connected is removed."""
        if self._fd is None:
            return
        empty = self._pending is not None and os.fstat(self._fd).st_size == 0
        os.close(self._fd)
        self._fd = None
        if empty:
            with contextlib.suppress(OSError):
                self.path.unlink()


# -- reading ------------------------------------------------------------------------------------------------------
@dataclass
class Exchange:
    """One recorded request with its answer and the notifications that belong to it."""

    method: str
    params: dict[str, Any]
    key: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    notifications: list[dict[str, Any]] = field(default_factory=list)
    episode: str | None = None
    index: int = -1
    """Position in its episode's tape."""

    def describe(self) -> str:
        """``method params`` in canonical JSON."""
        return f"{self.method} {canonical_json(self.params)}"


@dataclass
class EpisodeTape:
    """The recorded exchanges of one episode, in order."""

    id: str | None
    task_id: str | None = None
    seed: int | None = None
    exchanges: list[Exchange] = field(default_factory=list)
    by_key: dict[tuple[str, str], list[Exchange]] = field(default_factory=dict)

    def add(self, ex: Exchange) -> None:
        ex.index = len(self.exchanges)
        self.exchanges.append(ex)
        self.by_key.setdefault((ex.method, ex.key), []).append(ex)


@dataclass
class Cassette:
    """A cassette file read back: its headers and the recorded episodes (``None`` = before any episode)."""

    path: Path
    headers: list[dict[str, Any]]
    episodes: dict[str | None, EpisodeTape]
    notifications: int = 0

    @property
    def header(self) -> dict[str, Any]:
        """The first header (identity of the recorded server)."""
        return self.headers[0]

    @property
    def protocol_version(self) -> str | None:
        return self.header.get("protocol_version")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Cassette:
        """Read a cassette; unparsable lines (a torn last line after a crash) are skipped."""
        path = Path(path)
        headers: list[dict[str, Any]] = []
        per_conn: dict[str, list[dict[str, Any]]] = {}
        episodes: dict[str | None, EpisodeTape] = {None: EpisodeTape(None)}
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                kind = ev.get("kind")
                if kind == "header":
                    if ev.get("format") != FORMAT:
                        raise ValueError(f"{path}: not an mcp-gym cassette (format {ev.get('format')!r})")
                    if int(ev.get("version", 0)) > VERSION:
                        raise ValueError(f"{path}: cassette version {ev.get('version')} is newer than {VERSION}")
                    headers.append(ev)
                elif kind == "episode":
                    if ev["episode"] not in episodes:
                        episodes[ev["episode"]] = EpisodeTape(ev["episode"], ev.get("task_id"), ev.get("seed"))
                elif kind in ("request", "notification"):
                    per_conn.setdefault(ev.get("connection", ""), []).append(ev)
        if not headers:
            raise ValueError(f"{path}: no cassette header")
        n_notes = 0
        for events in per_conn.values():  # connections in order of their first event
            events.sort(key=lambda e: e["seq"])
            last: Exchange | None = None
            early: list[dict[str, Any]] = []
            for ev in events:
                if ev["kind"] == "notification":
                    note = {"method": ev["method"], "params": ev.get("params") or {}}
                    n_notes += 1
                    (last.notifications if last is not None else early).append(note)
                    continue
                params = ev.get("params") or {}
                ex = Exchange(ev["method"], params, canonical_json(canonical_params(ev["method"], params)),
                              ev.get("result"), ev.get("error"), early, ev.get("episode"))
                early = []
                tape = episodes.get(ex.episode)
                if tape is None:
                    tape = episodes[ex.episode] = EpisodeTape(ex.episode)
                tape.add(ex)
                last = ex
        return cls(path, headers, episodes, n_notes)

    def recorded_episodes(self) -> list[EpisodeTape]:
        """The episodes (without the pre-episode tape), in recording order."""
        return [t for k, t in self.episodes.items() if k is not None]

    def all_exchanges(self) -> Iterable[Exchange]:
        for tape in self.episodes.values():
            yield from tape.exchanges

    def tools(self) -> list[dict[str, Any]]:
        """Every tool listed by any ``tools/list`` answer (first version of each name), as MCP tool dicts."""
        seen: dict[str, dict[str, Any]] = {}
        for ex in self.all_exchanges():
            if ex.method == "tools/list" and ex.result:
                for tool in ex.result.get("tools") or []:
                    seen.setdefault(tool.get("name"), tool)
        return list(seen.values())


# -- replay -------------------------------------------------------------------------------------------------------
class _ReplayState:
    """Mapping of replayed episodes to recorded ones, and occurrence counters (shared by every session)."""

    def __init__(self, cassette: Cassette) -> None:
        self.cassette = cassette
        self.mapping: dict[str, str | None] = {}
        self.wanted: dict[str, tuple[Any, Any]] = {}  # replayed episode -> (task_id, seed) it asked for
        self.uses: dict[str | None, int] = defaultdict(int)
        self.counts: dict[tuple[str | None, str, str], int] = defaultdict(int)
        self.cursor: dict[str, int] = {}  # replayed episode -> tape index of its last replayed state-changing call
        self.session_episode: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self.last_episode: str | None = None

    def recorded_for(self, episode: str, task_id: Any, seed: Any) -> str | None:
        if episode in self.mapping:
            return self.mapping[episode]
        self.wanted[episode] = (task_id, seed)
        tapes = self.cassette.recorded_episodes()
        if task_id is not None:
            same = [t for t in tapes if t.task_id == task_id and (seed is None or t.seed == seed)]
            tapes = same or ([] if any(t.task_id is not None for t in tapes) else tapes)
        chosen = None
        if tapes:
            least = min(self.uses[t.id] for t in tapes)
            chosen = next(t.id for t in tapes if self.uses[t.id] == least)
            self.uses[chosen] += 1
        self.mapping[episode] = chosen
        return chosen


class ReplayServer(Server[Any]):
    """A low-level MCP server that answers from a :class:`Cassette` (see the module docs for matching rules).

    Args:
        cassette: The cassette (or its path).
        strict: Answer unrecorded ``tools/call`` with a JSON-RPC error instead of an ``isError`` result.
    """

    def __init__(self, cassette: Cassette | str | os.PathLike[str], *, strict: bool = False) -> None:
        if not isinstance(cassette, Cassette):
            cassette = Cassette.load(cassette)
        self.cassette = cassette
        self.strict = strict
        self.state = _ReplayState(cassette)
        self.bus = InMemorySubscriptionBus()
        header = cassette.header
        info = dict(header.get("server_info") or {})
        super().__init__(
            str(info.get("name") or header.get("alias") or "replay"),
            version=str(info.get("version") or ""),
            title=info.get("title"),
            description=info.get("description"),
            website_url=info.get("websiteUrl"),
            instructions=header.get("instructions"),
            on_list_tools=self._listing("tools/list"),
            on_call_tool=self._call_tool,
            on_list_resources=self._listing("resources/list"),
            on_list_resource_templates=self._listing("resources/templates/list"),
            on_read_resource=self._generic("resources/read"),
            on_list_prompts=self._listing("prompts/list"),
            on_get_prompt=self._generic("prompts/get"),
            on_completion=self._generic("completion/complete"),
            on_subscribe_resource=self._ack,
            on_unsubscribe_resource=self._ack,
            on_subscriptions_listen=ListenHandler(self.bus),
        )
        self.add_request_handler("logging/setLevel", mt.SetLevelRequestParams, self._ack)
        self._capabilities = mt.ServerCapabilities.model_validate(header.get("capabilities") or {})
        self.handshake_only = (cassette.protocol_version or "") < "2026"
        if self.handshake_only:  # like the recorded handshake-era server: no server/discover
            self.add_request_handler("server/discover", mt.RequestParams, self._no_discover)

    async def run(self, read_stream: Any, write_stream: Any, initialization_options: Any,
                  raise_exceptions: bool = False) -> None:
        """Serve one stream connection; a handshake-era cassette is served in the handshake era only (a client
        probing ``server/discover`` falls back to ``initialize``, as with the recorded server)."""
        if not self.handshake_only:
            await super().run(read_stream, write_stream, initialization_options, raise_exceptions)
            return
        from mcp.server.runner import serve_loop

        async with self.lifespan(self) as state:
            await serve_loop(self, read_stream, write_stream, lifespan_state=state,
                             init_options=initialization_options, raise_exceptions=raise_exceptions)

    def get_capabilities(self, *args: Any, **kwargs: Any) -> mt.ServerCapabilities:
        """The recorded server's capabilities."""
        return self._capabilities.model_copy(deep=True)

    # -- handlers -------------------------------------------------------------------------------------------------
    async def _ack(self, ctx: ServerRequestContext[Any], params: Any) -> mt.EmptyResult:
        return mt.EmptyResult()

    async def _no_discover(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        raise MCPError(code=-32601, message="Method not found: server/discover")

    def _listing(self, method: str) -> Callable[[ServerRequestContext[Any], Any], Awaitable[Any]]:
        async def handler(ctx: ServerRequestContext[Any], params: Any) -> Any:
            return await self._answer(ctx, method)

        return handler

    def _generic(self, method: str) -> Callable[[ServerRequestContext[Any], Any], Awaitable[Any]]:
        return self._listing(method)

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        return await self._answer(ctx, "tools/call")

    # -- matching -------------------------------------------------------------------------------------------------
    def _episode(self, ctx: ServerRequestContext[Any]) -> str | None:
        raw = dict(ctx.params or {})
        meta = raw.get("_meta") if isinstance(raw.get("_meta"), Mapping) else {}
        episode = meta.get(EPISODE_META_KEY)
        state = self.state
        if isinstance(episode, str) and episode:
            state.recorded_for(episode, meta.get(TASK_META_KEY), meta.get(SEED_META_KEY))
            try:
                state.session_episode[ctx.session] = episode
            except TypeError:  # a session that cannot be weakly referenced
                state.last_episode = episode
            return episode
        try:
            return state.session_episode.get(ctx.session)
        except TypeError:
            return state.last_episode

    def lookup(self, episode: str | None, method: str, params: Mapping[str, Any] | None) -> Exchange | str:
        """The recorded exchange answering this request in replayed episode ``episode``, or why there is none.

        Calls (``tools/call``, ...) match by occurrence: the k-th identical request gets the k-th recorded answer.
        Listings and ``resources/read`` match by position: the answer recorded after the last replayed call (before
        the next one), else the latest one before it - so a read repeated or moved by notification timing still
        sees the state of its step. Requests without an episode id (a plain MCP client) are matched against the
        whole cassette in recording order.
        """
        state = self.state
        key = canonical_json(canonical_params(method, params))
        k = state.counts[(episode, method, key)]
        state.counts[(episode, method, key)] += 1
        tape: EpisodeTape | None = None
        if episode is None:
            hits = [ex for t in self.cassette.episodes.values() for ex in t.by_key.get((method, key), [])]
            if k < len(hits) or (hits and method in _REPEATABLE):
                return hits[min(k, len(hits) - 1)]
        else:
            recorded = state.mapping.get(episode)
            tape = self.cassette.episodes.get(recorded) if recorded is not None else None
            hits = tape.by_key.get((method, key), []) if tape is not None else []
            if hits and tape is not None and method in _REPEATABLE:
                return self._at_position(tape, hits, state.cursor.get(episode, -1))
            if k < len(hits):
                state.cursor[episode] = hits[k].index
                return hits[k]
        if method in _REPEATABLE:  # side-effect free: an answer from outside the episode beats none
            for other in (self.cassette.episodes[None], *self.cassette.recorded_episodes()):
                found = other.by_key.get((method, key))
                if found:
                    return found[-1]
        return self._miss(episode, tape, method, key, k, len(hits))

    @staticmethod
    def _at_position(tape: EpisodeTape, hits: list[Exchange], cursor: int) -> Exchange:
        after = next((h for h in hits if h.index > cursor), None)
        before = [h for h in hits if h.index <= cursor]
        if after is not None:
            between = tape.exchanges[cursor + 1 : after.index]
            if not before or all(ex.method in _REPEATABLE for ex in between):
                return after
        return before[-1]

    def _miss(self, episode: str | None, tape: EpisodeTape | None, method: str, key: str, k: int, n: int) -> str:
        if episode is None:
            where = "in the cassette (request without an episode id)"
        elif tape is None:
            task, seed = self.state.wanted.get(episode, (None, None))
            where = (f"(no recorded episode of task {task} with seed {seed})" if task is not None
                     else "(no recorded episode to match this one)")
        else:
            where = f"in recorded episode {tape.id}"
            if tape.task_id is not None:
                where += f" (task {tape.task_id}, seed {tape.seed})"
        msg = f"mcp-gym replay: no recorded response for {method} {key} {where}"
        if n:
            return msg + f": it was recorded {n} time(s) and this is call {k + 1}"
        pool = list(tape.exchanges) if tape is not None else list(self.cassette.all_exchanges())
        same = [ex for ex in pool if ex.method == method] or pool
        if same:
            target = f"{method} {key}"
            best = max(same[:500], key=lambda ex: difflib.SequenceMatcher(None, target, ex.describe()).ratio())
            msg += f"; closest recorded call: {best.describe()}"
        return msg

    async def _answer(self, ctx: ServerRequestContext[Any], method: str) -> Any:
        episode = self._episode(ctx)
        found = self.lookup(episode, method, ctx.params)
        if isinstance(found, str):
            if method == "tools/call" and not self.strict:
                return mt.CallToolResult(content=[mt.TextContent(type="text", text=found)], is_error=True)
            raise MCPError(code=REPLAY_MISS, message=found)
        await self._emit(ctx, found.notifications)
        if found.error is not None:
            err = found.error
            raise MCPError(code=int(err.get("code") or -32603), message=str(err.get("message", "")),
                           data=err.get("data"))
        result = dict(found.result or {})
        if method == "tools/call":
            result = _with_hints(result, found.notifications)
        return result

    async def _emit(self, ctx: ServerRequestContext[Any], notes: Sequence[Mapping[str, Any]]) -> None:
        modern = (ctx.protocol_version or "") >= "2026"
        for note in notes:
            method, params = note.get("method"), note.get("params") or {}
            with contextlib.suppress(Exception):
                if method == "notifications/tools/list_changed":
                    await (self.bus.publish(ToolsListChanged()) if modern else ctx.session.send_tool_list_changed())
                elif method == "notifications/resources/updated":
                    uri = str(params.get("uri"))
                    await (self.bus.publish(ResourceUpdated(uri=uri)) if modern
                           else ctx.session.send_resource_updated(uri))
                elif method == "notifications/resources/list_changed":
                    await (self.bus.publish(ResourcesListChanged()) if modern
                           else ctx.session.send_resource_list_changed())
                elif method == "notifications/prompts/list_changed":
                    await (self.bus.publish(PromptsListChanged()) if modern
                           else ctx.session.send_prompt_list_changed())
                elif method == "notifications/message" and not modern:
                    await ctx.session.send_log_message(params.get("level", "info"), params.get("data"),
                                                       params.get("logger"))


def _with_hints(result: dict[str, Any], notes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    tools = any(n.get("method") == "notifications/tools/list_changed" for n in notes)
    updated = [n for n in notes if n.get("method") == "notifications/resources/updated"]
    uris = [str((n.get("params") or {}).get("uri")) for n in updated]
    if not tools and not uris:
        return result
    meta = dict(result.get("_meta") or {})
    hint = dict(meta.get(CHANGES_META_KEY) or {})
    if tools:
        hint["tools"] = True
    if uris:
        hint["resources"] = list(dict.fromkeys([*(hint.get("resources") or []), *uris]))
    meta[CHANGES_META_KEY] = hint
    return {**result, "_meta": meta}


class Replay(InProcess):
    """A server spec answering from a cassette in-process, with the original server absent.

    Args:
        path: The cassette file (``<run>/cassettes/<alias>.jsonl``).
        strict: Unrecorded ``tools/call`` requests get a JSON-RPC error (the env reports ``ToolCallFailed`` in strict
            mode) instead of an ``isError`` result.
        protocol: How to connect; default: the recorded era (``legacy`` for handshake-era recordings, else ``auto``).
        listen: The 2026-era change stream, as for any spec (``None``: unless the server hints changes in results).
        record: Record the replayed session too (e.g. to compare two runs' cassettes).
    """

    path: str = ""
    strict: bool = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        strict: bool = False,
        protocol: Protocol | None = None,
        connect_timeout: float = 30.0,
        listen: bool | None = None,
        record: str | os.PathLike[str] | None = None,
    ) -> None:
        server = ReplayServer(Cassette.load(path), strict=strict)
        if protocol is None:
            protocol = "auto" if (server.cassette.protocol_version or "") >= "2026" else "legacy"
        super().__init__(server, protocol=protocol, connect_timeout=connect_timeout, listen=listen, record=record)
        object.__setattr__(self, "path", os.fspath(path))
        object.__setattr__(self, "strict", strict)

    @property
    def cassette(self) -> Cassette:
        """The cassette being replayed."""
        return self.server.cassette

    @property
    def transport(self) -> str:
        return "replay"

    def describe(self) -> str:
        return f"replay {self.path}"


def _find_cassette(path: str | os.PathLike[str], alias: str) -> Path:
    p = Path(path)
    if p.is_file():
        return p
    for candidate in (p / CASSETTES_DIR / f"{alias}.jsonl", p / f"{alias}.jsonl"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no cassette of server {alias!r} in {p} (looked for {alias}.jsonl and "
                            f"{CASSETTES_DIR}/{alias}.jsonl)")


def replay_spec(path: str | os.PathLike[str], alias: str, **kwargs: Any) -> Replay:
    """A :class:`Replay` of server ``alias`` from a cassette file, a cassettes directory or a run directory."""
    return Replay(_find_cassette(path, alias), **kwargs)


def replay_servers(directory: str | os.PathLike[str], *, strict: bool = False) -> dict[str, Replay]:
    """``{alias: Replay}`` for every cassette in a directory (a run's ``cassettes/`` folder, or the run itself)."""
    d = Path(directory)
    if (d / CASSETTES_DIR).is_dir():
        d = d / CASSETTES_DIR
    out = {}
    for p in sorted(d.glob("*.jsonl")):
        spec = Replay(p, strict=strict)
        out[str(spec.cassette.header.get("alias") or p.stem)] = spec
    if not out:
        raise FileNotFoundError(f"no cassettes (*.jsonl) in {d}")
    return out


def serve_replay(
    path: str | os.PathLike[str],
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    strict: bool = False,
    json_response: bool = False,
) -> None:
    """Serve a cassette as a real MCP server over ``stdio`` or Streamable ``http`` (``http://host:port/mcp``)
    until stopped (``mcp-gym serve --replay PATH``)."""
    import logging

    server = ReplayServer(Cassette.load(path), strict=strict)
    logging.getLogger("mcp").setLevel(logging.WARNING)
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        async def run() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run)
    elif transport in ("http", "streamable-http"):
        import uvicorn

        app = server.streamable_http_app(json_response=json_response, host=host)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    else:
        raise ValueError(f"unknown transport {transport!r}: use 'stdio' or 'http'")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m mcp_gym.cassette PATH [--transport stdio|http] [--port N] [--strict]``: serve a cassette."""
    p = argparse.ArgumentParser(prog="python -m mcp_gym.cassette", description="Serve an MCP cassette (replay).")
    p.add_argument("path", help="cassette file (.jsonl)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--strict", action="store_true", help="JSON-RPC error for unrecorded tool calls")
    p.add_argument("--json-response", action="store_true", help="plain JSON responses over HTTP (no SSE)")
    a = p.parse_args(argv)
    serve_replay(a.path, a.transport, a.host, a.port, strict=a.strict, json_response=a.json_response)


if __name__ == "__main__":
    main()
