"""Recording middleware at the MCP client layer: records an agent that talks to servers without the Gym loop.

:class:`RecordingClient` wraps an SDK ``mcp.Client`` (or a :class:`~mcp_gym.client.connection.ServerConnection`) and
records every ``call_tool``; :class:`RecordingHost` wraps an :class:`~mcp_gym.client.host.MCPHost` and records every
``call``. Both write the same files as :class:`~mcp_gym.recording.RecordTrajectories` (``recorder = "client"``)::

    async with RecordingClient(Client(server), "runs/agent", policy="my-agent") as client:
        await client.start_episode(task_id="t1", prompt="Add 3", key="t1#0")
        await client.call_tool("add", {"amount": 3})
        client.end_episode(final_answer="3", success=True)

Step rewards follow the reward convention (``reward``/``done`` in structured content or ``_meta``) when the server
uses it, else they are null. A failed call is a failed step (``is_error``): an ``isError`` result, a JSON-RPC error
(``error.kind`` ``jsonrpc``), and a result that is neither but cannot be read as one value
(:func:`mcp_gym.protocol.result_problem`: no content and no ``structuredContent``, or the two disagreeing; kind
``invalid_result``, no reward read from it). Calls outside an episode open one implicitly; an open episode is
finished on close with ``termination = "closed"``. Everything else (``list_tools``, ``read_resource``, ...) passes
through to the wrapped object.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import mcp.types as mt
from mcp import MCPError

from mcp_gym.client.host import CallOutcome, MCPHost, ToolEntry
from mcp_gym.protocol import ToolCallError, catalogue_fingerprint, result_problem
from mcp_gym.recording.writer import EpisodeWriter, TrajectoryWriter, writer_for
from mcp_gym.rewards import read_reward

__all__ = ["RecordingClient", "RecordingHost"]

_TIMEOUT = -32001


class _RecordingMiddleware:
    """Episode bookkeeping shared by the client and host middlewares."""

    def __init__(
        self,
        target: Any,
        path: str | os.PathLike[str] | TrajectoryWriter,
        *,
        env_id: str | None = None,
        policy: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        **writer_options: Any,
    ) -> None:
        self._target = target
        self.writer, self._owns_writer = writer_for(path, **writer_options)
        self.env_id = env_id
        self.policy = policy
        self.metadata = dict(metadata or {})
        self.episode: EpisodeWriter | None = None
        self._tool_hash: str | None = None

    def __getattr__(self, name: str) -> Any:
        if name == "_target":
            raise AttributeError(name)
        return getattr(self._target, name)

    # -- to implement ---------------------------------------------------------------------------------------------
    async def _catalogue(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """``(tool schemas, servers info)`` as the agent sees them now."""
        raise NotImplementedError

    # -- episodes -------------------------------------------------------------------------------------------------
    async def start_episode(
        self,
        *,
        key: str | None = None,
        task_id: str | None = None,
        prompt: str | None = None,
        task: Mapping[str, Any] | None = None,
        seed: int | None = None,
        policy: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        episode_id: str | None = None,
    ) -> str:
        """Begin an episode (an open one is finished first); lists the tools the agent sees. Returns its id."""
        self.end_episode(termination="next_episode")
        tools, servers = await self._catalogue()
        self.episode = self.writer.start_episode(
            episode_id=episode_id, key=key, env_id=self.env_id, task_id=task_id, task_prompt=prompt, task=task,
            seed=seed, policy=policy or self.policy, tools=tools, servers=servers, recorder="client",
            metadata={**self.metadata, **dict(metadata or {})},
        )
        self._tool_hash = catalogue_fingerprint(tools)
        return self.episode.episode_id

    def end_episode(
        self,
        *,
        total_reward: float | None = None,
        success: bool | None = None,
        final_answer: str | None = None,
        termination: str = "done",
    ) -> None:
        """Finish and record the open episode (no-op without one); ``total_reward`` defaults to the step sum."""
        if self.episode is not None and not self.episode.done:
            self.episode.finish(total_reward=total_reward, success=success, termination=termination,
                                final_answer=final_answer)
        self.episode = None

    async def refresh_catalogue(self) -> bool:
        """Re-read the tool catalogue and record a change if it differs; True if it changed."""
        if self.episode is None:
            return False
        tools, _ = await self._catalogue()
        fingerprint = catalogue_fingerprint(tools)
        if fingerprint == self._tool_hash:
            return False
        self._tool_hash = fingerprint
        self.episode.catalogue_changed(tools)
        return True

    async def _episode(self) -> EpisodeWriter:
        if self.episode is None or self.episode.done:
            await self.start_episode()
        assert self.episode is not None
        return self.episode

    def _record(
        self,
        episode: EpisodeWriter,
        tool: str,
        arguments: Any,
        server: str | None,
        server_tool: str | None,
        result: mt.CallToolResult | None,
        error: dict[str, Any] | None,
        started: float,
        duration: float,
        progress: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        reward = None
        done = False
        content: list[dict[str, Any]] = []
        structured = None
        is_error = error is not None
        if result is not None:
            content = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content]
            structured = result.structured_content
            is_error = is_error or bool(result.is_error)
            problem = result_problem(result) if not is_error else None
            if problem is not None:  # nothing to read, or two values: a failed step, no reward read from it
                error = ToolCallError("invalid_result", f"tool {tool} on server '{server}' {problem}", tool=tool,
                                      server=server).as_dict()
                is_error = True
            else:
                text = "\n".join(b["text"] for b in content if b.get("type") == "text") if structured is None else None
                signal = read_reward(structured, result.meta, text)
                reward, done = signal.reward, signal.done
        episode.add_step(
            tool, arguments, server=server, server_tool=server_tool, content=content, structured_content=structured,
            is_error=is_error, error=error, reward=reward, terminated=done, duration=duration, timestamp=started,
            info={"progress": list(progress)} if progress else None,
        )

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Finish an open episode (``termination="closed"``) and release the writer (the wrapped object stays open)."""
        if self.episode is not None and self.episode.length:
            self.end_episode(termination="closed")
        self.episode = None
        if self._owns_writer:
            self._owns_writer = False
            self.writer.release()

    async def __aenter__(self) -> Any:
        enter = getattr(self._target, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            self.close()
        finally:
            leave = getattr(self._target, "__aexit__", None)
            if leave is not None:
                await leave(*exc)


class RecordingClient(_RecordingMiddleware):
    """Records every ``call_tool`` of an SDK ``mcp.Client`` or a :class:`~mcp_gym.client.connection.ServerConnection`.

    Args:
        client: The object whose ``call_tool(name, arguments, ...)`` returns a ``CallToolResult``.
        path: Run directory, or a :class:`TrajectoryWriter` to share.
        server: Alias recorded as the steps' server (default: the connection's alias, else ``"server"``).
        env_id / policy / metadata: Stored with each episode.
        **writer_options: Options of the process's shared writer for ``path``.
    """

    def __init__(
        self,
        client: Any,
        path: str | os.PathLike[str] | TrajectoryWriter,
        *,
        server: str | None = None,
        env_id: str | None = None,
        policy: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        **writer_options: Any,
    ) -> None:
        super().__init__(client, path, env_id=env_id, policy=policy, metadata=metadata, **writer_options)
        self.server = server or getattr(client, "alias", None) or "server"

    async def _catalogue(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        listed = await self._target.list_tools()
        tools = listed.tools if hasattr(listed, "tools") else listed
        schemas = [ToolEntry(t.name, self.server, t.name, t).to_record() for t in tools]
        info = getattr(self._target, "info", None)
        if callable(info):  # a ServerConnection
            return schemas, {self.server: info()}
        si = getattr(self._target, "server_info", None)
        return schemas, {self.server: {
            "alias": self.server, "name": getattr(si, "name", None), "version": getattr(si, "version", None),
            "protocol_version": getattr(self._target, "protocol_version", None), "status": "ready",
        }}

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        """Call the tool through the wrapped client and record the call (errors are recorded, then re-raised)."""
        episode = await self._episode()
        started, t0 = time.time(), time.perf_counter()
        result = error = None
        try:
            result = await self._target.call_tool(name, arguments, *args, **kwargs)
            return result
        except MCPError as e:
            kind = "timeout" if e.code == _TIMEOUT else "jsonrpc"
            error = ToolCallError(kind, e.error.message, tool=name, server=self.server, code=e.code).as_dict()
            raise
        except Exception as e:
            error = ToolCallError("exception", f"{type(e).__name__}: {e}", tool=name, server=self.server).as_dict()
            raise
        finally:
            self._record(episode, name, arguments or {}, self.server, name, result, error, started,
                         time.perf_counter() - t0)


class RecordingHost(_RecordingMiddleware):
    """Records every ``call`` of an :class:`~mcp_gym.client.host.MCPHost` (several servers behind one catalogue).

    Catalogue changes the host applies (``poll_changes``/``refresh_tools``) are recorded after the call that
    follows them.
    """

    def __init__(
        self,
        host: MCPHost,
        path: str | os.PathLike[str] | TrajectoryWriter,
        *,
        env_id: str | None = None,
        policy: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        **writer_options: Any,
    ) -> None:
        super().__init__(host, path, env_id=env_id, policy=policy, metadata=metadata, **writer_options)
        self._seen: Any = None

    async def _catalogue(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        host: MCPHost = self._target
        self._seen = host.catalogue
        return [e.to_record() for e in host.catalogue.values()], host.server_info()

    async def call(self, name: str, arguments: Mapping[str, Any], **kwargs: Any) -> CallOutcome:
        """``MCPHost.call`` (same arguments), recorded."""
        episode = await self._episode()
        started = time.time()
        out: CallOutcome = await self._target.call(name, arguments, **kwargs)
        self._record(episode, name, dict(arguments), out.server, out.server_tool, out.result, out.error, started,
                     out.duration, out.progress)
        if self._target.catalogue is not self._seen:  # the host rebuilt its catalogue: record it if it differs
            await self.refresh_catalogue()
        return out
