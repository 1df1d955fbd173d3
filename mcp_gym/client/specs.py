"""Server specs: how to reach an MCP server — :class:`Stdio` (a subprocess), :class:`Http` (a Streamable HTTP URL),
:class:`Sse` (the older HTTP+SSE transport) or :class:`InProcess` (an ``MCPServer`` in this process) — and the parsers
that turn strings, config mappings and objects into them.

Hosted servers take credentials: ``headers=`` (static, e.g. ``Authorization``) and ``auth=`` (any ``httpx2.Auth``, the
HTTP client library of the ``mcp`` SDK; :func:`oauth_client_credentials` builds the SDK's OAuth client-credentials
provider). Secrets never leave a spec: ``repr``, :meth:`Http.describe` and :meth:`Http.redacted` mask header values,
URLs' user info and query values (:func:`mcp_gym.protocol.redact_url`) and auth objects, and they are what
connections, cassettes and run manifests record.

Plain frozen dataclasses: nothing here connects (that is :class:`mcp_gym.client.connection.ServerConnection`).
"""

from __future__ import annotations

import copy
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from mcp_gym.protocol import REDACTED, redact_text, redact_url

__all__ = [
    "Protocol", "Stdio", "Http", "Sse", "InProcess", "ServerSpec", "oauth_client_credentials",
    "redact_text",  # mcp_gym.protocol's, for the env's error texts
]


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
    directory that receives ``<alias>.jsonl``. Refused on a server naming ``{workspace}`` (its cassette cannot
    replay)."""

    @property
    def transport(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True, repr=False)
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
    resolve_npx: bool = field(default=True, kw_only=True)
    """A server run by ``npx`` (``npx -y PKG ...``, ``npm exec``): start it through npx once, then run the program npx
    ran directly, with the same arguments, environment and directory (Linux; checked, else npx every time: see
    docs/performance.md). ``False``: through npx at every start (a package version published meanwhile is picked
    up)."""

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
        return redact_text(" ".join([self.command, *self.args]))

    def __repr__(self) -> str:
        env = {k: REDACTED for k in self.env} if self.env is not None else None
        return (f"Stdio({self.command!r}, {[redact_text(a) for a in self.args]!r}, env={env!r}, "
                f"cwd={self.cwd!r})")


@dataclass(frozen=True)
class _Hosted(_SpecBase):
    url: str
    headers: Mapping[str, str] | None = None
    """Static HTTP headers sent with every request (e.g. ``{"Authorization": "Bearer ..."}``); values are secrets."""
    auth: Any = None
    """An ``httpx2.Auth`` (the ``mcp`` SDK's HTTP client library), e.g. :func:`oauth_client_credentials`."""
    http_timeout: float = 30.0
    """Seconds to open a connection to the server or to send it a request. Past it (or past ``read_timeout``) that
    request fails as a timeout (JSON-RPC ``-32001``; an env step's error kind ``timeout``) and the session stays open:
    a busy server is not a dead one. A refused or reset connection still ends the session (``server_dead``)."""
    read_timeout: float = 300.0
    """Longest silence, in seconds, while waiting for an answer: for its first bytes, between the bytes of a streamed
    answer (the SDK's servers send a keep-alive every 15 s), and for a slot under ``max_in_flight``."""
    max_in_flight: int | None = None
    """At most this many requests to this server (its scheme, host and port) wait for its answer at once, over all
    sessions of this process on one event loop (the rest queue in the client, in order); ``None`` (the default): no
    bound. Thousands of sessions that each open a connection at once can overflow the server's listen backlog
    (connections dropped by the kernel); without a bound, connect timeouts are tried again until ``read_timeout``
    and 10,000 sessions finished with 0 errors. Not the default because waiting sessions let their connections
    expire and reconnect: at 1,000 sessions 256 slots ran at 0.65x the raw SDK's steps/s (docs/performance.md). A
    request holds its slot until the answer's headers arrive."""

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"{type(self).__name__} needs an http(s):// URL, got {redact_url(self.url)!r}")
        for name in ("http_timeout", "read_timeout"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{type(self).__name__}({redact_url(self.url)!r}): {name} must be a positive number "
                                 f"of seconds, got {v!r}")
        if self.max_in_flight is not None and (not isinstance(self.max_in_flight, int) or self.max_in_flight < 1):
            raise ValueError(f"{type(self).__name__}({redact_url(self.url)!r}): max_in_flight must be a positive "
                             f"integer or None, got {self.max_in_flight!r}")
        if self.headers is not None:
            bad = [k for k, v in self.headers.items() if not isinstance(v, str)]
            if bad:
                raise ValueError(f"{type(self).__name__}({redact_url(self.url)!r}): header {bad[0]!r} must be a string")
            object.__setattr__(self, "headers", {str(k): v for k, v in self.headers.items()})
        if self.auth is not None:
            import httpx2

            if not isinstance(self.auth, httpx2.Auth):
                raise TypeError(f"{type(self).__name__}({redact_url(self.url)!r}): auth must be an httpx2.Auth, "
                                f"got {type(self.auth).__name__}")

    def __deepcopy__(self, memo: dict[int, Any]) -> _Hosted:
        return self  # the auth flow holds live state (tokens): copies (e.g. by gymnasium.make) share it

    def describe(self) -> str:
        return redact_url(self.url)

    def redacted(self) -> dict[str, Any]:
        """The spec as JSON-able data with every secret masked (what recordings and manifests keep)."""
        return {"transport": self.transport, "url": redact_url(self.url),
                "headers": {k: REDACTED for k in self.headers or {}},
                "auth": type(self.auth).__name__ if self.auth is not None else None}

    def __repr__(self) -> str:
        d = self.redacted()
        return f"{type(self).__name__}({d['url']!r}, headers={d['headers']!r}, auth={d['auth']})"


@dataclass(frozen=True, repr=False)
class Http(_Hosted):
    """A server reached over Streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``), optionally with
    ``headers=`` (static, e.g. a bearer token) and ``auth=`` (any ``httpx2.Auth``).

    An answer larger than ``max_message_bytes`` is not read further: the request it answers gets a ``too_large``
    error and the session stays usable. A body still arriving when the caller stops waiting (``call_timeout``) is
    dropped with its connection."""

    max_message_bytes: int = field(default=32 * 1024 * 1024, kw_only=True)
    """Largest answer accepted from the server (bytes, decoded): a JSON answer's body, or one event of a streamed
    (SSE) answer. The same bound and default as :attr:`Stdio.max_message_bytes`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        v = self.max_message_bytes
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"Http({redact_url(self.url)!r}): max_message_bytes must be a positive integer (bytes), "
                             f"got {v!r}")

    @property
    def transport(self) -> str:
        return "http"


@dataclass(frozen=True, repr=False)
class Sse(_Hosted):
    """A server reached over the older HTTP+SSE transport (MCP 2024-11-05): ``url`` is its SSE endpoint (e.g.
    ``http://127.0.0.1:8000/sse``); ``headers=`` and ``auth=`` as for :class:`Http`."""

    @property
    def transport(self) -> str:
        return "sse"


def oauth_client_credentials(
    url: str,
    client_id: str,
    client_secret: str | None = None,
    *,
    private_key: str | None = None,
    signing_algorithm: str = "RS256",
    issuer: str | None = None,
    scope: str | None = None,
) -> Any:
    """The SDK's OAuth 2.0 client-credentials provider (an ``httpx2.Auth``) for the server at ``url``, with tokens
    kept in memory only: pass it as ``Http(url, auth=...)``.

    The client authenticates at the token endpoint with either ``client_secret`` (``client_secret_basic``:
    ``ClientCredentialsOAuthProvider``) or ``private_key``, a PEM private key that signs a JWT assertion
    (``private_key_jwt``, RFC 7523, with ``signing_algorithm`` such as ``RS256`` or ``ES256``:
    ``PrivateKeyJWTOAuthProvider``). ``issuer`` names the authorization server the credentials belong to; without it,
    the credentials go only to a token endpoint on the server's own origin (scheme, host and port): the server
    names where its authorization server is, and a hostile one would name its own. A token endpoint elsewhere is
    then refused in one line (``OAuthFlowError``) saying to pass ``issuer=``."""
    if (client_secret is None) == (private_key is None):
        raise ValueError(f"oauth_client_credentials({redact_url(url)!r}, {client_id!r}): give exactly one of "
                         "client_secret= and private_key=")
    from mcp_gym.client._oauth import client_credentials

    return client_credentials(url, client_id, client_secret, private_key, signing_algorithm, issuer, scope,
                              _MemoryTokens())


class _MemoryTokens:
    """The SDK's ``TokenStorage`` protocol, in memory (nothing written to disk)."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


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


ServerSpec = Stdio | Http | Sse | InProcess
ServerSpecT = TypeVar("ServerSpecT", bound=_SpecBase)


def parse_server(
    target: str, *, inherit_env: bool = False, headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None, **options: Any
) -> Stdio | Http | Sse:
    """A spec from a string: an ``http(s)://`` URL (Streamable HTTP), ``sse+http(s)://`` (the older HTTP+SSE
    transport: ``sse+http://host:8000/sse``) or a command line (stdio, split like a shell).

    ``headers``: HTTP headers for a URL (an error for a command line). ``inherit_env``: give a stdio server this
    process's whole environment (the CLI does, so ``npx`` servers find their configuration) instead of the SDK's
    minimal one; ``env``: a stdio server's environment variables (added to that environment). ``options`` are spec
    fields (``connect_timeout``, ...).
    """
    if env and target.startswith(("http://", "https://", "sse+http://", "sse+https://")):
        raise ValueError(f"env is for command-line (stdio) servers, not the URL {redact_url(target)!r}")
    if target.startswith(("http://", "https://")):
        return Http(target, headers=headers, **options)
    if target.startswith(("sse+http://", "sse+https://")):
        return Sse(target[len("sse+"):], headers=headers, **options)
    if headers:
        raise ValueError(f"headers are for http(s):// or sse+http(s):// servers, not the command line {target!r}")
    parts = shlex.split(target)
    if not parts:
        raise ValueError(f"not a server command line or URL: {target!r}")
    merged = {**(os.environ if inherit_env else {}), **(env or {})}
    return Stdio(parts[0], parts[1:], env=merged if inherit_env or env else None, **options)


def with_connect_timeout(spec: ServerSpecT, seconds: float | None) -> ServerSpecT:
    """``spec`` with its ``connect_timeout`` set to ``seconds`` (``spec`` itself for ``None``): the one place a job's
    ``env.connect_timeout`` (or ``make_env(connect_timeout=)``) reaches a spec. Copied field by field, not rebuilt, so
    spec classes whose constructor takes other arguments (a cassette's ``Replay``) get it too."""
    if seconds is None:
        return spec
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"connect_timeout must be a positive number of seconds, got {seconds!r}")
    changed = copy.copy(spec)
    object.__setattr__(changed, "connect_timeout", float(seconds))  # a frozen dataclass: set on the fresh copy only
    return changed


def normalise_servers(servers: Mapping[str, Any] | ServerSpec, *,
                      connect_timeout: float | None = None) -> dict[str, ServerSpec]:
    """``{alias: spec}`` from what :class:`~mcp_gym.env.MCPEnv` accepts: a single spec (alias ``"server"``), or per
    alias a spec, a command line (stdio), an ``http(s)://`` / ``sse+http(s)://`` URL, a mapping (a config entry:
    ``{url: ..., headers: {...}}`` or ``{command: ..., args: [...], env: {...}}``, plus spec fields such as
    ``connect_timeout``) or a server object (in process). ``connect_timeout`` (seconds) overrides every spec's."""
    if isinstance(servers, (Stdio, Http, Sse, InProcess)):
        return {"server": with_connect_timeout(servers, connect_timeout)}
    out: dict[str, ServerSpec] = {}
    for alias, spec in servers.items():
        if isinstance(spec, str):
            spec = parse_server(spec)
        elif isinstance(spec, Mapping):
            spec = _from_mapping(str(alias), spec)
        elif not isinstance(spec, (Stdio, Http, Sse, InProcess)):
            spec = InProcess(spec)
        out[str(alias)] = with_connect_timeout(spec, connect_timeout)
    return out


def _from_mapping(alias: str, entry: Mapping[str, Any]) -> Stdio | Http | Sse:
    d = {str(k): v for k, v in entry.items()}
    for k in ("headers", "env"):
        if d.get(k) is not None:
            d[k] = {str(h): str(v) for h, v in d[k].items()}
    try:
        if "url" in d:
            return parse_server(str(d.pop("url")), **d)
        if "command" in d:
            command = d.pop("command")
            if "args" in d:
                return Stdio(str(command), [str(a) for a in d.pop("args") or ()], **d)
            return parse_server(str(command), **d)
    except TypeError as e:
        raise ValueError(f"server '{alias}': {e}") from None
    raise ValueError(f"server '{alias}': a mapping needs 'url' (http(s):// or sse+http(s)://) or 'command', "
                     f"got keys {sorted(d)}")
