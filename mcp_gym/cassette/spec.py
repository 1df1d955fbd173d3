"""Replay as a server spec: :class:`Replay` (in-process) and the helpers that find a run's cassettes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mcp_gym.cassette.format import (
    CASSETTES_DIR,
)
from mcp_gym.cassette.reader import Cassette, _open_cassette
from mcp_gym.cassette.replay import ReplayServer
from mcp_gym.client.specs import InProcess, Protocol

__all__ = ["Replay", "replay_spec", "replay_servers"]

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
        cassette: Cassette = self.server.cassette
        return cassette

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
        _open_cassette(p, d).close()  # the folder may be someone else's run: only its own regular files are read
        spec = Replay(p, strict=strict)
        out[str(spec.cassette.header.get("alias") or p.stem)] = spec
    if not out:
        raise FileNotFoundError(f"no cassettes (*.jsonl) in {d}")
    return out


