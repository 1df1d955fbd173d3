"""Running the bundled MCP servers (``servers/<env>.py``, the package :mod:`mcp_gym.servers`) and those of installed
env packages.

Each server module defines ``server``, an :class:`mcp_gym.serverkit.EpisodeServer`, and runs on its own::

    python -m mcp_gym.servers.notes                        # stdio
    python -m mcp_gym.servers.notes --transport http --port 8000
    mcp-gym serve notes --transport http --port 8000
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys
from collections.abc import Sequence

__all__ = ["serve", "main", "load_server"]

BUNDLED_SERVERS = ("notes", "files", "sql", "code", "maze", "lookup", "testing")
"""Names of the bundled servers (the server aliases the envs use; ``testing`` is Counter's server)."""

_FOLDERS = {"testing": "counter"}
"""Server name -> server module (``servers/<env>.py``, named after its env), where they differ."""


def server_module(name: str) -> str:
    """The module of a bundled server, ``mcp_gym.servers.<env>`` (for ``python -m``)."""
    if name not in BUNDLED_SERVERS:
        from mcp_gym.envs.packages import installed_env

        if (found := installed_env(name)) is not None:  # an installed env package's server, by the env's name
            return found.server_module()
        raise ValueError(f"unknown server {name!r}; choose one of {', '.join(BUNDLED_SERVERS)} or an installed env")
    return f"mcp_gym.servers.{_FOLDERS.get(name, name)}"


def load_server(name: str):  # -> EpisodeServer (typed loosely to keep imports light)
    """Import the bundled server ``name`` (``mcp_gym.servers.<env>``), or the server of the installed env
    ``name``, and return its ``server`` object."""
    if name not in BUNDLED_SERVERS:
        from mcp_gym.envs.packages import installed_env

        if (found := installed_env(name)) is not None:
            return found.load_server()
    return importlib.import_module(server_module(name)).server


def former_module(name: str, target: str) -> None:
    """Make module ``name`` a former name of module ``target``: imported, it is ``target`` (``sys.modules``); run with
    ``python -m``, it runs ``target`` as ``__main__``. The servers' former names (``mcp_gym.envs.<env>.server``,
    before they moved to ``servers/``) use it, so command lines and imports written with them keep working."""
    import runpy
    import sys

    if name == "__main__":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.modules[name] = importlib.import_module(target)


def serve(
    name: str, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8000, json_response: bool = False
) -> None:
    """Run a bundled server over ``stdio`` or Streamable ``http`` (``http://host:port/mcp``) until stopped. Over HTTP,
    ``port=0`` takes any free port, and once the server listens it says ``serving MODULE on http://HOST:PORT/mcp`` (the
    port it got) on stderr.

    Over HTTP, responses stream as SSE by default so progress and other notifications reach the client during a
    call; ``json_response=True`` answers with plain JSON (faster, but no notifications mid-call). Idle connections are
    kept 30 s and clients told so (:func:`mcp_gym.serverkit.serve_http`)."""
    from mcp_gym.envs._common import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()  # so atexit clean-up (e.g. temporary workspaces) runs when the server is terminated
    server = load_server(name)
    mcp = getattr(server, "mcp", server)  # an EpisodeServer, or an installed env's plain MCPServer
    try:
        if hasattr(server, "preflight"):
            server.preflight()
    except Exception as e:  # e.g. the Code server without an OS sandbox: one clear line, exit status 1
        raise SystemExit(f"{server_module(name)}: {e}") from None
    logging.getLogger("mcp").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    if transport == "stdio":
        mcp.run()
    elif transport in ("http", "streamable-http"):
        from mcp_gym.serverkit import serve_http, transport_security

        serve_http(mcp.streamable_http_app(json_response=json_response, host=host,
                                           transport_security=transport_security(host)), host, port,
                   log_level=mcp.settings.log_level.lower(), ready=lambda bound: print(
                       f"serving {server_module(name)} on http://{host}:{bound}/mcp", file=sys.stderr, flush=True))
    else:
        raise ValueError(f"unknown transport {transport!r}: use 'stdio' or 'http'")


def main(name: str, argv: Sequence[str] | None = None) -> None:
    """Command-line entry for ``python -m mcp_gym.servers.<env>``."""
    p = argparse.ArgumentParser(prog=f"python -m {server_module(name)}")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (0: any free one, named on stderr)")
    p.add_argument("--json-response", action="store_true", help="plain JSON responses over HTTP (no SSE)")
    a = p.parse_args(argv)
    serve(name, a.transport, a.host, a.port, a.json_response)
    gc.freeze()  # the process exits now: no last garbage collection over the SDK's objects (~0.1-0.25 s at every stop)
