"""A 2026-era stdio MCP server (mcp 2.x ``MCPServer``) that starts "slowly" in a deterministic way: the first process
started with a given marker path holds each ``server/discover`` it reads until the client's next message arrives, so
the client's probe is never answered before it gives up (its ``discover_timeout``) and falls back to ``initialize``.
The server then reads the queued probe first, serves the connection in the 2026-07-28 era and refuses the
``initialize`` (-32022), as a slow-importing server on a loaded machine does. Later processes (the marker exists)
serve at once, unless ``always`` is given: then every process holds its probes (a server that never answers in time).

Usage: python _slow_modern_server.py MARKER_PATH [always]
"""

from __future__ import annotations

import os
import sys
import threading

from mcp.server.mcpserver import MCPServer


def _relay(src: int, dst: int) -> None:
    """Copy the client's lines from ``src`` to ``dst``, each ``server/discover`` held back until another line."""
    held: bytes | None = None
    with os.fdopen(src, "rb", buffering=0) as inp, os.fdopen(dst, "wb", buffering=0) as out:
        buf = b""
        while chunk := inp.read(65536):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if held is not None:
                    out.write(held)
                    held = None
                if b'"server/discover"' in line:
                    held = line + b"\n"
                else:
                    out.write(line + b"\n")
        if held is not None:
            out.write(held)


def main() -> None:
    marker = sys.argv[1]
    with open(marker + ".starts", "a") as f:  # one line per process started
        f.write("started\n")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        first = False
    else:
        os.close(fd)
        first = True
    if first or sys.argv[2:] == ["always"]:  # the server reads its stdin through the relay
        client = os.dup(0)
        r, w = os.pipe()
        os.dup2(r, 0)
        os.close(r)
        threading.Thread(target=_relay, args=(client, w), daemon=True).start()

    mcp = MCPServer("slow-modern")

    @mcp.tool()
    def echo(text: str) -> str:
        """Say ``text`` back."""
        return text

    mcp.run("stdio")


if __name__ == "__main__":
    main()
