"""Reading a cassette back: :class:`Cassette` (headers and recorded episodes), :class:`EpisodeTape`,
:class:`Exchange`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_gym.cassette.format import (
    FORMAT,
    VERSION,
    canonical_json,
    canonical_params,
)

__all__ = ["Exchange", "EpisodeTape", "Cassette"]

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

