"""The replay server: :class:`ReplayServer` answers MCP requests from a :class:`~mcp_gym.cassette.Cassette`."""

from __future__ import annotations

import contextlib
import difflib
import os
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

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

from mcp_gym.cassette.format import (
    _REPEATABLE,
    REPLAY_MISS,
    canonical_json,
    canonical_params,
)
from mcp_gym.cassette.reader import Cassette, EpisodeTape, Exchange
from mcp_gym.protocol import CHANGES_META_KEY, EPISODE_META_KEY, SEED_META_KEY, TASK_META_KEY

__all__ = ["ReplayServer"]

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
        given = raw.get("_meta")
        meta = given if isinstance(given, Mapping) else {}
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

