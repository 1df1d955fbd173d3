"""The "waiting for server" line: said when a server's start is worth a line on stderr, not at every slow start.

A server that has not yet connected in this process (a first start, or one whose last start failed) is announced after
:data:`SLOW_CONNECT_NOTICE` seconds (at most half its ``connect_timeout``): it may be misconfigured, and the user should
not wait ``connect_timeout`` in silence. A server that has connected before under the same alias and command (a server
started per episode, on every episode's ``{workspace}``) is slow because the machine is busy: it is announced only once
it has waited half its ``connect_timeout``, when the start is about to fail. Many sessions of one server waiting at the
same time share one line.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

__all__ = ["SLOW_CONNECT_NOTICE", "wait_ready", "started"]

log = logging.getLogger("mcp_gym.client")

SLOW_CONNECT_NOTICE = 2.0
"""Seconds a server not yet known to start may take to connect before a WARNING line on the ``mcp_gym.client`` logger
says what is being waited for (stderr when logging is not configured)."""

_WAITING: set[tuple[str, str]] = set()  # (alias, target) announced and waited on right now
_STARTED: set[tuple[str, str, str]] = set()  # (alias, transport, command or URL) that connected in this process


def _server(alias: str, spec: Any) -> tuple[str, str, str]:
    """A server's identity across episodes: its alias, transport and program (a stdio server's arguments, which name
    each episode's workspace, left out) or URL."""
    return alias, str(spec.transport), str(getattr(spec, "command", None) or spec.describe())


def started(alias: str, spec: Any) -> None:
    """Note that this server connected (its later slow starts are load, not a misconfiguration)."""
    _STARTED.add(_server(alias, spec))


async def wait_ready(alias: str, spec: Any, ready: anyio.Event) -> None:
    """Wait for ``ready``, announcing the wait on the ``mcp_gym.client`` logger when it matters (see the module)."""
    half = spec.connect_timeout / 2
    with anyio.move_on_after(half if _server(alias, spec) in _STARTED else min(SLOW_CONNECT_NOTICE, half)):
        await ready.wait()
    if ready.is_set():
        return
    key = (alias, spec.describe())
    if key not in _WAITING:
        _WAITING.add(key)
        log.warning("mcp-gym: waiting for server '%s' (%s) to answer the MCP handshake (up to connect_timeout=%g s)",
                    alias, spec.describe(), spec.connect_timeout)
        try:
            await ready.wait()
        finally:
            _WAITING.discard(key)
    await ready.wait()
