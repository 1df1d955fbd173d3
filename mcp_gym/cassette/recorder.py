"""Recording: the connection tap (:class:`Recorder`, :func:`record_tap`) that appends every exchange of a
connection to its cassette, and the helpers that make server specs record."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import anyio

from mcp_gym._version import __version__
from mcp_gym.cassette.format import (
    _NOT_RECORDED,
    _SDK_META_PREFIX,
    FORMAT,
    VERSION,
    _dump,
    _error_dict,
    _result_dict,
    canonical_params,
    cassette_path,
)
from mcp_gym.client.connection import ServerConnection
from mcp_gym.client.specs import ServerSpec, normalise_servers
from mcp_gym.protocol import EPISODE_META_KEY, SEED_META_KEY, TASK_META_KEY

__all__ = ["with_record", "record_servers", "record_tap", "refuse_workspace_recording", "Recorder"]

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


def refuse_workspace_recording(servers: Mapping[str, ServerSpec], workspace_servers: Collection[str]) -> None:
    """Refuse ``record=`` on a server whose command line or environment names ``{workspace}`` (``workspace_servers``,
    the aliases :class:`~mcp_gym.env.MCPEnv` starts per episode), in one line naming the server, the reason and the
    workaround: its cassette cannot replay. Each episode's requests (``"path": "/tmp/mcp-gym-ws-..."``) and results
    hold that episode's own temporary path, which no later episode sends again, and :class:`~mcp_gym.cassette.Replay`
    starts no workspace, so a task with a ``fixture`` cannot reset on it and a grader that reads the workspace's files
    would find none of the writes the recorded server made."""
    recorded = sorted(a for a in workspace_servers if servers[a].record is not None)
    if recorded:
        raise ValueError(
            f"server '{recorded[0]}': record= cannot make a cassette that replays for a server started per episode on "
            "{workspace} (each episode's requests and results hold its own temporary workspace path, and a replay "
            "starts no workspace for the task's fixture or for a grader that reads its files); record the trajectories "
            "instead (RecordTrajectories, a job's run directory: they write {workspace}), or give the server a fixed "
            "folder in place of {workspace}")


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

