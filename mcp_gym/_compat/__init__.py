"""Compatibility modules: every use of a dependency's private names lives here, one module per dependency.

mcp-gym reaches into a few internals where a dependency has no public way to do what it needs (each function says
why and what it costs without them). Only these modules touch them (``tests/test_layout.py`` checks it), and
``tests/test_compat.py`` fails, naming what moved, when an update of a dependency removes one. At run time a missing
name costs only what its function documents (speed, one check) and says so once, with a :class:`CompatWarning`.

* :mod:`mcp_gym._compat.mcp`: the MCP SDK (``mcp``);
* :mod:`mcp_gym._compat.mcp_wire`: the fast lane for ``tools/call`` and ``resources/read`` (stdio, Streamable
  HTTP), which speaks JSON-RPC itself and uses the SDK's public API only (it lives here for its tests' imports; it
  reaches no private name);
* :mod:`mcp_gym._compat.mcp_surface`: the negotiated version's schema of a result, as the SDK's session applies it
  (it reaches no private name);
* :mod:`mcp_gym._compat.mcp_output`: the output-schema check of ``tools/call`` results on every path (it reaches no
  private name);
* :mod:`mcp_gym._compat.verl`: verl's in-process table of agent loops (the optional ``[verl]`` extra);
* :mod:`mcp_gym._compat.uvicorn`: the undocumented attributes of uvicorn's HTTP protocol that the slow-client guard
  of :func:`mcp_gym.serverkit.serve_http` reads (no leading underscore, so listed by name);
* :mod:`mcp_gym._compat.stdlib`: the standard library (``json``'s C encoder, ``_signal``, ``re._parser``).

Each module's ``missing()`` lists the private names the installed dependency no longer has.
"""

from __future__ import annotations

import importlib.metadata
import platform
import warnings

__all__ = ["CompatWarning", "moved"]


class CompatWarning(RuntimeWarning):
    """A dependency no longer has a private name mcp-gym uses; the message says what that costs."""


_warned: set[str] = set()


def moved(dist: str, name: str, effect: str) -> None:
    """Warn once per ``name`` that the installed ``dist`` lacks it and what mcp-gym does instead (``effect``)."""
    if name in _warned:
        return
    _warned.add(name)
    try:
        version = platform.python_version() if dist == "Python" else importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a dependency installed without metadata
        version = "?"
    warnings.warn(f"mcp-gym: {name} is gone from {dist} {version}, so {effect} (mcp_gym/_compat needs an update)",
                  CompatWarning, stacklevel=3)
