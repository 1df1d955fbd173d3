"""The one-time warning for a server that may carry state from one episode into the next: it has no ``mcp_gym_reset``
tool, is not restarted per episode, and a tool not annotated read-only just changed something on it (npm
``mcp-server-memory`` writing its own ``memory.jsonl``, a database server, ...)."""

from __future__ import annotations

import warnings
import weakref
from typing import Any

from mcp_gym.protocol import RESET_TOOL

__all__ = ["StatefulServerWarning", "note_state_change", "README_SECTION"]

README_SECTION = "docs/benchmarks.md, 'Stateful servers: one world per episode'"
"""The docs section on isolating stateful servers (named in the warning)."""

_warned: set[tuple[str, str]] = set()
_keys: weakref.WeakKeyDictionary[Any, tuple[str, str]] = weakref.WeakKeyDictionary()
"""Each connection's key in ``_warned`` (its spec's repr, made once: a step after the warning costs two lookups)."""


class StatefulServerWarning(UserWarning):
    """A server without ``mcp_gym_reset`` that is not restarted per episode changed state: later episodes see it."""


def note_state_change(env: Any, out: Any) -> None:
    """After a tool call of ``env`` (an :class:`~mcp_gym.env.MCPEnv`): warn once per server (per process) when the
    call succeeded on a tool not annotated ``readOnlyHint: true`` of a server whose state outlives the episode (no
    ``mcp_gym_reset`` tool under ``reset_mode=auto``, no ``{workspace}`` in its command line)."""
    alias = getattr(out, "server", None)
    result = getattr(out, "result", None)
    if alias is None or result is None or result.is_error:
        return
    entry = env.host.catalogue.get(out.tool)  # (host.resolve(), without its call)
    if entry is None or getattr(entry.tool.annotations, "read_only_hint", None) is True:
        return
    conn = env.host.connections[alias]
    key = _keys.get(conn)
    if key in _warned or env.reset_mode != "auto" or alias in env.workspace_servers:
        return
    if env.host.has_tool(alias, RESET_TOOL):
        return
    if key is None:
        spec = conn.spec  # its repr masks secrets: the key holds the values (in memory only)
        key = _keys[conn] = (alias, repr((str(spec), getattr(spec, "args", None),
                                          sorted((getattr(spec, "env", None) or {}).items()))))
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"mcp-gym: server '{alias}' has no {RESET_TOOL} tool and is not restarted per episode, and tool "
        f"'{out.server_tool}' may have changed its state: later episodes (and runs) see it. Give each episode its "
        f"own world: {README_SECTION} (a {{workspace}} in its command line or environment, or "
        "env.reset_mode=restart)", StatefulServerWarning, stacklevel=2)
