"""Reading a cassette back: :class:`Cassette` (headers and recorded episodes), :class:`EpisodeTape`,
:class:`Exchange`."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp.types as mt
import pydantic

from mcp_gym.cassette.format import (
    FORMAT,
    VERSION,
    canonical_json,
    canonical_params,
)
from mcp_gym.errors import MCPGymError

__all__ = ["Exchange", "EpisodeTape", "Cassette", "CassetteError"]


class CassetteError(MCPGymError, ValueError):
    """A cassette file that is not what the format says: the message (one line) and the attributes name the file,
    the line (1-based; ``None`` for the whole file) and the field at fault (``None``: the whole line)."""

    def __init__(self, path: Path, line: int | None, field: str | None, reason: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {field}: {reason}" if field else f"{where}: {reason}")
        self.path, self.line, self.field, self.reason = path, line, field, reason


MAX_LINE_BYTES = 512 << 20
"""Longest cassette line read (a recorded answer is at most a server's ``max_message_bytes``, 32 MB by default, and
JSON-escaped at most ~6 times that): a longer one, or a file of one endless line, is refused, not read on."""


def _open_cassette(path: Path, root: Path | None = None) -> Any:  # also used by cassette.spec
    """``path`` open for reading in binary, if it is a regular file (inside ``root`` when given): never a named pipe
    (a read waiting without end) or a device (``/dev/zero``: one endless line), opened without blocking."""
    if root is not None and not path.resolve().is_relative_to(root.resolve()):
        raise CassetteError(path, None, None, f"refusing to read this cassette: it leads out of {root} (to "
                                              f"{path.resolve()}, through a symlink)")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CassetteError(path, None, None, "refusing to read this cassette: it is not a regular file (a pipe "
                                                  "or device would be read without end)")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _show(value: Any) -> str:
    """A short, printable text of a value from the file (for messages)."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(c if c.isprintable() else "?" for c in text[:80])
    return text + ("…" if len(text) >= 80 else "")


_JSON_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "a list"}


def _field(path: Path, line: int, ev: dict[str, Any], name: str, typ: type, *, required: bool = False) -> Any:
    """``ev[name]`` if it is of type ``typ`` (or absent/null unless ``required``); else a :class:`CassetteError`."""
    value = ev.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise CassetteError(path, line, name, f"not {_JSON_NAMES.get(typ, typ.__name__)}: {_show(value)}")
    return value


_RESULTS: dict[str, type[Any]] = {
    "tools/list": mt.ListToolsResult,
    "tools/call": mt.CallToolResult,
    "resources/list": mt.ListResourcesResult,
    "resources/templates/list": mt.ListResourceTemplatesResult,
    "resources/read": mt.ReadResourceResult,
    "prompts/list": mt.ListPromptsResult,
    "prompts/get": mt.GetPromptResult,
    "completion/complete": mt.CompleteResult,
}
"""The MCP result type a recorded answer of each method must validate as (it is sent back as one on replay)."""


def _validate(path: Path, line: int, name: str, model: type[Any], value: Any) -> None:
    try:
        model.model_validate(value)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in (name, *first.get("loc", ())))
        raise CassetteError(path, line, loc, f"{first.get('msg', 'invalid')} (as {model.__name__})") from None
    except RecursionError:
        raise CassetteError(path, line, name, "nested too deeply") from None


def _check_header(path: Path, line: int, ev: dict[str, Any]) -> None:
    for name in ("connection", "alias", "transport", "target", "protocol_version", "instructions"):
        _field(path, line, ev, name, str)
    info = _field(path, line, ev, "server_info", dict)
    for name in ("name", "version", "title", "description", "websiteUrl"):
        if info is not None and info.get(name) is not None and not isinstance(info[name], str):
            raise CassetteError(path, line, f"server_info.{name}", f"not a string: {_show(info[name])}")
    if _field(path, line, ev, "capabilities", dict) is not None:
        _validate(path, line, "capabilities", mt.ServerCapabilities, ev["capabilities"])


def _check_event(path: Path, line: int, ev: dict[str, Any]) -> None:
    """A request or notification line: field types, and a result the MCP types accept."""
    _field(path, line, ev, "connection", str)
    _field(path, line, ev, "episode", str)
    _field(path, line, ev, "seq", int, required=True)
    method = _field(path, line, ev, "method", str, required=True)
    _field(path, line, ev, "params", dict)
    if ev["kind"] == "notification":
        return
    result = _field(path, line, ev, "result", dict)
    error = _field(path, line, ev, "error", dict)
    if error is not None:
        code, message = error.get("code"), error.get("message")
        if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
            raise CassetteError(path, line, "error.code", f"not an integer: {_show(code)}")
        if message is not None and not isinstance(message, str):
            raise CassetteError(path, line, "error.message", f"not a string: {_show(message)}")
    elif result is not None and method in _RESULTS:
        _validate(path, line, "result", _RESULTS[method], result)

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
        """Read a cassette; unparsable lines (a torn last line after a crash) are skipped.

        Raises :class:`CassetteError` naming the file, line and field of a line that parses but is not what the
        format says (a field of the wrong type, a result the MCP types refuse, JSON nested too deeply), and when
        the file has no header: a crafted cassette fails here, in one line, rather than somewhere in a replay.
        """
        path = Path(path)
        headers: list[dict[str, Any]] = []
        per_conn: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        episodes: dict[str | None, EpisodeTape] = {None: EpisodeTape(None)}
        with _open_cassette(path) as raw:
            for number, data in enumerate(iter(lambda: raw.readline(MAX_LINE_BYTES + 1), b""), start=1):
                if len(data) > MAX_LINE_BYTES:
                    raise CassetteError(path, number, None, f"a line longer than {MAX_LINE_BYTES} bytes")
                line = data.decode("utf-8", errors="replace").strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                except RecursionError:
                    raise CassetteError(path, number, None, "JSON nested too deeply") from None
                if not isinstance(ev, dict):
                    raise CassetteError(path, number, None, f"not a JSON object but {type(ev).__name__}")
                kind = ev.get("kind")
                if kind == "header":
                    if ev.get("format") != FORMAT:
                        raise CassetteError(path, number, "format",
                                            f"not an mcp-gym cassette (format {_show(ev.get('format'))})")
                    version = _field(path, number, ev, "version", int)
                    if version is None or version > VERSION:
                        raise CassetteError(path, number, "version",
                                            f"cassette version {_show(version)} is not readable (reads {VERSION})")
                    _check_header(path, number, ev)
                    headers.append(ev)
                elif kind == "episode":
                    episode = _field(path, number, ev, "episode", str, required=True)
                    _field(path, number, ev, "seed", int)
                    if not isinstance(ev.get("task_id"), (str, int, type(None))) or isinstance(ev.get("task_id"),
                                                                                                bool):
                        raise CassetteError(path, number, "task_id", f"not a string: {_show(ev.get('task_id'))}")
                    if episode not in episodes:
                        episodes[episode] = EpisodeTape(episode, ev.get("task_id"), ev.get("seed"))
                elif kind in ("request", "notification"):
                    _check_event(path, number, ev)
                    per_conn.setdefault(ev.get("connection") or "", []).append((number, ev))
        if not headers:
            raise CassetteError(path, None, None, "no cassette header")
        n_notes = 0
        for events in per_conn.values():  # connections in order of their first event
            events.sort(key=lambda e: e[1]["seq"])
            last: Exchange | None = None
            early: list[dict[str, Any]] = []
            for number, ev in events:
                if ev["kind"] == "notification":
                    note = {"method": ev["method"], "params": ev.get("params") or {}}
                    n_notes += 1
                    (last.notifications if last is not None else early).append(note)
                    continue
                params = ev.get("params") or {}
                try:
                    key = canonical_json(canonical_params(ev["method"], params))
                except (ValueError, RecursionError) as e:
                    raise CassetteError(path, number, "params", f"cannot be matched: {_show(e)}") from None
                ex = Exchange(ev["method"], params, key, ev.get("result"), ev.get("error"), early, ev.get("episode"))
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

