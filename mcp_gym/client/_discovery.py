"""A server's ``server/discover`` answer reused by the next sessions to the same server while the server says it is
fresh (its ``ttlMs``, SEP-2549 caching hints of protocol 2026-07-28).

``server/discover`` is the 2026-era handshake: the server's versions, capabilities, instructions and identity, the same
for every session of one server. A session that opens within the ``ttlMs`` the server put on that answer adopts it
(the SDK's ``Client(mode=version, prior_discover=...)``: no request) instead of asking again; a server that declares
no ``ttlMs`` (the SDK's default is ``0``: stale at once) is asked by every session, as before. The answer is reused
only in the authorization context that fetched it (the same URL, headers and ``auth`` object), whether the server
marks it ``private`` or ``public``. Streamable HTTP only: each stdio session is its own server process.

Sessions that connect together do not all ask: while one session's handshake is under way, the others to the same
server and context wait for its answer (bounded by their ``connect_timeout``), unless that server is known to declare
no ``ttlMs``.

A session that adopted an answer checks it on its first listing: when the listing fails, or the server's identity
stamp on it (``_meta`` ``serverInfo``, 2026 era) is not the adopted one's (:func:`mismatch`: e.g. another server now
listens on that port), the answer is dropped (:func:`forget`) and the host connects again at once, asking the server.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as mt
from anyio.lowlevel import RunVar
from mcp import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_gym._compat import mcp as mcp_compat
from mcp_gym._memo import keep
from mcp_gym.client.specs import Http

__all__ = ["fresh", "fresh_or_lead", "remember", "release", "forget", "mismatch", "DISCOVER_TIMEOUT", "enter_auto"]

SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

log = logging.getLogger("mcp_gym.client")

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup


_MAX = 256  # authorization contexts remembered (a process talks to few servers)


@dataclass(frozen=True)
class _Entry:
    result: mt.DiscoverResult
    version: str
    expires: float  # time.monotonic()
    auth: Any  # the spec's auth object itself (compared by identity)


_Key = tuple[str, tuple[tuple[str, str], ...], int]
_CACHE: dict[_Key, _Entry] = {}
_UNCACHEABLE: dict[_Key, None] = {}  # contexts whose server declared no ttlMs: their sessions never wait on another
_LEADERS: RunVar[dict[_Key, anyio.Event]] = RunVar("mcp_gym_discover_leaders")  # handshakes under way, per loop


def _key(spec: Http) -> tuple[str, tuple[tuple[str, str], ...], int]:
    headers = tuple(sorted((k.lower(), v) for k, v in (spec.headers or {}).items()))
    return spec.url, headers, id(spec.auth)


def fresh(spec: Http) -> tuple[mt.DiscoverResult, str] | None:
    """The discover answer (and its negotiated version) a new session to ``spec`` may adopt, or ``None``."""
    key = _key(spec)
    entry = _CACHE.get(key)
    if entry is None:
        return None
    if entry.auth is not spec.auth or time.monotonic() >= entry.expires:
        _CACHE.pop(key, None)
        return None
    return entry.result, entry.version


def _eligible(spec: Any) -> bool:
    return isinstance(spec, Http) and spec.protocol == "auto"


async def fresh_or_lead(spec: Any) -> tuple[tuple[mt.DiscoverResult, str] | None, bool]:
    """``(answer, False)`` to adopt, or ``(None, lead)``: ask the server yourself; with ``lead`` the other sessions
    to this server wait for your answer, so call :func:`release` once the handshake is over (whatever its outcome).
    Any spec but a Streamable HTTP one with ``protocol="auto"``: ``(None, False)``."""
    if not _eligible(spec):
        return None, False
    key = _key(spec)
    leaders = _LEADERS.get(None)
    if leaders is None:
        leaders = {}
        _LEADERS.set(leaders)
    while True:
        known = fresh(spec)
        if known is not None or key in _UNCACHEABLE:
            return known, False
        pending = leaders.get(key)
        if pending is None:
            leaders[key] = anyio.Event()
            return None, True
        await pending.wait()  # then adopt its answer, or lead if it failed


def release(spec: Any, lead: bool = True) -> None:
    """The leading session's handshake is over: wake the sessions waiting for its answer (nothing unless ``lead``)."""
    if not lead or not _eligible(spec):
        return
    leaders = _LEADERS.get(None)
    event = leaders.pop(_key(spec), None) if leaders is not None else None
    if event is not None:
        event.set()


def remember(spec: Any, result: mt.DiscoverResult | None, version: str | None) -> None:
    """Keep a discover answer a session just fetched, for as long as its ``ttlMs`` allows (nothing if ``0``)."""
    if not _eligible(spec):
        return
    if result is None or version is None or not result.ttl_ms or result.ttl_ms <= 0:
        keep(_UNCACHEABLE, _key(spec), None, _MAX)
        return
    _UNCACHEABLE.pop(_key(spec), None)
    keep(_CACHE, _key(spec), _Entry(result, version, time.monotonic() + result.ttl_ms / 1000, spec.auth), _MAX)


def mismatch(adopted: mt.DiscoverResult | None, page_metas: list[Any]) -> str | None:
    """Why the server that answered a session's first listing is not the one whose answer it adopted (the 2026-era
    identity stamp in the listing's ``_meta`` differs, e.g. another server now listens on that port), or ``None``
    (the same, or no stamp to tell)."""
    said = page_metas[0].get(SERVER_INFO_KEY) if page_metas and isinstance(page_metas[0], dict) else None
    known = (adopted.meta or {}).get(SERVER_INFO_KEY) if adopted is not None else None
    if said is None or said == known:
        return None
    return f"the server now says it is {said}, not {known}"


def forget(spec: Http) -> None:
    """Drop the answer kept for ``spec``'s server and authorization context (the next session asks again)."""
    _CACHE.pop(_key(spec), None)


_TURN_WAIT = 5.0
"""Seconds (counted in the waits' own steps) a handshake waits for those with another ``discover_timeout`` before it
sets its own value anyway."""


class _DiscoverTimeout:
    """The SDK (mcp 2.3) reads its ``server/discover`` probe timeout from a module global when it sends the probe, and
    has no per-client setting. Handshakes with the same ``discover_timeout`` run together; one with another value
    waits until they are done, so each probe waits its own connection's value (across runtimes and threads too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: float | None = None
        self._active = 0

    def _enter(self, value: float, force: bool = False) -> bool:
        with self._lock:
            if self._active and self._value != value and not force:
                return False
            self._value = value
            self._active += 1
            mcp_compat.set_discover_timeout(value)
            return True

    @contextlib.asynccontextmanager
    async def use(self, value: float) -> AsyncIterator[None]:
        """Hold the SDK's probe timeout at ``value`` for one handshake. The wait for handshakes with another value is
        bounded (:data:`_TURN_WAIT`): a handshake is past its probe after a few seconds, and one never left (a task
        abandoned with its loop) must not hold every later handshake with another value until its connect timeout."""
        waited = 0.0
        while not self._enter(value, force=waited >= _TURN_WAIT):
            await anyio.sleep(0.01)
            waited += 0.01
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1


DISCOVER_TIMEOUT = _DiscoverTimeout()
"""Sets the SDK's ``server/discover`` probe timeout for each handshake in turn (see :class:`_DiscoverTimeout`)."""


def _modern_refusal(e: BaseException) -> str | None:
    """The modern protocol version a server names when it refuses the ``initialize`` fallback of an ``auto``
    handshake with -32022 (``UNSUPPORTED_PROTOCOL_VERSION``: it read the late-answered ``server/discover`` first and
    serves the connection in the 2026-07-28 era), or ``None`` for any other failure."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    if not isinstance(e, MCPError) or e.code != mt.UNSUPPORTED_PROTOCOL_VERSION:
        return None
    try:
        supported = mt.UnsupportedProtocolVersionErrorData.model_validate(e.data).supported
    except ValueError:  # pydantic's ValidationError: no versions named, no era to connect in
        return None
    modern = [v for v in MODERN_PROTOCOL_VERSIONS if v in supported]
    return modern[-1] if modern else None


async def enter_auto(alias: str, spec: Any, client: Any, again: Callable[[], Any]) -> Any:
    """Enter ``client`` (an SDK ``Client`` with ``mode="auto"``), its probe bounded by ``spec.discover_timeout``.

    A server still starting when the probe times out reads the queued ``server/discover`` first, serves the
    connection in the 2026-07-28 era and refuses the ``initialize`` fallback (-32022; the SDK re-probes once, and
    gives up when that probe is late too). That refusal proves the server modern: the client ``again()`` makes (a
    fresh session, and process for stdio) is entered instead, its probe allowed ``spec.connect_timeout`` (the caller's
    connect deadline bounds it), said once at INFO. Returns the client entered; any other failure propagates."""
    try:
        async with DISCOVER_TIMEOUT.use(spec.discover_timeout):
            await client.__aenter__()
        return client
    except Exception as e:  # noqa: BLE001 - only a modern server's refusal is retried
        version = _modern_refusal(e)
        if version is None:
            raise
    log.info("mcp-gym: server %r answered server/discover after its discover_timeout (%g s) and refused the "
             "initialize fallback: connecting again in the %s era", alias, spec.discover_timeout, version)
    client = again()
    async with DISCOVER_TIMEOUT.use(spec.connect_timeout):
        await client.__aenter__()
    return client
