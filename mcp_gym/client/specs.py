"""Server specs: how to reach an MCP server — :class:`Stdio` (a subprocess), :class:`Http` (a Streamable HTTP URL) or
:class:`InProcess` (an ``MCPServer`` in this process) — and the parsers that turn strings and objects into them.

Plain frozen dataclasses: nothing here connects (that is :class:`mcp_gym.client.connection.ServerConnection`).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Protocol", "Stdio", "Http", "InProcess", "ServerSpec", "parse_server", "normalise_servers"]

Protocol = Literal["auto", "legacy", "2026-07-28"]
"""How to negotiate the protocol era: ``auto`` probes ``server/discover`` (at most ``discover_timeout`` seconds) and
falls back to the ``initialize`` handshake; ``legacy`` handshakes only; a version pins the modern era."""



@dataclass(frozen=True, kw_only=True)
class _SpecBase:
    protocol: Protocol = "auto"
    """``auto`` (probe ``server/discover``, fall back to ``initialize``), ``legacy`` or a pinned modern version."""
    connect_timeout: float = 30.0
    """Seconds to start (if stdio) and initialise the server and list its tools for the first time."""
    discover_timeout: float = 1.0
    """With ``auto``: how long a server may leave ``server/discover`` unanswered before the handshake fallback."""
    listen: bool | None = None
    """2026-era change stream (``subscriptions/listen``): ``None`` = open it unless the server piggy-backs changes on
    its results (an mcp-gym server); it costs ~20% per call on stdio, so ``False`` turns it off for speed."""
    record: str | os.PathLike[str] | None = None
    """Record every exchange with this server to a cassette (:mod:`mcp_gym.cassette`): a ``.jsonl`` file, or a
    directory that receives ``<alias>.jsonl``."""

    @property
    def transport(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True)
class Stdio(_SpecBase):
    """A server started as a subprocess speaking MCP over stdin/stdout: ``Stdio(command, args, env=, cwd=)``.

    ``env`` is merged over the SDK's minimal inherited environment (HOME, PATH, ...): pass every variable the server
    needs. The server's stderr is drained through a pipe; its last ``stderr_tail_bytes`` are kept in memory (nothing
    on disk) and quoted when it fails. A message from the server larger than ``max_message_bytes`` is discarded as it
    arrives: the request it answers gets a ``too_large`` error and the session stays usable.
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None
    max_message_bytes: int = field(default=32 * 1024 * 1024, kw_only=True)
    """Largest JSON-RPC message accepted from the server (bytes, one line)."""
    stderr_tail_bytes: int = field(default=4096, kw_only=True)
    """How much of the end of the server's stderr is kept for error messages."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", dict(self.env) if self.env is not None else None)
        object.__setattr__(self, "cwd", os.fspath(self.cwd) if self.cwd is not None else None)

    @classmethod
    def python_module(cls, module: str, *args: str, **kw: Any) -> Stdio:
        """A server run as ``python -m module`` with this interpreter (and this ``sys.path``)."""
        env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **dict(kw.pop("env", None) or {})}
        return cls(sys.executable, ["-m", module, *args], env=env, **kw)

    @property
    def transport(self) -> str:
        return "stdio"

    def describe(self) -> str:
        return " ".join([self.command, *self.args])


@dataclass(frozen=True)
class Http(_SpecBase):
    """A server reached over Streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``)."""

    url: str

    @property
    def transport(self) -> str:
        return "http"

    def describe(self) -> str:
        return self.url


@dataclass(frozen=True)
class InProcess(_SpecBase):
    """An ``MCPServer`` (or low-level ``Server``, or an object with an ``.mcp`` server) served in this process."""

    server: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "server", getattr(self.server, "mcp", self.server))

    def __deepcopy__(self, memo: dict[int, Any]) -> InProcess:
        return self  # a spec refers to the one server object; copies (e.g. by gymnasium.make) share it

    @property
    def transport(self) -> str:
        return "inprocess"

    def describe(self) -> str:
        return f"in-process {getattr(self.server, 'name', type(self.server).__name__)}"


ServerSpec = Stdio | Http | InProcess


def parse_server(target: str, *, inherit_env: bool = False, **options: Any) -> Stdio | Http:
    """A spec from a string: an ``http(s)://`` URL (Streamable HTTP) or a command line (stdio, split like a shell).

    ``inherit_env``: give a stdio server this process's whole environment (the CLI does, so ``npx`` servers find their
    configuration) instead of the SDK's minimal one. ``options`` are spec fields (``connect_timeout``, ...).
    """
    if target.startswith(("http://", "https://")):
        return Http(target, **options)
    parts = shlex.split(target)
    if not parts:
        raise ValueError(f"not a server command line or URL: {target!r}")
    return Stdio(parts[0], parts[1:], env=dict(os.environ) if inherit_env else None, **options)


def normalise_servers(servers: Mapping[str, Any] | ServerSpec) -> dict[str, ServerSpec]:
    """``{alias: spec}`` from what :class:`~mcp_gym.env.MCPEnv` accepts: a single spec (alias ``"server"``), or per
    alias a spec, a command line (stdio), an ``http(s)://`` URL or a server object (in process)."""
    if isinstance(servers, (Stdio, Http, InProcess)):
        return {"server": servers}
    out: dict[str, ServerSpec] = {}
    for alias, spec in servers.items():
        if isinstance(spec, str):
            spec = parse_server(spec)
        elif not isinstance(spec, (Stdio, Http, InProcess)):
            spec = InProcess(spec)
        out[str(alias)] = spec
    return out
